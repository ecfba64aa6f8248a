//! `Affine` and `ShiftScaleRotate` against albumentations 2.0.8: the warp for the matrix the
//! op drew (image bilinear, mask nearest, every border mode), and the draws' distribution.

use fe_plugin_api::tch::Kind;
use serde_json::{json, Value};

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::{Affine, ShiftScaleRotate};

/// OpenCV's code for a border mode name.
fn cv_border(name: &str) -> i64 {
    match name {
        "constant" => 0,
        "replicate" => 1,
        "reflect" => 2,
        _ => 4,
    }
}

/// The forward 3 × 3 matrix (albumentations' `matrix` parameter) of a 2 × 3 one.
fn matrix3(m: [f64; 6]) -> Value {
    json!([[m[0], m[1], m[2]], [m[3], m[4], m[5]], [0.0, 0.0, 1.0]])
}

#[test]
fn warps_match_albumentations_for_the_drawn_matrix() {
    let image = noise(&[9, 11, 3], 30);
    let float = image.to_kind(Kind::Float) / 255.0;
    let mask = noise(&[9, 11], 31).remainder(5);
    let (h, w) = (9, 11);
    let configs = [
        ("Affine", "scale = [0.7, 1.4]\nrotate = [-60, 60]\nshear = [-20, 20]\ntranslate_percent = [-0.2, 0.2]", "constant", 0.0),
        ("Affine", "scale = [0.5, 1.5]\nrotate = 170\ntranslate_px = [-3, 3]\nkeep_ratio = true", "reflect_101", 0.0),
        ("Affine", "scale = 0.6\nrotate = [-30, 30]\nfill = 77\nfill_mask = 9", "constant", 77.0),
        ("ShiftScaleRotate", "shift_limit = 0.2\nscale_limit = [-0.5, 0.3]", "reflect", 0.0),
        ("ShiftScaleRotate", "rotate_limit = 90\nshift_limit_y = [0.1, 0.3]", "replicate", 0.0),
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (name, config, border, fill) in configs {
        let full = format!("{config}\nborder_mode = \"{border}\"\nmasks = [\"mask\"]\np = 1.0");
        let keys = ["image", "mask"];
        let op = direct(name, &full, &keys);
        let inner = if name == "Affine" {
            typed::<Affine>(&full, &keys).0
        } else {
            typed::<ShiftScaleRotate>(&full, &keys).0
        };
        let fill_mask = if fill == 0.0 { 0.0 } else { 9.0 };
        let init = json!({"border_mode": cv_border(border), "fill": fill, "fill_mask": fill_mask});
        for seed in 0..4 {
            let draw = inner.params(h, w, seed).expect("p = 1 always warps");
            let params = json!({"matrix": matrix3(draw.matrix(h, w)), "output_shape": [h, w]});
            for x in [&image, &float] {
                let out = run(op.as_ref(), &[x, &mask], seed);
                ours.push((format!("{name} {config} {:?} seed {seed}", x.kind()), out));
                cases.push(Case::apply(
                    name,
                    init.clone(),
                    params.clone(),
                    x,
                    Some(&mask),
                ));
            }
        }
    }
    for ((what, out), (image, mask)) in ours.iter().zip(albumentations(&cases)) {
        assert_eq!(out[0].kind(), image.kind(), "{what}");
        // OpenCV interpolates float32 images in float32; we use float64.
        let scale = image.abs().max().double_value(&[]).max(1.0);
        let tolerance = if image.kind() == Kind::Uint8 {
            1.0
        } else {
            1e-6 * scale
        };
        let d = max_diff(&out[0], &image);
        assert!(d <= tolerance, "{what}: image differs by {d}");
        assert!(out[1].equal(&mask.unwrap()), "{what}: mask differs");
    }
}

#[test]
fn image_and_mask_get_the_same_geometry_and_p_zero_is_the_identity() {
    let image = noise(&[8, 10, 2], 32);
    let mask = image.select(2, 0);
    for name in ["Affine", "ShiftScaleRotate"] {
        let config = "interpolation = \"nearest\"\nmasks = [\"mask\"]\np = 1.0";
        let config = if name == "Affine" {
            format!("{config}\nrotate = [-40, 40]\nscale = [0.8, 1.2]")
        } else {
            format!("{config}\nrotate_limit = [20, 40]")
        };
        let op = direct(name, &config, &["image", "mask"]);
        for seed in 0..5 {
            let out = run(op.as_ref(), &[&image, &mask], seed);
            assert!(out[1].equal(&out[0].select(2, 0)), "{name} seed {seed}");
            assert!(!out[0].equal(&image), "{name} seed {seed} warps");
            assert!(out[0].equal(&run(op.as_ref(), &[&image, &mask], seed)[0]));
        }
        let off = direct(name, "p = 0.0", &["x"]);
        assert!(
            run(off.as_ref(), &[&image], 3)[0].equal(&image),
            "{name} p = 0"
        );
    }
}

#[test]
fn identity_parameters_keep_the_image_and_a_quarter_turn_is_rot90() {
    let image = noise(&[7, 7, 3], 33);
    let op = direct("Affine", "p = 1.0", &["x"]);
    assert!(run(op.as_ref(), &[&image], 0)[0].equal(&image));
    let op = direct("Affine", "rotate = 90\np = 1.0", &["x"]);
    // Positive angles turn counter-clockwise, as np.rot90 does.
    assert!(run(op.as_ref(), &[&image], 0)[0].equal(&image.rot90(1, [0, 1])));
}

#[test]
fn draws_follow_albumentations_distribution() {
    let n = 2000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let (h, w) = (40, 60);
    let cases = [
        ("Affine", "scale = [0.7, 1.3]\nrotate = [-30, 50]\nshear = [-10, 10]\ntranslate_percent = [-0.1, 0.2]\np = 1.0",
         json!({"scale": [0.7, 1.3], "rotate": [-30, 50], "shear": [-10, 10], "translate_percent": [-0.1, 0.2]})),
        ("Affine", "translate_px = [-5, 7]\nkeep_ratio = true\nscale = [0.5, 2.0]\np = 1.0",
         json!({"translate_px": [-5, 7], "keep_ratio": true, "scale": [0.5, 2.0]})),
        ("ShiftScaleRotate", "p = 1.0", json!({})),
    ];
    for (name, config, init) in cases {
        let inner = if name == "Affine" {
            typed::<Affine>(config, &["x"]).0
        } else {
            typed::<ShiftScaleRotate>(config, &["x"]).0
        };
        let ours: Vec<[f64; 6]> = (0..n as u64)
            .map(|s| inner.params(h, w, s).unwrap().matrix(h, w))
            .collect();
        let theirs = albumentations_samples(name, init, &[h, w, 3], "matrix", n);
        for entry in 0..6 {
            let a: Vec<f64> = ours.iter().map(|m| m[entry]).collect();
            let b: Vec<f64> = theirs.iter().map(|m| m[entry]).collect();
            let d = ks_statistic(&a, &b);
            assert!(d < critical, "{name} {config}: matrix entry {entry} KS {d}");
        }
    }
}

#[test]
fn bad_configs_are_errors_naming_the_key() {
    for (name, config, key) in [
        ("Affine", "interpolation = \"bicubic\"", "interpolation"),
        ("Affine", "scale = [1.2, 0.8]", "scale"),
        ("Affine", "scale = 0", "scale"),
        ("Affine", "translate_px = 1.5", "translate_px"),
        (
            "Affine",
            "translate_px = 1\ntranslate_percent = 0.1",
            "translate_percent",
        ),
        (
            "ShiftScaleRotate",
            "scale_limit = [-1.0, 0.2]",
            "scale_limit",
        ),
        ("ShiftScaleRotate", "rotate = 3", "rotate"),
    ] {
        let Err(e) = fe_plugin_api::testing::numpy_op(name, config, &["x"], &["x"]) else {
            panic!("{name} {config} should fail");
        };
        let said = format!("{} {}", e.field, e.message);
        assert!(said.contains(key), "{name} {config}: {e}");
    }
}
