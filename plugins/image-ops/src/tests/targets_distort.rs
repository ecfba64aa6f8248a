//! Boxes and keypoints of the non-affine warps (`Perspective`, `GridDistortion`,
//! `ElasticTransform`, `OpticalDistortion`, `PiecewiseAffine`) and the dropout ops (`CoarseDropout`, `GridMask`)
//! against albumentations 2.0.8's `Compose` for the parameters the Rust op drew, and a box
//! drawn into a mask landing where the moved box says.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::{json, Value};

use super::targets::{compare_targets, Call, Compared, H, W};
use super::{direct, floats, ints, run, typed};
use crate::distort::grid_axis;
use crate::perspective::{corners, perspective_params};
use crate::piecewise::piecewise_maps;
use crate::{CoarseDropout, ElasticTransform, GridDistortion, GridMask};
use crate::{OpticalDistortion, Perspective, PiecewiseAffine};

/// Row-major `H × W` float32 maps as nested lists.
fn grid(map: &[f32]) -> Value {
    let rows: Vec<Vec<f64>> = map
        .chunks(W as usize)
        .map(|r| r.iter().map(|&v| f64::from(v)).collect())
        .collect();
    json!(rows)
}

fn remap_call(name: &'static str, config: &'static str, seed: u64, maps: [Vec<f32>; 2]) -> Call {
    let method = if config.contains("direct") {
        "direct"
    } else {
        "mask"
    };
    Call {
        name,
        config,
        transform: name,
        init: json!({ "keypoint_remapping_method": method }),
        params: json!({"map_x": grid(&maps[0]), "map_y": grid(&maps[1])}),
        seed,
    }
}

const PERSPECTIVE: &str = "scale = [0.05, 0.3]\np = 1.0";
/// The other `keep_size` / `fit_output` settings, and albumentations' init for them.
const PERSPECTIVE_SIZES: [(&str, &str); 3] = [
    (
        "scale = [0.05, 0.3]\nkeep_size = false\np = 1.0",
        r#"{"keep_size": false}"#,
    ),
    (
        "scale = [0.05, 0.3]\nfit_output = true\np = 1.0",
        r#"{"fit_output": true}"#,
    ),
    (
        "scale = [0.05, 0.3]\nkeep_size = false\nfit_output = true\np = 1.0",
        r#"{"keep_size": false, "fit_output": true}"#,
    ),
];
const GRID: &str = "num_steps = 4\ndistort_limit = 0.5\np = 1.0";
const GRID_DIRECT: &str =
    "num_steps = 4\ndistort_limit = 0.5\np = 1.0\nkeypoint_remapping_method = \"direct\"";
const ELASTIC: &str = "alpha = 40.0\nsigma = 4.0\np = 1.0";
const ELASTIC_DIRECT: &str =
    "alpha = 40.0\nsigma = 4.0\np = 1.0\nkeypoint_remapping_method = \"direct\"";
const CAMERA: &str = "distort_limit = 0.6\np = 1.0";
const CAMERA_DIRECT: &str = "distort_limit = 0.6\np = 1.0\nkeypoint_remapping_method = \"direct\"";
const FISHEYE: &str = "distort_limit = 0.6\ndistortion_mode = \"fisheye\"\np = 1.0";
const PIECEWISE: &str = "scale = [0.1, 0.2]\nnb_rows = [3, 5]\np = 1.0";
const PIECEWISE_DIRECT: &str =
    "scale = [0.1, 0.2]\nnb_rows = [3, 5]\np = 1.0\nkeypoint_remapping_method = \"direct\"";
const DROPOUT: &str =
    "max_holes = 6\nmin_holes = 2\nmax_height = 9\nmin_height = 3\nmax_width = 11\nmin_width = 4\np = 1.0";
const GRID_MASK: &str = "d_range = [6, 12]\nratio = 0.5\nrotate_angle = 30.0";

