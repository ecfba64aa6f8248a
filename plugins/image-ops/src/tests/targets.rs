//! Boxes and keypoints of the geometric ops against albumentations 2.0.8's `Compose` with
//! `BboxParams` / `KeypointParams(format="xy")`: the same rows kept, coordinates within
//! 1e-4 px, for the same drawn parameters.

use fe_plugin_api::tch::{Kind, Tensor};
use serde_json::{json, Value};

use super::reference::{albumentations_targets, TargetCase};
use super::{direct, floats, noise, run, typed};
use crate::affine::AffineDraw;
use crate::flips::Move;
use crate::warp::Affine2;
use crate::{Affine, Rotate, ShiftScaleRotate};
use crate::{Flip, PadIfNeeded, RandomCrop, RandomResizedCrop, RandomRotate90, RandomSizedCrop};

pub(super) const H: i64 = 24;
pub(super) const W: i64 = 32;

/// Pascal VOC boxes with a label column: inside, at the borders, the whole image, and
/// fractional ones, so crops cut some, drop others, and the filters have work to do.
pub(super) fn pascal() -> Vec<[f64; 5]> {
    vec![
        [2.0, 3.0, 10.0, 12.0, 1.0],
        [20.0, 1.0, 31.0, 9.0, 2.0],
        [5.0, 15.0, 28.0, 23.0, 3.0],
        [0.0, 0.0, 32.0, 24.0, 4.0],
        [14.5, 10.25, 17.75, 13.5, 5.0],
        [27.0, 17.0, 32.0, 24.0, 6.0],
    ]
}

/// Keypoints `x, y, label`, corners and edges included.
pub(super) fn keypoints() -> Tensor {
    let rows: [[f32; 3]; 6] = [
        [0.0, 0.0, 1.0],
        [31.0, 23.0, 2.0],
        [10.5, 7.25, 3.0],
        [25.0, 18.0, 4.0],
        [3.0, 20.0, 5.0],
        [16.0, 2.0, 6.0],
    ];
    Tensor::from_slice(rows.as_flattened()).reshape([6, 3])
}

/// The boxes in `format`, as float32 rows.
pub(super) fn boxes(format: &str) -> Tensor {
    let (w, h) = (W as f64, H as f64);
    let rows: Vec<f32> = pascal()
        .iter()
        .flat_map(|&[x0, y0, x1, y1, l]| {
            let r = match format {
                "pascal_voc" => [x0, y0, x1, y1],
                "coco" => [x0, y0, x1 - x0, y1 - y0],
                "yolo" => [
                    (x0 + x1) / 2.0 / w,
                    (y0 + y1) / 2.0 / h,
                    (x1 - x0) / w,
                    (y1 - y0) / h,
                ],
                _ => [x0 / w, y0 / h, x1 / w, y1 / h],
            };
            [r[0], r[1], r[2], r[3], l].map(|v| v as f32)
        })
        .collect();
    Tensor::from_slice(&rows).reshape([pascal().len() as i64, 5])
}

/// An op call: the Rust config (without the target keys), albumentations' transform, init
/// and, for random ops, the parameters the Rust op drew for `seed`.
pub(super) struct Call {
    pub name: &'static str,
    pub config: &'static str,
    pub transform: &'static str,
    pub init: Value,
    pub params: Value,
    pub seed: u64,
}

fn call(name: &'static str, config: &'static str, init: Value) -> Call {
    Call {
        name,
        config,
        transform: name,
        init,
        params: Value::Null,
        seed: 0,
    }
}

