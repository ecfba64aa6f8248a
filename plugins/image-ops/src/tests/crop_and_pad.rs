//! `CropAndPad` against albumentations 2.0.8: the same pixels, boxes and keypoints for the
//! sides the op reports it drew, and the same per-side distributions.

use fe_plugin_api::tch::{Kind, Tensor};
use serde_json::{json, Value};

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::targets::{compare_targets, Call, Compared, H, W};
use super::{direct, noise, run, typed};
use crate::CropAndPad;

/// Configs and albumentations' init for them (OpenCV codes): per-side ranges mixing crops
/// and pads, a shared and an independent percent range, lists to pick from; every border
/// mode, `keep_size` both ways, each interpolation.
fn configs() -> Vec<(&'static str, Value)> {
    vec![
        (
            "px = [[-4, -1], [1, 6], [-3, 3], [-6, 5]]\nkeep_size = false\nfill = [0, 255]\nfill_mask = [1, 4, 9]",
            json!({"keep_size": false, "border_mode": 0}),
        ),
        (
            "px = [[-4, -1], [1, 6], [-3, 3], [-6, 5]]\nborder_mode = \"reflect_101\"",
            json!({"border_mode": 4}),
        ),
        (
            "percent = [-0.25, 0.3]\ninterpolation = \"bicubic\"\nborder_mode = \"reflect\"",
            json!({"interpolation": 2, "border_mode": 2}),
        ),
        (
            "percent = [-0.3, 0.4]\nsample_independently = false\nkeep_size = false\nborder_mode = \"replicate\"",
            json!({"keep_size": false, "border_mode": 1}),
        ),
        (
            "px = [[-5, 0, 3], [2, -2, 7], [-1], [4, -6, 0]]\ninterpolation = \"nearest\"\nmask_interpolation = \"bilinear\"\nfill = 200",
            json!({"interpolation": 0, "mask_interpolation": 1, "border_mode": 0}),
        ),
        (
            // Fractional fills: OpenCV rounds them half to even into integer images.
            "px = [2, -1, 3, 1]\nkeep_size = false\nfill = 183.7\nfill_mask = 2.5",
            json!({"keep_size": false, "border_mode": 0}),
        ),
    ]
}

/// albumentations' drawn parameters for our plan of an `h × w` image.
fn params(op: &CropAndPad, (h, w): (i64, i64), seed: u64) -> Value {
    let (plan, [fill, fill_mask]) = op.plan(h, w, seed).unwrap();
    let (rows, cols) = plan.size();
    json!({
        "crop_params": plan.crop, "pad_params": plan.pad, "fill": fill, "fill_mask": fill_mask,
        "shape": [h, w, 3], "result_shape": [rows, cols],
    })
}

#[test]
fn crop_and_pad_matches_albumentations_for_the_drawn_sides() {
    let image = noise(&[17, 23, 3], 90);
    let float = image.to_kind(Kind::Float) / 255.0;
    let mask = noise(&[17, 23], 91);
    let keys = ["image", "mask"];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (config, mut init) in configs() {
        let config_masks = format!("{config}\nmasks = [\"mask\"]");
        let op = direct("CropAndPad", &config_masks, &keys);
        let draws = typed::<CropAndPad>(&config_masks, &keys);
        init["px"] = json!(0);
        for x in [&image, &float] {
            for seed in 0..4 {
                let params = params(&draws, (17, 23), seed);
                let what = format!("{config:?} {:?} seed {seed} {params}", x.kind());
                ours.push((what, config, run(op.as_ref(), &[x, &mask], seed)));
                let init = init.clone();
                cases.push(Case::apply("CropAndPad", init, params, x, Some(&mask)));
            }
        }
    }
    let (mut sizes, mut worst) = (std::collections::BTreeSet::new(), [0.0f64; 2]);
    for ((what, config, out), (r, rm)) in ours.iter().zip(albumentations(&cases)) {
        let uint8 = out[0].kind() == Kind::Uint8;
        let d = max_diff(&out[0], &r);
        // Without the resize back only pixels move: exact, fills rounded as OpenCV does.
        let tolerance = match (config.contains("keep_size = false"), uint8) {
            (true, _) => 0.0,
            (false, true) => 1.0,
            (false, false) => 1e-5,
        };
        assert!(d <= tolerance, "{what}: image differs by {d}");
        worst[usize::from(!uint8)] = worst[usize::from(!uint8)].max(d);
        let dm = max_diff(&out[1], rm.as_ref().unwrap());
        let nearest = !config.contains("mask_interpolation");
        assert!(
            dm <= if nearest { 0.0 } else { 1.0 },
            "{what}: mask differs by {dm}"
        );
        sizes.insert(out[0].size());
    }
    eprintln!("max image diff: uint8 {}, float32 {}", worst[0], worst[1]);
    assert!(sizes.len() >= 6, "keep_size = false sizes vary: {sizes:?}");
    let off = direct("CropAndPad", "px = -3\np = 0.0", &["x"]);
    assert!(run(off.as_ref(), &[&image], 0)[0].equal(&image));
}