/// Every op and drawn parameter set the comparison covers.
pub(super) fn calls() -> Vec<Call> {
    let keys = ["image"];
    let (h, w) = (H as usize, W as usize);
    let mut calls = Vec::new();
    for seed in 0..4 {
        let op = typed::<Perspective>(PERSPECTIVE, &keys);
        let (m, max_w, max_h) = perspective_params(corners(&op.jitter(seed).unwrap(), H, W), H, W);
        let m3 = json!([[m[0], m[1], m[2]], [m[3], m[4], m[5]], [m[6], m[7], m[8]]]);
        calls.push(Call {
            name: "Perspective",
            config: PERSPECTIVE,
            transform: "Perspective",
            init: json!({}),
            params: json!({"matrix": m3, "matrix_bbox": m3, "max_width": max_w, "max_height": max_h}),
            seed,
        });
        // albumentations computes these from our corner normals, output size included.
        for (config, init) in PERSPECTIVE_SIZES {
            let normals = typed::<Perspective>(config, &keys).jitter(seed).unwrap();
            calls.push(Call {
                name: "Perspective",
                config,
                transform: "Perspective",
                init: serde_json::from_str(init).unwrap(),
                params: json!({ "normals": normals }),
                seed,
            });
        }
        let op = typed::<GridDistortion>(GRID, &keys);
        let [sx, sy] = op.params(H, W, seed).unwrap();
        let (xs, ys) = (grid_axis(w, 4, &sx), grid_axis(h, 4, &sy));
        let map_x = (0..h).flat_map(|_| xs.iter().map(|&v| v as f32)).collect();
        let map_y = ys
            .iter()
            .flat_map(|&v| std::iter::repeat_n(v as f32, w))
            .collect();
        let maps: [Vec<f32>; 2] = [map_x, map_y];
        calls.push(remap_call(
            "GridDistortion",
            GRID_DIRECT,
            seed,
            maps.clone(),
        ));
        calls.push(remap_call("GridDistortion", GRID, seed, maps));
        for config in [ELASTIC, ELASTIC_DIRECT] {
            let op = typed::<ElasticTransform>(config, &keys);
            let maps = op.maps(op.noise(H, W, seed).unwrap(), h, w);
            calls.push(remap_call("ElasticTransform", config, seed, maps));
        }
        for config in [CAMERA, FISHEYE, CAMERA_DIRECT] {
            let op = typed::<OpticalDistortion>(config, &keys);
            let maps = op.maps(op.k(seed).unwrap(), h, w);
            calls.push(remap_call("OpticalDistortion", config, seed, maps));
        }
        for config in [PIECEWISE, PIECEWISE_DIRECT] {
            let draw = typed::<PiecewiseAffine>(config, &keys)
                .draw(H, W, seed)
                .unwrap();
            let maps = piecewise_maps(&draw, h, w);
            calls.push(remap_call("PiecewiseAffine", config, seed, maps));
        }
        let holes = typed::<CoarseDropout>(DROPOUT, &keys).holes(H, W, seed);
        calls.push(Call {
            name: "CoarseDropout",
            config: DROPOUT,
            transform: "CoarseDropout",
            init: json!({}),
            params: json!({ "holes": holes, "seed": 0 }),
            seed,
        });
        // albumentations has no GridMask (FastEstimator's own op): its dropped pixels as
        // 1 x 1 CoarseDropout holes give albumentations' dropout rule for the same grid.
        let op = typed::<GridMask>(GRID_MASK, &keys);
        let keep = ints(&op.keep(op.grid(seed).unwrap(), H, W).unwrap().gt(0.5));
        let holes: Vec<[i64; 4]> = (0..H * W)
            .filter(|&i| keep[i as usize] == 0)
            .map(|i| [i % W, i / W, i % W + 1, i / W + 1])
            .collect();
        calls.push(Call {
            name: "GridMask",
            config: GRID_MASK,
            transform: "CoarseDropout",
            init: json!({}),
            params: json!({ "holes": holes, "seed": 0 }),
            seed,
        });
    }
    calls
}

#[test]
fn distortion_and_dropout_targets_match_albumentations_for_the_drawn_parameters() {
    let (mut moved, mut dropped) = (0, 0);
    for Compared { out, given, .. } in compare_targets(&calls(), &super::noise(&[H, W, 3], 31)) {
        moved += i64::from(out[1].size() != given.size() || floats(&out[1]) != floats(&given));
        dropped += i64::from(out[1].size()[0] < given.size()[0] || out[2].size()[0] < 6);
    }
    // The fixtures exercise the moves and the filters, not only pass rows through.
    assert!(
        moved > 100 && dropped > 40,
        "moved in {moved} calls, dropped in {dropped}"
    );
}

/// The bounding rectangle `[x_min, y_min, x_max + end, y_max + end]` of `mask`'s non-zero
/// pixels, `None` when there are none.
fn bounding_rect(mask: &Tensor, end: i64) -> Option<[f64; 4]> {
    let at = ints(&mask.nonzero());
    let (ys, xs): (Vec<i64>, Vec<i64>) = at.chunks(2).map(|p| (p[0], p[1])).unzip();
    let lo = |v: &[i64]| v.iter().min().copied();
    let hi = |v: &[i64]| v.iter().max().copied();
    Some([lo(&xs)?, lo(&ys)?, hi(&xs)? + end, hi(&ys)? + end].map(|v| v as f64))
}

