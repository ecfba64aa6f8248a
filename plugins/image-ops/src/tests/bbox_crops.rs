//! `BBoxSafeRandomCrop`, `RandomSizedBBoxSafeCrop` and `RandomCropNearBBox` against
//! albumentations 2.0.8: the same crop for the window the op reports it drew, and the same
//! window distribution for boxes, no boxes and the erosion edge values.

use fe_plugin_api::tch::{Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, albumentations_samples_with, ks_statistic, max_diff, Case};
use super::{direct, noise, run, seeded, typed};
use crate::{BBoxSafeRandomCrop, RandomCropNearBBox, RandomSizedBBoxSafeCrop};

const H: i64 = 17;
const W: i64 = 23;

/// Two pascal_voc boxes with a label, apart, so the union and its erosion matter.
fn two_boxes() -> Tensor {
    let rows: [f32; 10] = [3.0, 2.0, 9.0, 8.0, 1.0, 12.0, 5.0, 20.0, 14.0, 2.0];
    Tensor::from_slice(&rows).reshape([2, 5])
}

/// The box rows of `t` in pixels, as the op reads them (pascal_voc).
fn rows(t: &Tensor) -> Vec<Vec<f64>> {
    let n = t.size()[0];
    (0..n)
        .map(|i| Vec::<f64>::try_from(t.get(i).to_kind(Kind::Double)).unwrap())
        .collect()
}

fn safe_config(erosion: f64, extra: &str) -> String {
    format!("erosion_rate = {erosion}\nbboxes = [\"bbox\"]\nbbox_params = \"pascal_voc\"\n{extra}")
}

#[test]
fn bbox_safe_crops_match_albumentations_for_the_drawn_window() {
    let image = noise(&[H, W, 3], 90);
    let mask = noise(&[H, W], 91);
    let keys = ["image", "mask", "bbox"];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (erosion, boxes) in [
        (0.0, two_boxes()),
        (0.4, two_boxes()),
        (1.0, two_boxes()),
        (
            0.5,
            Tensor::zeros([0], (Kind::Float, fe_plugin_api::tch::Device::Cpu)),
        ),
    ] {
        let boxes_px = rows(&boxes);
        let config = safe_config(erosion, "");
        let op = direct("BBoxSafeRandomCrop", &config, &keys);
        let draws = typed::<BBoxSafeRandomCrop>(&config, &keys);
        for seed in 0..4 {
            let window = draws.window((H, W), &boxes_px, seed).unwrap();
            let out = run(op.as_ref(), &[&image, &mask, &boxes], seed);
            ours.push((
                format!("BBoxSafeRandomCrop e {erosion} seed {seed} {window:?}"),
                out,
                0.0,
            ));
            let params = json!({ "crop_coords": window });
            let init = json!({ "erosion_rate": erosion });
            cases.push(Case::apply(
                "BBoxSafeRandomCrop",
                init,
                params,
                &image,
                Some(&mask),
            ));
        }
        for (interp, code, mask_interp, mcode) in
            [("bilinear", 1, "nearest", 0), ("bicubic", 2, "bilinear", 1)]
        {
            let extra = format!("height = 12\nwidth = 10\ninterpolation = \"{interp}\"\nmask_interpolation = \"{mask_interp}\"\nmasks = [\"mask\"]");
            let config = safe_config(erosion, &extra);
            let op = direct("RandomSizedBBoxSafeCrop", &config, &keys);
            let draws = typed::<RandomSizedBBoxSafeCrop>(&config, &keys);
            for seed in 0..3 {
                let window = draws.window((H, W), &boxes_px, seed).unwrap();
                let out = run(op.as_ref(), &[&image, &mask, &boxes], seed);
                let what =
                    format!("RandomSizedBBoxSafeCrop e {erosion} {interp} seed {seed} {window:?}");
                ours.push((what, out, if mcode == 0 { 0.0 } else { 1.0 }));
                let params = json!({ "crop_coords": window });
                let init = json!({"height": 12, "width": 10, "erosion_rate": erosion, "interpolation": code, "mask_interpolation": mcode});
                cases.push(Case::apply(
                    "RandomSizedBBoxSafeCrop",
                    init,
                    params,
                    &image,
                    Some(&mask),
                ));
            }
        }
    }
    let mut sizes = std::collections::BTreeSet::new();
    for ((what, out, mask_tol), (r, rm)) in ours.iter().zip(albumentations(&cases)) {
        assert!(max_diff(&out[0], &r) <= 1.0, "{what}: image");
        assert!(
            max_diff(&out[1], rm.as_ref().unwrap()) <= *mask_tol,
            "{what}: mask"
        );
        sizes.insert(out[0].size());
    }
    assert!(
        sizes.len() >= 6,
        "the window varies with the draw: {sizes:?}"
    );
}

