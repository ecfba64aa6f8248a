//! Bounding boxes end to end through the real pipeline: a WebDataset shard of PNG images
//! with a varying number of boxes each (`.npy` rows `x_min, y_min, x_max, y_max, label`),
//! decoded by `ReadImage`, moved by fe-image-ops' geometric ops together with the image, and
//! batched by the `Batch` op, which pads the ragged box arrays with its `pad_value`. Each box
//! is drawn filled in its own grey level, so a moved box must still cover exactly its
//! pixels in the moved image.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;

use fe_host::manifest::Manifest;
use fe_host::network::Keys;
use fe_host::pipeline::Pipeline;
use fe_plugin_api::Mode;

use crate::util::{root, TempDir};

const SAMPLES: usize = 10;
const BATCH: usize = 4;
const PAD: f32 = -1.0;

/// One shard, `s.tar`: sample `i` is a 24 × 32 black PNG with `1 + i % 3` disjoint boxes,
/// box `k` filled with grey `60 (k + 1)` and labelled `k`.
fn write_shard(dir: &std::path::Path) {
    let script = r#"
import io, sys, tarfile, numpy as np, cv2
out = sys.argv[1]
with tarfile.open(f"{out}/s.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
    for i in range(10):
        image = np.zeros((24, 32, 3), np.uint8)
        rows = []
        for k in range(1 + i % 3):
            x0, y0 = 1 + 10 * k + i % 2, 2 + (i + k) % 5
            x1, y1 = x0 + 4 + k, y0 + 6 + (i % 4)
            image[y0:y1, x0:x1] = 60 * (k + 1)
            rows.append([x0, y0, x1, y1, k])
        png = cv2.imencode(".png", image)[1].tobytes()
        npy = io.BytesIO(); np.save(npy, np.array(rows, np.float32))
        for ext, data in (("png", png), ("npy", npy.getvalue())):
            info = tarfile.TarInfo(f"{i:04d}.{ext}"); info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
"#;
    let status = Command::new(root().join(".venv/bin/python"))
        .args(["-c", script, &dir.to_string_lossy()])
        .status()
        .unwrap();
    assert!(status.success());
}

const OPS: &str = r#"
[[pipeline.ops]]
op = "ReadImage"
inputs = "image"
outputs = "image"

[[pipeline.ops]]
op = "HorizontalFlip"
inputs = ["image", "boxes"]
outputs = ["image", "boxes"]
bboxes = ["boxes"]
bbox_params = "pascal_voc"
p = 0.5

[[pipeline.ops]]
op = "RandomRotate90"
inputs = ["image", "boxes"]
outputs = ["image", "boxes"]
bboxes = ["boxes"]
bbox_params = "pascal_voc"

[[pipeline.ops]]
op = "PadIfNeeded"
inputs = ["image", "boxes"]
outputs = ["image", "boxes"]
bboxes = ["boxes"]
bbox_params = "pascal_voc"
min_height = 40
min_width = 40
border_mode = "constant"

[[pipeline.ops]]
op = "Batch"
batch_size = 4
pad_value = -1.0
"#;

#[test]
fn boxes_move_with_their_images_and_batch_padded_through_the_real_pipeline() {
    let dir = TempDir::new("boxes-pipeline");
    write_shard(dir.path());
    let text = format!(
        "[run]\nepochs = 1\nseed = 3\n\n[pipeline]\nbatch_size = {BATCH}\n\n\
         [pipeline.data.train]\ntype = \"webdataset\"\nurls = \"s.tar\"\nshuffle_buffer = 0\n\
         keys = {{ png = \"image\", npy = \"boxes\" }}\n{OPS}"
    );
    let manifest = Manifest::load(&dir.write("m.toml", &text)).unwrap();
    let registry = crate::network::registry();
    let mut keys = Keys::default();
    let pipeline = Pipeline::build(&manifest, &registry, &mut keys).unwrap();
    let keys = Arc::new(keys);
    let [image, boxes] = ["image", "boxes"].map(|k| keys.get(k).unwrap());
    let wanted: BTreeSet<_> = [image, boxes].into();
    let loader = pipeline
        .epoch_from(Mode::Train, 1, "", &wanted, None, &keys, 0)
        .unwrap();
    let (mut samples, mut real_boxes, mut padded_rows, mut turned) = (0, 0, 0, 0);
    for batch in loader {
        let batch = batch.unwrap();
        let images = batch.get(image).unwrap();
        let rows = batch.get(boxes).unwrap();
        let (n, most) = (rows.size()[0], rows.size()[1]);
        assert_eq!(rows.size()[2], 5, "{:?}", rows.size());
        assert_eq!(images.size()[0], n);
        for s in 0..n {
            let picture = images.get(s);
            let (h, w) = (picture.size()[0], picture.size()[1]);
            assert_eq!((h, w), (40, 40), "PadIfNeeded's size");
            let pixels = Vec::<u8>::try_from(picture.select(2, 0).flatten(0, -1)).unwrap();
            let table = Vec::<f32>::try_from(rows.get(s).flatten(0, -1)).unwrap();
            let mut drawn = 0;
            for row in table.chunks(5) {
                if row.iter().all(|&v| v == PAD) {
                    padded_rows += 1;
                    continue;
                }
                let [x0, y0, x1, y1, label] = [row[0], row[1], row[2], row[3], row[4]];
                let grey = 60 * (label as u8 + 1);
                if (x1 - x0 - (4.0 + label)).abs() > 0.5 {
                    turned += 1;
                }
                // Every pixel inside the box has its grey; the box's grey appears nowhere else.
                let mut inside = 0;
                for y in 0..h {
                    for x in 0..w {
                        let within = (x as f32) >= x0
                            && (x as f32) < x1
                            && (y as f32) >= y0
                            && (y as f32) < y1;
                        let here = pixels[(y * w + x) as usize] == grey;
                        assert_eq!(
                            within,
                            here,
                            "sample {s} box {row:?}: pixel ({x}, {y}) {}",
                            if within {
                                "inside lost its grey"
                            } else {
                                "outside has the grey"
                            }
                        );
                        inside += i64::from(within);
                    }
                }
                assert_eq!(inside as f32, (x1 - x0) * (y1 - y0), "{row:?}");
                drawn += 1;
            }
            assert!(drawn >= 1, "sample {s}: no box kept: {table:?}");
            real_boxes += drawn;
            samples += 1;
        }
        // Padded to the batch's longest box list, not to a fixed size.
        let longest = (0..n)
            .map(|s| {
                let table = Vec::<f32>::try_from(rows.get(s).flatten(0, -1)).unwrap();
                table
                    .chunks(5)
                    .filter(|r| r.iter().any(|&v| v != PAD))
                    .count() as i64
            })
            .max()
            .unwrap();
        assert_eq!(most, longest);
    }
    assert_eq!(samples, SAMPLES as i64);
    // 1 + i % 3 boxes for i in 0..10.
    assert_eq!(real_boxes, 19);
    assert!(padded_rows > 0, "the batches were ragged");
    assert!(turned > 0, "RandomRotate90 turned some boxes");
}