/// Every op and drawn parameter set the comparison covers.
pub(super) fn calls() -> Vec<Call> {
    let keys = ["image", "bbox", "kp"];
    let mut calls = vec![
        call("HorizontalFlip", "p = 1.0", json!({})),
        call("VerticalFlip", "p = 1.0", json!({})),
        call("Transpose", "p = 1.0", json!({})),
        call(
            "Crop",
            "x_min = 3\ny_min = 2\nx_max = 21\ny_max = 17",
            json!({"x_min": 3, "y_min": 2, "x_max": 21, "y_max": 17}),
        ),
        call(
            "CenterCrop",
            "height = 14\nwidth = 17",
            json!({"height": 14, "width": 17}),
        ),
        call(
            "Resize",
            "height = 30\nwidth = 20",
            json!({"height": 30, "width": 20}),
        ),
        call("LongestMaxSize", "max_size = 45", json!({"max_size": 45})),
        call("SmallestMaxSize", "max_size = 17", json!({"max_size": 17})),
        call(
            "PadIfNeeded",
            "min_height = 40\nmin_width = 40\nborder_mode = \"constant\"",
            json!({"min_height": 40, "min_width": 40, "border_mode": 0}),
        ),
        call(
            "PadIfNeeded",
            "min_height = 80\nmin_width = 45",
            json!({"min_height": 80, "min_width": 45, "border_mode": 4}),
        ),
        call(
            "PadIfNeeded",
            "min_height = 30\nmin_width = 90\nborder_mode = \"reflect\"\nposition = \"top_left\"",
            json!({"min_height": 30, "min_width": 90, "border_mode": 2, "position": "top_left"}),
        ),
    ];
    for seed in 0..4 {
        let flip = typed::<Flip>("p = 1.0", &keys).0.draw(seed);
        let (transform, params) = match flip {
            Move::Flip(0) => ("VerticalFlip", Value::Null),
            Move::Flip(1) => ("HorizontalFlip", Value::Null),
            _ => ("RandomRotate90", json!({"factor": 2})),
        };
        calls.push(Call {
            name: "Flip",
            config: "p = 1.0",
            transform,
            init: json!({}),
            params,
            seed,
        });
        let Move::Rot90(k) = typed::<RandomRotate90>("p = 1.0", &keys).0.draw(seed) else {
            panic!("p = 1 always turns");
        };
        calls.push(Call {
            params: json!({"factor": k}),
            seed,
            ..call("RandomRotate90", "p = 1.0", json!({}))
        });
        let (top, left) = typed::<RandomCrop>("height = 14\nwidth = 17", &keys).place(H, W, seed);
        calls.push(Call {
            params: json!({"crop_coords": [left, top, left + 17, top + 14]}),
            seed,
            ..call(
                "RandomCrop",
                "height = 14\nwidth = 17",
                json!({"height": 14, "width": 17}),
            )
        });
        let config = "height = 20\nwidth = 16\nscale = [0.3, 1.0]";
        let coords = typed::<RandomResizedCrop>(config, &keys).coords(H, W, seed);
        calls.push(Call {
            params: json!({"crop_coords": coords}),
            seed,
            ..call(
                "RandomResizedCrop",
                config,
                json!({"size": [20, 16], "scale": [0.3, 1.0]}),
            )
        });
        let config = "min_max_height = [10, 20]\nheight = 16\nwidth = 20\nw2h_ratio = 1.2";
        let coords = typed::<RandomSizedCrop>(config, &keys).coords(H, W, seed);
        calls.push(Call {
            params: json!({"crop_coords": coords}),
            seed,
            ..call(
                "RandomSizedCrop",
                config,
                json!({"min_max_height": [10, 20], "size": [16, 20], "w2h_ratio": 1.2}),
            )
        });
        let config = "min_height = 33\nmin_width = 41\nposition = \"random\"";
        let [t, b, l, r] = typed::<PadIfNeeded>(config, &keys).margins(H, W, seed);
        calls.push(Call {
            params: json!({"pad_top": t, "pad_bottom": b, "pad_left": l, "pad_right": r}),
            seed,
            ..call(
                "PadIfNeeded",
                config,
                json!({"min_height": 33, "min_width": 41, "border_mode": 4}),
            )
        });
    }
    calls.extend(affine_calls());
    for (config, border) in [
        ("limit = [-50, 50]", 4),
        ("limit = 30\nborder_mode = \"constant\"", 0),
    ] {
        let rotate = typed::<Rotate>(config, &keys);
        for seed in 0..4 {
            let turn = AffineDraw {
                translate: [0.0, 0.0],
                shear: [0.0, 0.0],
                scale: [1.0, 1.0],
                rotate: rotate.angle(seed),
            };
            let params = json!({
                "matrix": matrix3(turn.matrix(H, W)),
                "bbox_matrix": matrix3(turn.matrix_about(W as f64 / 2.0, H as f64 / 2.0)),
                "x_min": -1, "x_max": -1, "y_min": -1, "y_max": -1,
            });
            calls.push(Call {
                params,
                seed,
                ..call("Rotate", config, json!({"border_mode": border}))
            });
        }
    }
    calls
}