#[test]
fn fastestimator_names_and_fixed_sides_work() {
    let image = noise(&[9, 11], 92);
    let fe = direct(
        "CropAndPad",
        "px = [2, -1, 0, 3]\npad_mode = \"constant\"\npad_cval = 9\nkeep_size = false",
        &["x"],
    );
    let out = run(fe.as_ref(), &[&image], 0).remove(0);
    // 2 rows on top, 3 columns on the left, 1 column cut on the right.
    assert_eq!(out.size(), [11, 13]);
    assert!(out
        .narrow(0, 2, 9)
        .narrow(1, 3, 10)
        .equal(&image.narrow(1, 0, 10)));
    let nines = |shape: &[i64]| Tensor::full(shape, 9, (Kind::Uint8, image.device()));
    assert!(out.narrow(0, 0, 2).equal(&nines(&[2, 13])));
    assert!(out.narrow(1, 0, 3).equal(&nines(&[11, 3])));
}

#[test]
fn crop_and_pad_config_errors_name_the_field() {
    for (config, field) in [
        ("px = 1\npercent = 0.1", "percent"),
        ("keep_size = true", "px"),
        ("px = [3, 3]", "px"),
        ("px = [1, 2, 3]", "px"),
        ("px = [1, [0, 2], 3, 4]", "px"),
        ("px = [[0, 2], [1, 2, 3], [0, 1], [0, 1]]", "px"),
        ("percent = [0.3, 0.1]", "percent"),
        ("px = 2\np = 1.5", "p"),
        ("px = 2\nmasks = [\"y\"]", "masks"),
        ("px = 2\nfill_mask = []", "fill_mask"),
    ] {
        let made = fe_plugin_api::testing::numpy_op("CropAndPad", config, &["x"], &["x"]);
        let Err(e) = made else {
            panic!("{config:?} should fail")
        };
        assert_eq!(e.field.as_str(), field, "{config:?}: {e:?}");
    }
    let op = direct("CropAndPad", "px = -40", &["x"]);
    let err = op
        .forward(&[&noise(&[30, 30], 1)], &super::seeded(0))
        .unwrap_err();
    assert!(
        err.message().contains("leaves nothing"),
        "{}",
        err.message()
    );
}

/// Ours and albumentations' `n` draws of `key` for `init` / `config` on a 20 × 30 image.
fn both(config: &str, init: Value, key: &str, n: usize) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let op = typed::<CropAndPad>(config, &["x"]);
    let ours = (0..n as u64)
        .map(|s| {
            let (plan, fill) = op.plan(20, 30, s).unwrap();
            let (rows, cols) = plan.size();
            let row = match key {
                "pad_params" => plan.pad.to_vec(),
                "crop_params" => plan.crop.to_vec(),
                "fill" => return fill.to_vec(),
                _ => vec![rows, cols],
            };
            row.into_iter().map(|v| v as f64).collect()
        })
        .collect();
    let theirs = albumentations_samples("CropAndPad", init, &[20, 30, 3], key, n);
    (ours, theirs)
}

fn assert_same_distribution(what: &str, ours: &[Vec<f64>], theirs: &[Vec<f64>], columns: &[usize]) {
    let critical = 1.95 * (2.0 / ours.len() as f64).sqrt();
    for &i in columns {
        let a: Vec<f64> = ours.iter().map(|r| r[i]).collect();
        let b: Vec<f64> = theirs.iter().map(|r| r[i]).collect();
        let d = ks_statistic(&a, &b);
        assert!(d < critical, "{what} column {i}: KS {d} >= {critical}");
    }
}

