//! Keypoint formats with angles and scales (`xya`, `xys`, `xyas`, `xysa`) and `yx` under every
//! geometric op and drawn parameter set of `targets.rs`, against albumentations 2.0.8's
//! `Compose` with `KeypointParams(format=..., angle_in_degrees=...)`: the same rows kept,
//! positions within 1e-4 px, angles within 1e-3° (float32 radians in albumentations), scales
//! within 1e-4.

use fe_plugin_api::tch::Tensor;
use serde_json::json;

use super::reference::{albumentations_targets_with, TargetCase};
use super::targets::{boxes, calls};
use super::{direct, floats, noise, run};

const H: i64 = 24;
const W: i64 = 32;

/// `x, y, angle (degrees), scale, label`: corners and edges, angles on and on both sides of
/// 180° (where a transpose changes its rule).
const POINTS: [[f64; 5]; 7] = [
    [0.0, 0.0, 0.0, 1.0, 1.0],
    [31.0, 23.0, 45.0, 2.5, 2.0],
    [10.5, 7.25, 90.0, 0.5, 3.0],
    [25.0, 18.0, 179.5, 1.5, 4.0],
    [3.0, 20.0, 300.5, 3.0, 5.0],
    [16.0, 2.0, 200.0, 1.0, 6.0],
    [20.0, 12.0, 180.0, 2.0, 7.0],
];

/// A format, whether its angles are degrees, and where its angle column is.
struct Format {
    name: &'static str,
    degrees: bool,
    angle: Option<usize>,
}

const FORMATS: [Format; 6] = [
    Format {
        name: "xya",
        degrees: true,
        angle: Some(2),
    },
    Format {
        name: "xys",
        degrees: true,
        angle: None,
    },
    Format {
        name: "xyas",
        degrees: true,
        angle: Some(2),
    },
    Format {
        name: "xysa",
        degrees: true,
        angle: Some(3),
    },
    Format {
        name: "xyas",
        degrees: false,
        angle: Some(2),
    },
    Format {
        name: "yx",
        degrees: true,
        angle: None,
    },
];

/// `POINTS` written in `f`, as float32 rows.
fn rows(f: &Format) -> Tensor {
    let flat: Vec<f32> = POINTS
        .iter()
        .flat_map(|&[x, y, a, s, label]| {
            let a = if f.degrees { a } else { a.to_radians() };
            let row = match f.name {
                "xya" => vec![x, y, a, label],
                "xys" => vec![x, y, s, label],
                "xyas" => vec![x, y, a, s, label],
                "xysa" => vec![x, y, s, a, label],
                _ => vec![y, x, label],
            };
            row.into_iter().map(|v| v as f32)
        })
        .collect();
    let cols = flat.len() as i64 / POINTS.len() as i64;
    Tensor::from_slice(&flat).reshape([POINTS.len() as i64, cols])
}

#[test]
fn keypoint_formats_match_albumentations_for_the_drawn_parameters() {
    let image = noise(&[H, W, 3], 22);
    let bbox = boxes("pascal_voc");
    let (mut changed, mut compared) = (0, 0);
    for f in &FORMATS {
        let kp = rows(f);
        let table = format!(
            "{{ format = \"{}\", angle_in_degrees = {} }}",
            f.name, f.degrees
        );
        let (mut cases, mut ours) = (Vec::new(), Vec::new());
        for c in calls().into_iter().chain(super::targets_distort::calls()) {
            let config = format!(
                "{}\nkeypoints = [\"kp\"]\nkeypoint_params = {table}",
                c.config
            );
            let op = direct(c.name, &config, &["image", "kp"]);
            let out = run(op.as_ref(), &[&image, &kp], c.seed).remove(1);
            ours.push((format!("{} seed {} {table}", c.name, c.seed), out));
            cases.push(TargetCase {
                transform: c.transform,
                init: c.init.clone(),
                params: c.params.clone(),
                bbox_params: json!({"format": "pascal_voc"}),
                image: image.shallow_clone(),
                bboxes: bbox.shallow_clone(),
                keypoints: kp.shallow_clone(),
            });
        }
        let params = json!({"format": f.name, "angle_in_degrees": f.degrees});
        let turn = if f.degrees {
            360.0
        } else {
            std::f64::consts::TAU
        };
        let before = floats(&kp);
        for ((what, out), [_, _, theirs]) in ours
            .iter()
            .zip(albumentations_targets_with(&cases, &params))
        {
            let (n, r) = (out.size()[0], theirs.size()[0]);
            assert_eq!(n, r, "{what}: {n} rows kept, albumentations keeps {r}\nours {out}\nalbumentations {theirs}");
            if n == 0 {
                continue;
            }
            assert_eq!(out.size(), theirs.size(), "{what}: columns");
            let cols = out.size()[1] as usize;
            for (i, (a, b)) in floats(out).iter().zip(floats(&theirs)).enumerate() {
                let col = i % cols;
                let d = if Some(col) == f.angle {
                    // Circular: 359.9999° and 0° are the same direction.
                    let d = (a - b).rem_euclid(turn);
                    d.min(turn - d) * 360.0 / turn
                } else {
                    (a - b).abs()
                };
                let tolerance = if Some(col) == f.angle { 1e-3 } else { 1e-4 };
                assert!(d <= tolerance, "{what}: row {} column {col} differs by {d}\nours {out}\nalbumentations {theirs}", i / cols);
                compared += 1;
            }
            if let Some(col) = f.angle {
                let moved = floats(out);
                changed += (0..n as usize)
                    .filter(|&r| {
                        let label = moved[r * cols + cols - 1] as usize;
                        (moved[r * cols + col] - before[(label - 1) * cols + col]).abs() > 1e-3
                    })
                    .count();
            }
        }
    }
    assert!(compared > 5000, "{compared} values compared");
    assert!(changed > 300, "angles changed in {changed} rows");
}

#[test]
fn formats_name_their_columns_and_short_rows_are_errors() {
    let op = direct(
        "HorizontalFlip",
        "p = 1.0\nkeypoints = [\"k\"]\nkeypoint_params = \"xyas\"",
        &["x", "k"],
    );
    let image = noise(&[8, 8, 3], 23);
    let short = Tensor::from_slice(&[1.0f32, 2.0, 30.0]).reshape([1, 3]);
    let err = op
        .forward(&[&image, &short], &super::seeded(0))
        .unwrap_err();
    assert!(
        err.message()
            .contains("input `k`: expected rows of shape [N, 4 + k]"),
        "{}",
        err.message()
    );
    // x = 1 mirrors to 6, the angle 30° to 150°, the scale stays.
    let row = Tensor::from_slice(&[1.0f32, 2.0, 30.0, 2.0]).reshape([1, 4]);
    let out = op.forward(&[&image, &row], &super::seeded(0)).unwrap();
    let got = floats(&out[1]);
    for (a, b) in got.iter().zip([6.0, 2.0, 150.0, 2.0]) {
        assert!((a - b).abs() < 1e-4, "{got:?}");
    }
    let bad = fe_plugin_api::testing::numpy_op(
        "HorizontalFlip",
        "keypoints = [\"k\"]\nkeypoint_params = \"xyz\"",
        &["x", "k"],
        &["x", "k"],
    );
    assert!(bad.is_err(), "3-D keypoints are not supported");
}
