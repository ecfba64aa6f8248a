//! `ImageSaver` (fe-image-ops) through the real binary: the montage PNG lands in the run's
//! output directory with the documented layout (tests pin the pixels of known inputs at known
//! places), and the `TensorBoard` trace files the same picture as an image summary.

use std::path::Path;

use fe_host::report::read_events;

use crate::metrics::run;
use crate::util::{run_python_helper, TempDir};

/// Pixel `c` of row `r`, channel `ch` of sample `i` in the generated images.
fn pixel(i: usize, r: usize, c: usize, ch: usize) -> u8 {
    ((i * 37 + r * 11 + c * 5 + ch * 70) % 256) as u8
}

const DATA: &str = r#"
import numpy as np
i, r, c, ch = np.meshgrid(np.arange(40), np.arange(8), np.arange(6), np.arange(3), indexing="ij")
np.save("x.npy", ((i * 37 + r * 11 + c * 5 + ch * 70) % 256).astype(np.uint8))
np.save("y.npy", (np.arange(40) % 10).astype(np.int64))
"#;

/// (width, height, RGB bytes) of a PNG.
fn decode(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

fn event_files(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

/// A 2-epoch run of the generated images with `ImageSaver` (6 samples, doubled) and
/// `TensorBoard`, in `dir`.
fn manifest(dir: &TempDir) -> String {
    run_python_helper(dir.path(), DATA, &[]);
    let d = dir.path().display();
    let files = format!("{{ x = \"{d}/x.npy\", y = \"{d}/y.npy\" }}");
    format!(
        "[run]\nepochs = 2\nseed = 1\ntrain_steps_per_epoch = 1\n\n[pipeline]\nbatch_size = 4\n\n\
         [pipeline.data.train]\ntype = \"npy\"\nfiles = {files}\n\n\
         [pipeline.data.eval]\ntype = \"npy\"\nfiles = {files}\n\n\
         [[traces]]\ntrace = \"ImageSaver\"\ninputs = [\"x\", \"y\"]\noutputs = \"montage\"\n\
         samples = 6\nscale = 2\n\n\
         [[traces]]\ntrace = \"TensorBoard\"\nlog_dir = \"tb\"\n"
    )
}

#[test]
fn image_saver_writes_a_montage_png_and_a_tensorboard_image() {
    let dir = TempDir::new("image-saver");
    let manifest = manifest(&dir);
    run(&dir, 1, &manifest);
    let png = std::fs::read(dir.path().join("images/eval_epoch_2.png")).unwrap();
    let (width, height, rgb) = decode(&png);
    // Columns: the 6×8 image doubled (12 wide) and the label bar (48); rows: 16 high (the
    // doubled image) for 6 samples — two batches of 4 fill them; 2-pixel gaps.
    assert_eq!((width, height), (2 + 12 + 2 + 48 + 2, 2 + 6 * (16 + 2)));
    let at = |x: usize, y: usize| &rgb[(y * width as usize + x) * 3..][..3];
    for sample in [0, 5] {
        let top = 2 + sample * 18;
        for (r, c) in [(0, 0), (7, 5), (3, 2)] {
            let want: Vec<u8> = (0..3).map(|ch| pixel(sample, r, c, ch)).collect();
            // Each source pixel covers 2×2 montage pixels.
            assert_eq!(
                at(2 + 2 * c + 1, top + 2 * r + 1),
                want,
                "sample {sample} ({r}, {c})"
            );
        }
        // The label (sample % 10) as a bar in tab10's colour, the background beside it.
        let tab10 = [
            [31, 119, 180],
            [255, 127, 14],
            [44, 160, 44],
            [214, 39, 40],
            [148, 103, 189],
            [140, 86, 75],
        ];
        assert_eq!(at(16, top), tab10[sample]);
        assert_eq!(at(16, top + 12), [40, 40, 40]);
    }
    assert!(dir.path().join("images/eval_epoch_1.png").is_file());
    assert!(
        !dir.path().join("images/train_epoch_1.png").exists(),
        "eval and test only"
    );

    let tb = event_files(&dir.path().join("tb/eval"));
    assert_eq!(tb.len(), 1, "{tb:?}");
    let images: Vec<_> = read_events(&tb[0])
        .unwrap()
        .into_iter()
        .flat_map(|e| e.values.into_iter().map(move |v| (e.step, v)))
        .filter(|(_, v)| v.tag == "montage")
        .collect();
    assert_eq!(
        images.iter().map(|(step, _)| *step).collect::<Vec<_>>(),
        [1, 2]
    );
    let image = images[1].1.image.as_ref().expect("an image summary");
    assert_eq!(
        (image.width, image.height, image.colorspace),
        (width, height, 3)
    );
    assert_eq!(
        decode(&image.encoded).2,
        rgb,
        "TensorBoard shows the PNG's picture"
    );
}

/// On 2 ranks the montage is written by rank 0 and shows rank 0's first samples: evaluation
/// interleaves the samples among the ranks, so its row `k` is sample `2k` (a trace sees its
/// own rank's batches; the README says so). Same layout as one process's.
#[test]
fn on_two_ranks_rank_0_writes_the_montage_of_its_share() {
    let single = TempDir::new("image-saver-1");
    run(&single, 1, &manifest(&single));
    let ranks = TempDir::new("image-saver-2");
    run(&ranks, 2, &manifest(&ranks));
    let png =
        |dir: &TempDir| decode(&std::fs::read(dir.path().join("images/eval_epoch_2.png")).unwrap());
    let (width, height, rgb) = png(&ranks);
    assert_eq!((width, height), (png(&single).0, png(&single).1));
    let at = |x: usize, y: usize| &rgb[(y * width as usize + x) * 3..][..3];
    for row in 0..6 {
        let top = 2 + row * 18;
        let want: Vec<u8> = (0..3).map(|ch| pixel(2 * row, 7, 5, ch)).collect();
        assert_eq!(at(2 + 2 * 5 + 1, top + 2 * 7 + 1), want, "row {row}");
    }
}