fn matrix3(m: Affine2) -> Value {
    json!([[m[0], m[1], m[2]], [m[3], m[4], m[5]], [0.0, 0.0, 1.0]])
}

/// `Affine` and `ShiftScaleRotate`, with plain and mirroring borders: albumentations applies
/// the Rust op's drawn matrices (pixel centres for keypoints, `bbox_matrix` for boxes).
fn affine_calls() -> Vec<Call> {
    let keys = ["image", "bbox", "kp"];
    let configs: [(&'static str, &'static str, i64); 4] = [
        (
            "Affine",
            "p = 1.0
scale = [0.7, 1.3]
rotate = [-60, 60]
shear = [-15, 15]
translate_percent = [-0.2, 0.2]",
            0,
        ),
        (
            "Affine",
            "p = 1.0
rotate = [-40, 40]
border_mode = \"reflect_101\"",
            4,
        ),
        (
            "ShiftScaleRotate",
            "p = 1.0
shift_limit = 0.2
scale_limit = [-0.4, 0.2]
border_mode = \"reflect\"",
            2,
        ),
        (
            "ShiftScaleRotate",
            "p = 1.0
rotate_limit = 90
border_mode = \"replicate\"",
            1,
        ),
    ];
    let mut calls = Vec::new();
    for (name, config, border) in configs {
        let inner = if name == "Affine" {
            typed::<Affine>(config, &keys).0
        } else {
            typed::<ShiftScaleRotate>(config, &keys).0
        };
        for seed in 0..4 {
            let d = inner.params(H, W, seed).expect("p = 1 always warps");
            let params = json!({
                "matrix": matrix3(d.matrix(H, W)),
                "bbox_matrix": matrix3(d.matrix_about(W as f64 / 2.0, H as f64 / 2.0)),
                "output_shape": [H, W],
                "scale": {"x": d.scale[0], "y": d.scale[1]},
                "rotate": d.rotate,
            });
            calls.push(Call {
                params,
                seed,
                ..call(name, config, json!({"border_mode": border}))
            });
        }
    }
    calls
}

/// The Rust `bbox_params` table and albumentations' `BboxParams` kwargs of each setting.
/// Thresholds sit off the fixtures' exact areas: albumentations stores normalised boxes as
/// float32, so a box whose area equals `min_area` exactly can fall either side there.
pub(super) fn bbox_settings() -> [(&'static str, &'static str, Value); 4] {
    [
        (
            "pascal_voc",
            "{ format = \"pascal_voc\", min_visibility = 0.3 }",
            json!({"format": "pascal_voc", "min_visibility": 0.3}),
        ),
        (
            "coco",
            "{ format = \"coco\", min_area = 19.5 }",
            json!({"format": "coco", "min_area": 19.5}),
        ),
        ("yolo", "\"yolo\"", json!({"format": "yolo"})),
        (
            "albumentations",
            "{ format = \"albumentations\", min_width = 3.0, min_height = 2.0 }",
            json!({"format": "albumentations", "min_width": 3.0, "min_height": 2.0}),
        ),
    ]
}