#[test]
fn bbox_safe_crops_take_float_images_and_skip_with_p() {
    let image = noise(&[H, W, 3], 92).to_kind(Kind::Float) / 255.0;
    let keys = ["image", "bbox"];
    let config = safe_config(0.3, "height = 9\nwidth = 13");
    let op = direct("RandomSizedBBoxSafeCrop", &config, &keys);
    let window = typed::<RandomSizedBBoxSafeCrop>(&config, &keys)
        .window((H, W), &rows(&two_boxes()), 5)
        .unwrap();
    let out = run(op.as_ref(), &[&image, &two_boxes()], 5);
    let init = json!({"height": 9, "width": 13, "erosion_rate": 0.3});
    let case = Case::apply(
        "RandomSizedBBoxSafeCrop",
        init,
        json!({ "crop_coords": window }),
        &image,
        None,
    );
    let (r, _) = &albumentations(&[case])[0];
    assert_eq!(out[0].kind(), Kind::Float);
    assert!(
        max_diff(&out[0], r) <= 1e-5,
        "float image: {}",
        max_diff(&out[0], r)
    );
    for (name, extra) in [
        ("BBoxSafeRandomCrop", "p = 0.0"),
        ("RandomSizedBBoxSafeCrop", "height = 9\nwidth = 13\np = 0.0"),
    ] {
        let off = direct(name, &safe_config(0.3, extra), &keys);
        let out = run(off.as_ref(), &[&image, &two_boxes()], 0);
        assert!(
            out[0].equal(&image) && out[1].equal(&two_boxes()),
            "{name}: p = 0 keeps the sample"
        );
    }
}

/// Ours and albumentations' draws of `key` agree coordinate by coordinate (two-sample KS).
fn assert_same_windows(what: &str, ours: &[[i64; 4]], theirs: &[Vec<f64>]) {
    let critical = 1.95 * (2.0 / ours.len() as f64).sqrt();
    for (i, side) in ["x_min", "y_min", "x_max", "y_max"].into_iter().enumerate() {
        let a: Vec<f64> = ours.iter().map(|c| c[i] as f64).collect();
        let b: Vec<f64> = theirs.iter().map(|c| c[i]).collect();
        let d = ks_statistic(&a, &b);
        assert!(d < critical, "{what} {side}: KS {d} >= {critical}");
    }
}

#[test]
fn bbox_safe_windows_follow_albumentations_distribution() {
    let n = 3000;
    // Two boxes (union, eroded), one box (its own union, never eroded), no box (the
    // aspect-preserving fallback), and erosion 1 (the fallback with boxes) on an image tall
    // enough that albumentations' rare empty window (height 0, here 1) is under 1%.
    let two = [[3.0, 2.0, 9.0, 8.0], [12.0, 5.0, 20.0, 14.0]];
    let settings = [
        (0.0, two.to_vec(), (20, 30)),
        (0.3, two.to_vec(), (20, 30)),
        (0.6, vec![[5.0, 4.0, 17.0, 11.0]], (20, 30)),
        (0.5, vec![], (20, 30)),
        (1.0, two.to_vec(), (100, 120)),
    ];
    for (erosion, boxes, (h, w)) in settings {
        let op = typed::<BBoxSafeRandomCrop>(&safe_config(erosion, ""), &["x", "bbox"]);
        let px: Vec<Vec<f64>> = boxes.iter().map(|b| b.to_vec()).collect();
        let ours: Vec<[i64; 4]> = (0..n as u64)
            .map(|s| op.window((h, w), &px, s).unwrap())
            .collect();
        let normal: Vec<[f64; 4]> = boxes
            .iter()
            .map(|b| {
                [
                    b[0] / w as f64,
                    b[1] / h as f64,
                    b[2] / w as f64,
                    b[3] / h as f64,
                ]
            })
            .collect();
        let theirs = albumentations_samples_with(
            "BBoxSafeRandomCrop",
            json!({ "erosion_rate": erosion }),
            &[h, w, 3],
            "crop_coords",
            n,
            json!({ "bboxes": normal }),
        );
        assert_same_windows(
            &format!("erosion {erosion}, {} boxes", boxes.len()),
            &ours,
            &theirs,
        );
    }
}

#[test]
fn bbox_safe_crop_keeps_every_box_whole_at_erosion_zero() {
    let keys = ["image", "bbox"];
    let op = direct("BBoxSafeRandomCrop", &safe_config(0.0, ""), &keys);
    let image = noise(&[H, W, 1], 93);
    let given = two_boxes();
    let size = |b: &Tensor| (&b.narrow(1, 2, 2) - &b.narrow(1, 0, 2)).to_kind(Kind::Double);
    let mut smaller = 0;
    for seed in 0..200 {
        let out = run(op.as_ref(), &[&image, &given], seed);
        assert_eq!(
            out[1].size(),
            given.size(),
            "seed {seed}: a box was dropped"
        );
        assert!(
            size(&out[1]).equal(&size(&given)),
            "seed {seed}: a box was cut"
        );
        smaller += i64::from(out[0].size() != image.size());
    }
    assert!(
        smaller > 150,
        "the window is mostly smaller than the image: {smaller}"
    );
}