/// How a box and the pixels it stands for compare under an op.
#[derive(Clone, Copy)]
enum Rule {
    /// albumentations' remaps move a box as the mask of pixels `x_min..=x_max`,
    /// `y_min..=y_max` and read it back the same way: exactly that mask's extent.
    Inclusive,
    /// The box covers pixels `x_min..x_max`; within `tol` pixels of their extent.
    Exclusive(f64),
}

#[test]
fn a_drawn_box_lands_where_the_distorted_or_cut_box_says() {
    // Inside the image under every distortion here; rows multiples of 3, so that y / 24 is
    // exact in float32 (else albumentations' dropout truncates 17 to 16.9999995 and loses a
    // row, which `dropout_targets`' tests cover).
    let (x0, y0, x1, y1) = (9, 6, 21, 18);
    let bbox = Tensor::from_slice(&[x0, y0, x1, y1].map(|v| v as f32)).reshape([1, 4]);
    // Perspective's continuous box edges sit half a source pixel from the pixel edges, and
    // its zoom (up to about 2x at this scale) stretches that half pixel. Dropouts move
    // nothing and cut the box to exactly what the holes leave.
    let ops: [(&str, &str, Rule); 8] = [
        ("Perspective", PERSPECTIVE, Rule::Exclusive(1.5)),
        ("GridDistortion", GRID, Rule::Inclusive),
        ("ElasticTransform", ELASTIC, Rule::Inclusive),
        ("OpticalDistortion", CAMERA, Rule::Inclusive),
        ("OpticalDistortion", FISHEYE, Rule::Inclusive),
        ("PiecewiseAffine", PIECEWISE, Rule::Inclusive),
        ("CoarseDropout", DROPOUT, Rule::Exclusive(0.0)),
        ("GridMask", GRID_MASK, Rule::Exclusive(0.0)),
    ];
    let mut checked = 0;
    for (name, config, rule) in ops {
        let (end, tol) = match rule {
            Rule::Inclusive => (0, 0.0),
            Rule::Exclusive(tol) => (1, tol),
        };
        let mask = Tensor::zeros([H, W], (Kind::Uint8, Device::Cpu));
        let (w, h) = (x1 - x0 + 1 - end, y1 - y0 + 1 - end);
        let _ = mask.narrow(0, y0, h).narrow(1, x0, w).fill_(1);
        let config = format!(
            "{config}\nmasks = [\"mask\"]\nbboxes = [\"bbox\"]\nbbox_params = \"pascal_voc\"{}",
            if name.ends_with("Dropout") || name == "GridMask" {
                "\nmask_fill_value = 0"
            } else {
                ""
            }
        );
        let op = direct(name, &config, &["mask", "bbox"]);
        for seed in 0..8 {
            let out = run(op.as_ref(), &[&mask, &bbox], seed);
            let what = format!("{name} ({config}) seed {seed}");
            let Some(drawn) = bounding_rect(&out[0], end) else {
                assert_eq!(out[1].size()[0], 0, "{what}: the box left with its pixels");
                continue;
            };
            let moved = floats(&out[1]);
            assert_eq!(moved.len(), 4, "{what}: one box");
            for (a, b) in moved.iter().zip(drawn) {
                assert!(
                    (a - b).abs() <= tol,
                    "{what}: box {moved:?}, drawn region {drawn:?}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 58, "{checked} boxes checked");
}

#[test]
fn target_keys_of_the_new_ops_are_checked_when_built() {
    let build = |name: &str, config: &str| {
        fe_plugin_api::testing::numpy_op(name, config, &["i", "b"], &["i", "b"]).err()
    };
    for name in [
        "Perspective",
        "GridDistortion",
        "ElasticTransform",
        "OpticalDistortion",
        "PiecewiseAffine",
        "CoarseDropout",
        "GridMask",
    ] {
        let err = build(name, "bboxes = [\"b\"]").expect("bboxes without bbox_params");
        assert_eq!(err.field.as_str(), "bbox_params", "{name}");
        assert!(build(name, "bboxes = [\"b\"]\nbbox_params = \"coco\"").is_none());
    }
    let err = build("GridDistortion", "keypoint_remapping_method = \"inverse\"").unwrap();
    assert_eq!(err.field.as_str(), "keypoint_remapping_method");
    assert!(err.message.as_str().contains("\"mask\" or \"direct\""));
}