#[test]
fn crop_and_pad_sides_follow_albumentations_distribution() {
    let n = 3000;
    let all_equal =
        |rows: &[Vec<f64>]| rows.iter().filter(|r| r.iter().all(|v| *v == r[0])).count();
    for independent in [true, false] {
        let config = format!("px = [1, 10]\nsample_independently = {independent}");
        let init = json!({"px": [1, 10], "sample_independently": independent});
        let (ours, theirs) = both(&config, init, "pad_params", n);
        assert_same_distribution(&config, &ours, &theirs, &[0, 1, 2, 3]);
        // 9 values per side: all four agree 1 in 729 times when drawn independently.
        let (a, b) = (all_equal(&ours), all_equal(&theirs));
        if independent {
            assert!(
                a < n / 100 && b < n / 100,
                "{a} / {b} draws equal on all sides"
            );
        } else {
            assert_eq!((a, b), (n, n), "one draw for all sides");
        }
    }
    let sides = [[-0.3, -0.1], [0.05, 0.25], [-0.45, -0.2], [0.1, 0.4]];
    let config = "percent = [[-0.3, -0.1], [0.05, 0.25], [-0.45, -0.2], [0.1, 0.4]]";
    let (ours, theirs) = both(config, json!({ "percent": sides }), "crop_params", n);
    assert_same_distribution(config, &ours, &theirs, &[1, 3]);
    let (ours, theirs) = both(config, json!({ "percent": sides }), "pad_params", n);
    assert_same_distribution(config, &ours, &theirs, &[2, 3]);
    // Fills: uniform on [a, b] (integers too, as 2.0.8's float schema makes them), or picked.
    let config = "px = 2\nfill = [0, 10]\nfill_mask = [1, 2, 3]";
    let init = json!({"px": 2, "fill": [0, 10], "fill_mask": [1, 2, 3]});
    let (ours, theirs) = both(config, init.clone(), "fill", n);
    assert_same_distribution(config, &ours, &theirs, &[0]);
    let theirs = albumentations_samples("CropAndPad", init, &[20, 30, 3], "fill_mask", n);
    let ours: Vec<Vec<f64>> = ours.iter().map(|r| vec![r[1]]).collect();
    assert_same_distribution(config, &ours, &theirs, &[0]);
    // A two-value list after a longer one is a choice, not a range; overlapping crops give
    // rows back.
    let config = "px = [[-3, 0, 2], [1, 5, 7], [-19, -1], [-1, 4]]";
    let init = json!({"px": [[-3, 0, 2], [1, 5, 7], [-19, -1], [-1, 4]]});
    let (ours, theirs) = both(config, init, "result_shape", n);
    assert_same_distribution(config, &ours, &theirs, &[0, 1]);
    let widths: std::collections::BTreeSet<i64> = ours.iter().map(|r| r[1] as i64).collect();
    assert_eq!(widths.len(), 6, "3 right x 2 left choices: {widths:?}");
}

#[test]
fn crop_and_pad_targets_match_albumentations_for_the_drawn_sides() {
    let configs: [(&'static str, Value); 3] = [
        (
            "px = [[-9, -1], [-12, 6], [-8, 8], [-10, 5]]\nkeep_size = false",
            json!({"keep_size": false}),
        ),
        (
            "percent = [-0.4, 0.3]\nborder_mode = \"reflect\"",
            json!({"border_mode": 2}),
        ),
        (
            "px = [[-9, -1], [-12, 6], [-8, 8], [-10, 5]]\nborder_mode = \"reflect_101\"",
            json!({"border_mode": 4}),
        ),
    ];
    let mut calls = Vec::new();
    for (config, mut init) in configs {
        init["px"] = json!(0);
        let op = typed::<CropAndPad>(config, &["image"]);
        for seed in 0..5 {
            calls.push(Call {
                name: "CropAndPad",
                config,
                transform: "CropAndPad",
                init: init.clone(),
                params: params(&op, (H, W), seed),
                seed,
            });
        }
    }
    let (mut cut, mut moved) = (0, 0);
    for Compared { out, given, .. } in compare_targets(&calls, &noise(&[H, W, 3], 93)) {
        cut += i64::from(out[1].size()[0] < given.size()[0]);
        moved +=
            i64::from(out[1].size() == given.size() && !out[1].allclose(&given, 0.0, 0.0, false));
    }
    assert!(
        cut >= 10 && moved >= 10,
        "boxes cut in {cut} calls, moved in {moved}"
    );
}