/// `out` (image, boxes, keypoints) equals albumentations' within 1e-4 px: the image's shape,
/// boxes (normalised formats in fractions of the larger side of the output image) and
/// keypoints.
pub(super) fn assert_targets_match(
    what: &str,
    format: &str,
    out: &[Tensor],
    [image, bbox, points]: [&Tensor; 3],
) {
    assert_eq!(out[0].size(), image.size(), "{what}: image shape");
    let [h, w] = [image.size()[0], image.size()[1]].map(|v| v as f64);
    let tol = match format {
        "yolo" | "albumentations" => 1e-4 / h.max(w),
        _ => 1e-4,
    };
    let d = row_diff(&format!("{what} boxes"), &out[1], bbox);
    assert!(
        d <= tol,
        "{what} boxes differ by {d}\nours {}\nalbumentations {bbox}",
        out[1]
    );
    let d = row_diff(&format!("{what} keypoints"), &out[2], points);
    assert!(
        d <= 1e-4,
        "{what} keypoints differ by {d}\nours {}\nalbumentations {points}",
        out[2]
    );
}

/// Largest difference between two row sets, after checking they have the same shape.
pub(super) fn row_diff(what: &str, ours: &Tensor, reference: &Tensor) -> f64 {
    let (n, r) = (ours.size()[0], reference.size()[0]);
    assert_eq!(
        n, r,
        "{what}: {n} rows kept, albumentations keeps {r}\nours {ours}\nalbumentations {reference}"
    );
    if n == 0 {
        return 0.0;
    }
    assert_eq!(ours.size(), reference.size(), "{what}: columns");
    floats(ours)
        .iter()
        .zip(floats(reference))
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max)
}

/// One call of [`compare_targets`] in one box format: what ran, our outputs and the boxes given.
pub(super) struct Compared {
    pub what: String,
    pub out: Vec<Tensor>,
    pub given: Tensor,
}

/// Runs every call in every box format through our op (inputs `image`, boxes, keypoints)
/// and through albumentations' `Compose` with the parameters the op drew, asserts that
/// they agree ([`assert_targets_match`]) and hands ours back for the caller's coverage
/// counts.
pub(super) fn compare_targets(calls: &[Call], image: &Tensor) -> Vec<Compared> {
    let kp = keypoints();
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for c in calls {
        for (format, table, bbox_params) in bbox_settings() {
            let config = format!(
                "{}\nbboxes = [\"bbox\"]\nbbox_params = {table}\nkeypoints = [\"kp\"]",
                c.config
            );
            let op = direct(c.name, &config, &["image", "bbox", "kp"]);
            let bbox = boxes(format);
            let out = run(op.as_ref(), &[image, &bbox, &kp], c.seed);
            let what = format!("{} ({}) seed {} {format}", c.name, c.config, c.seed);
            ours.push((what, format, out, bbox.shallow_clone()));
            cases.push(TargetCase {
                transform: c.transform,
                init: c.init.clone(),
                params: c.params.clone(),
                bbox_params,
                image: image.shallow_clone(),
                bboxes: bbox,
                keypoints: kp.shallow_clone(),
            });
        }
    }
    ours.into_iter()
        .zip(albumentations_targets(&cases))
        .map(|((what, format, out, given), [image, bbox, points])| {
            assert_targets_match(&what, format, &out, [&image, &bbox, &points]);
            Compared { what, out, given }
        })
        .collect()
}

#[test]
fn boxes_and_keypoints_match_albumentations_for_the_drawn_parameters() {
    let (mut dropped, mut added) = (0, 0);
    for Compared { what, out, .. } in compare_targets(&calls(), &noise(&[H, W, 3], 21)) {
        assert_eq!(out[1].kind(), Kind::Float, "{what}: boxes keep float32");
        let n = out[1].size()[0];
        dropped += i64::from(n < 6);
        added += i64::from(n > 6);
    }
    // The fixtures exercise the filter and the reflected copies, not only the moves.
    assert!(
        dropped > 20 && added > 10,
        "dropped in {dropped} calls, added in {added}"
    );
}