#[test]
fn near_bbox_crop_matches_albumentations_for_the_drawn_window() {
    let image = noise(&[H, W, 3], 94);
    let mask = noise(&[H, W], 95);
    let keys = ["image", "mask", "crop_box"];
    let config = "max_part_shift = [0.2, 0.5]\ncropping_bbox_key = \"crop_box\"";
    let op = direct("RandomCropNearBBox", config, &keys);
    let draws = typed::<RandomCropNearBBox>(config, &keys);
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (i, bbox) in [[4, 3, 15, 12], [0, 0, 23, 17], [10, 6, 30, 25]]
        .into_iter()
        .enumerate()
    {
        let given = Tensor::from_slice(&bbox.map(|v| v as f32)).reshape([1, 4]);
        for seed in 0..4 {
            let window = draws.window((H, W), bbox, seed).unwrap();
            let out = run(op.as_ref(), &[&image, &mask, &given], seed);
            assert!(out[2].equal(&given), "the cropping box passes through");
            ours.push((format!("box {i} seed {seed} {window:?}"), out));
            let params = json!({ "crop_coords": window });
            cases.push(Case::apply(
                "RandomCropNearBBox",
                json!({}),
                params,
                &image,
                Some(&mask),
            ));
        }
    }
    for ((what, out), (r, rm)) in ours.iter().zip(albumentations(&cases)) {
        assert!(out[0].equal(&r), "{what}: image");
        assert!(out[1].equal(rm.as_ref().unwrap()), "{what}: mask");
    }
    let float = image.to_kind(Kind::Double) / 255.0;
    let box4 = Tensor::from_slice(&[4i64, 3, 15, 12]);
    let out = op.forward(&[&float, &mask, &box4], &seeded(1)).unwrap();
    let [x0, y0, x1, y1] = draws.window((H, W), [4, 3, 15, 12], 1).unwrap();
    assert!(out[0].equal(&float.narrow(0, y0, y1 - y0).narrow(1, x0, x1 - x0)));
}

#[test]
fn near_bbox_windows_follow_albumentations_distribution() {
    let (n, h, w) = (3000, 20, 30);
    // A moderate shift, and one large enough that the sides often cross (the centred fallback).
    for (shift, bbox) in [
        (json!([0.3, 0.5]), [5, 4, 25, 16]),
        (json!(0.4), [0, 2, 12, 20]),
        (json!([1.0, 1.0]), [8, 6, 14, 11]),
    ] {
        let config = format!("max_part_shift = {shift}");
        let op = typed::<RandomCropNearBBox>(&config, &["x", "cropping_bbox"]);
        let ours: Vec<[i64; 4]> = (0..n as u64)
            .map(|s| op.window((h, w), bbox, s).unwrap())
            .collect();
        let theirs = albumentations_samples_with(
            "RandomCropNearBBox",
            json!({ "max_part_shift": shift }),
            &[h, w, 3],
            "crop_coords",
            n,
            json!({ "cropping_bbox": bbox }),
        );
        assert_same_windows(&format!("max_part_shift {shift}"), &ours, &theirs);
    }
}

/// The config error's field for `config` on inputs `keys`.
fn config_error(name: &str, config: &str, keys: &[&str]) -> String {
    let made = fe_plugin_api::testing::numpy_op(name, config, keys, keys);
    let Err(e) = made else {
        panic!("{name} accepted {config:?}")
    };
    e.field.as_str().to_owned()
}

#[test]
fn box_crops_refuse_bad_configs_and_cropping_boxes() {
    let keys = ["image", "bbox"];
    for name in ["BBoxSafeRandomCrop", "RandomSizedBBoxSafeCrop"] {
        let size = if name == "BBoxSafeRandomCrop" {
            ""
        } else {
            "height = 8\nwidth = 8\n"
        };
        assert_eq!(
            config_error(name, size, &keys),
            "bboxes",
            "{name} without boxes"
        );
        let bad = format!("{size}{}", safe_config(1.5, ""));
        assert_eq!(config_error(name, &bad, &keys), "erosion_rate");
    }
    let near = |config: &str| config_error("RandomCropNearBBox", config, &["image", "box"]);
    assert_eq!(near(""), "cropping_bbox_key");
    assert_eq!(
        near("cropping_bbox_key = \"box\"\nmax_part_shift = [0.5, 0.2]"),
        "max_part_shift"
    );
    assert_eq!(
        near("cropping_bbox_key = \"box\"\nmax_part_shift = 1.5"),
        "max_part_shift"
    );
    let listed = "cropping_bbox_key = \"box\"\nbboxes = [\"box\"]\nbbox_params = \"pascal_voc\"";
    assert_eq!(near(listed), "cropping_bbox_key");
    let op = direct(
        "RandomCropNearBBox",
        "cropping_bbox_key = \"box\"",
        &["image", "box"],
    );
    let image = noise(&[H, W, 3], 96);
    let refused = |b: Tensor| {
        op.forward(&[&image, &b], &seeded(0))
            .unwrap_err()
            .message()
            .to_string()
    };
    assert!(refused(Tensor::from_slice(&[1.5f32, 2.0, 8.0, 9.0])).contains("whole pixels"));
    assert!(refused(Tensor::from_slice(&[30i64, 2, 40, 9])).contains("no area inside"));
    assert!(refused(Tensor::from_slice(&[1i64, 2, 8])).contains("shape [4] or [1, 4]"));
}
