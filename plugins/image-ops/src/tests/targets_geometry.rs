//! Boxes and keypoints land where the pixels went: a filled box drawn into a mask, and
//! single-pixel markers at the keypoints, transformed by the same call as the rows. Also the
//! config and input errors of the target keys.

use fe_plugin_api::tch::{Device, Kind, Tensor};

use super::{direct, floats, ints, run, seeded, testing};

const H: i64 = 24;
const W: i64 = 32;
/// The drawn box, pascal_voc: columns 5..13, rows 4..11.
const BOX: [i64; 4] = [5, 4, 13, 11];

/// A mask with `BOX` filled with 1.
fn box_mask() -> Tensor {
    let m = Tensor::zeros([H, W], (Kind::Uint8, Device::Cpu));
    let [x0, y0, x1, y1] = BOX;
    let _ = m.narrow(0, y0, y1 - y0).narrow(1, x0, x1 - x0).fill_(1);
    m
}

/// The bounding rectangle `[x_min, y_min, x_max + 1, y_max + 1]` of `mask`'s non-zero pixels.
fn bounding_rect(mask: &Tensor) -> [f64; 4] {
    let at = ints(&mask.nonzero());
    let (ys, xs): (Vec<i64>, Vec<i64>) = at.chunks(2).map(|p| (p[0], p[1])).unzip();
    let min_max = |v: &[i64]| (*v.iter().min().unwrap(), *v.iter().max().unwrap());
    let ((x0, x1), (y0, y1)) = (min_max(&xs), min_max(&ys));
    [x0, y0, x1 + 1, y1 + 1].map(|v| v as f64)
}

/// Op configs whose masks move with the image (nearest sampling where they resample).
const OPS: [(&str, &str); 16] = [
    ("HorizontalFlip", "p = 1.0"),
    ("VerticalFlip", "p = 1.0"),
    ("Flip", "p = 1.0"),
    ("Transpose", "p = 1.0"),
    ("RandomRotate90", "p = 1.0"),
    ("Crop", "x_min = 7\ny_min = 2\nx_max = 30\ny_max = 9"),
    ("CenterCrop", "height = 14\nwidth = 17"),
    ("RandomCrop", "height = 12\nwidth = 15"),
    ("RandomResizedCrop", "height = 20\nwidth = 16\nscale = [0.3, 1.0]\nmasks = [\"mask\"]"),
    ("RandomSizedCrop", "min_max_height = [10, 20]\nheight = 16\nwidth = 20\nmasks = [\"mask\"]"),
    ("Resize", "height = 41\nwidth = 19\ninterpolation = \"nearest\""),
    ("LongestMaxSize", "max_size = 45\nmasks = [\"mask\"]"),
    ("PadIfNeeded", "min_height = 40\nmin_width = 37\nposition = \"random\"\nborder_mode = \"constant\"\nmasks = [\"mask\"]"),
    ("Affine", "p = 1.0\nrotate = [-45, 45]\nscale = [0.8, 1.2]\nshear = [-10, 10]\nmasks = [\"mask\"]"),
    ("ShiftScaleRotate", "p = 1.0\nmasks = [\"mask\"]"),
    ("Rotate", "limit = 60\ninterpolation = \"nearest\"\nborder_mode = \"constant\""),
];

#[test]
fn a_drawn_box_lands_where_the_transformed_box_says() {
    let mask = box_mask();
    let bbox = Tensor::from_slice(&BOX.map(|v| v as f32)).reshape([1, 4]);
    let mut checked = 0;
    for (name, config) in OPS {
        let config = format!("{config}\nbboxes = [\"bbox\"]\nbbox_params = \"pascal_voc\"");
        let op = direct(name, &config, &["mask", "bbox"]);
        for seed in 0..8 {
            let out = run(op.as_ref(), &[&mask, &bbox], seed);
            let what = format!("{name} seed {seed}");
            if out[0].sum(Kind::Int64).int64_value(&[]) == 0 {
                assert_eq!(out[1].size()[0], 0, "{what}: the box left with its pixels");
                continue;
            }
            let moved = floats(&out[1]);
            let drawn = bounding_rect(&out[0]);
            for (a, b) in moved.iter().zip(drawn) {
                assert!(
                    (a - b).abs() <= 1.0,
                    "{what}: box {moved:?}, drawn region {drawn:?}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 80, "{checked} boxes checked");
}

/// albumentations moves keypoints as pixel indices: a marker pixel at a keypoint is found
/// at the moved keypoint after any move that does not resample.
#[test]
fn keypoint_markers_land_on_the_moved_keypoints() {
    let points = [[0, 0], [31, 23], [9, 5], [20, 17]];
    let mut checked = 0;
    for (name, config) in &OPS[..8] {
        let config = format!("{config}\nkeypoints = [\"kp\"]");
        let op = direct(name, &config, &["mask", "kp"]);
        for seed in 0..6 {
            for (i, [x, y]) in points.iter().enumerate() {
                let mask = Tensor::zeros([H, W], (Kind::Uint8, Device::Cpu));
                let _ = mask.get(*y).get(*x).fill_(1);
                let kp = Tensor::from_slice(&[*x as f32, *y as f32, i as f32]).reshape([1, 3]);
                let out = run(op.as_ref(), &[&mask, &kp], seed);
                let what = format!("{name} seed {seed} point {i}");
                let at = ints(&out[0].nonzero());
                match at.as_slice() {
                    [] => assert_eq!(out[1].size()[0], 0, "{what}: kept an invisible keypoint"),
                    [y, x] => {
                        assert_eq!(floats(&out[1]), [*x as f64, *y as f64, i as f64], "{what}");
                        checked += 1;
                    }
                    _ => panic!("{what}: marker at {at:?}"),
                }
            }
        }
    }
    assert!(checked > 100, "{checked} markers checked");
}

#[test]
fn target_keys_are_checked_when_the_op_is_built() {
    let build =
        |config: &str, keys: &[&str]| testing::numpy_op("HorizontalFlip", config, keys, keys).err();
    let err = build("bboxes = [\"bbox\"]", &["image", "bbox"]).unwrap();
    assert_eq!(
        err.field.as_str(),
        "bbox_params",
        "{}",
        err.message.as_str()
    );
    let err = build(
        "bboxes = [\"boxes\"]\nbbox_params = \"coco\"",
        &["image", "bbox"],
    )
    .unwrap();
    assert!(err
        .message
        .contains("`boxes` is not one of the op's inputs"));
    let err = build("bboxes = [\"bbox\"]\nbbox_params = \"coco\"", &["bbox"]).unwrap();
    assert!(
        err.message.as_str().contains("needs an image"),
        "{}",
        err.message.as_str()
    );
    let err = build(
        "bboxes = [\"b\"]\nbbox_params = { format = \"coco\", min_visibility = 2.0 }",
        &["i", "b"],
    )
    .unwrap();
    assert_eq!(err.field.as_str(), "bbox_params.min_visibility");
    let err = build("bboxes = [\"b\"]\nbbox_params = \"voc\"", &["i", "b"]).unwrap();
    assert!(
        err.field.as_str().starts_with("bbox_params"),
        "{}: {}",
        err.field.as_str(),
        err.message.as_str()
    );
    assert!(build(
        "keypoints = [\"k\"]\nkeypoint_params = { format = \"xy\", remove_invisible = false }",
        &["i", "k"]
    )
    .is_none());
}

#[test]
fn bad_rows_are_errors_naming_the_input_and_ops_with_targets_do_not_batch() {
    let op = direct(
        "CenterCrop",
        "height = 4\nwidth = 4\nbboxes = [\"b\"]\nbbox_params = \"pascal_voc\"",
        &["x", "b"],
    );
    assert!(!op.batchable(), "boxes are per-sample rows");
    let image = Tensor::zeros([8, 8, 3], (Kind::Uint8, Device::Cpu));
    let outside = Tensor::from_slice(&[1.0f32, 1.0, 9.0, 3.0]).reshape([1, 4]);
    let err = op.forward(&[&image, &outside], &seeded(0)).unwrap_err();
    assert!(
        err.message().contains("input `b`, box 0"),
        "{}",
        err.message()
    );
    let narrow = Tensor::from_slice(&[1.0f32, 1.0, 3.0]).reshape([1, 3]);
    let err = op.forward(&[&image, &narrow], &seeded(0)).unwrap_err();
    assert!(
        err.message()
            .contains("input `b`: expected rows of shape [N, 4 + k]"),
        "{}",
        err.message()
    );
    // No boxes at all is fine, and stays empty.
    let none = Tensor::zeros([0, 5], (Kind::Float, Device::Cpu));
    let out = op.forward(&[&image, &none], &seeded(0)).unwrap();
    assert_eq!(out[1].size(), [0, 5]);
    let op = direct(
        "HorizontalFlip",
        "p = 1.0\nkeypoints = [\"k\"]",
        &["x", "k"],
    );
    let outside = Tensor::from_slice(&[8.0f32, 1.0]).reshape([1, 2]);
    let err = op.forward(&[&image, &outside], &seeded(0)).unwrap_err();
    assert!(
        err.message().contains("input `k`, keypoint 0"),
        "{}",
        err.message()
    );
}
