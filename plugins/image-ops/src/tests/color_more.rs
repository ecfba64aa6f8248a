//! `HueSaturationValue` (and its OpenCV HSV conversions) against albumentations 2.0.8 / OpenCV.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::hsv::{hsv_to_rgb, rgb_to_hsv};
use crate::{ColorJitter, HueSaturationValue};

/// Every RGB colour once, as a `(4096, 4096, 3)` uint8 image.
fn all_colours() -> Tensor {
    let v = Tensor::arange(256, (Kind::Int64, Device::Cpu));
    let r = v.view([256, 1, 1]).expand([256, 256, 256], false);
    let g = v.view([1, 256, 1]).expand([256, 256, 256], false);
    let b = v.view([1, 1, 256]).expand([256, 256, 256], false);
    Tensor::stack(&[r, g, b], -1)
        .reshape([4096, 4096, 3])
        .to_kind(Kind::Uint8)
}

#[test]
fn hsv_conversions_match_opencv_on_every_colour() {
    let rgb = all_colours();
    let [h, s, v] = rgb_to_hsv(&rgb).unwrap();
    let ours = Tensor::stack(&[h, s, v], -1).to_kind(Kind::Uint8);
    let cv = |code: i64, x: &Tensor| {
        Case::new(
            "cv2",
            "cvtColor",
            json!({}),
            json!({"args": [code]}),
            x,
            None,
        )
    };
    // COLOR_RGB2HSV = 41, COLOR_HSV2RGB = 55.
    let hue = Tensor::arange(180, (Kind::Int64, Device::Cpu)).view([180, 1, 1]);
    let hsv_all = Tensor::stack(
        &[
            hue.expand([180, 256, 256], false),
            Tensor::arange(256, (Kind::Int64, Device::Cpu))
                .view([1, 256, 1])
                .expand([180, 256, 256], false),
            Tensor::arange(256, (Kind::Int64, Device::Cpu))
                .view([1, 1, 256])
                .expand([180, 256, 256], false),
        ],
        -1,
    )
    .reshape([180 * 256, 256, 3])
    .to_kind(Kind::Uint8);
    let reference = albumentations(&[cv(41, &rgb), cv(55, &hsv_all)]);
    assert!(ours.equal(&reference[0].0), "RGB2HSV is exact");
    let back = hsv_to_rgb(
        &hsv_all.select(2, 0).to_kind(Kind::Int64),
        &hsv_all.select(2, 1).to_kind(Kind::Int64),
        &hsv_all.select(2, 2).to_kind(Kind::Int64),
    );
    let back = back.unwrap();
    assert!(
        max_diff(&back, &reference[1].0) <= 1.0,
        "HSV2RGB within a grey level"
    );
}

#[test]
fn hue_saturation_value_matches_albumentations_for_the_drawn_shifts() {
    let image = noise(&[12, 13, 3], 40);
    // Some grey pixels: saturation shifts must leave them grey.
    let mut rows = image.narrow(0, 0, 2);
    let _ = rows.fill_(77);
    let float = image.to_kind(Kind::Float) / 255.0;
    let gray = noise(&[12, 13], 41);
    let config = "hue_shift_limit = 90\nsat_shift_limit = [-60, 80]\nval_shift_limit = 50\np = 1.0";
    let op = direct("HueSaturationValue", config, &["x"]);
    let inner = typed::<HueSaturationValue>(config, &["x"]).0;
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for x in [&image, &float, &gray] {
        for seed in 0..6 {
            let p = inner.params(&[x], seed).unwrap().unwrap();
            let params = json!({"hue_shift": p[0], "sat_shift": p[1], "val_shift": p[2]});
            ours.push((
                format!("{:?} {:?} seed {seed}", x.kind(), x.size()),
                run(op.as_ref(), &[x], seed).remove(0),
            ));
            cases.push(Case::apply(
                "HueSaturationValue",
                json!({}),
                params,
                x,
                None,
            ));
        }
    }
    for ((what, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        let tolerance = if y.kind() == Kind::Uint8 {
            1.0
        } else {
            1.0 / 255.0 + 1e-6
        };
        let d = max_diff(y, &r);
        assert!(d <= tolerance, "{what}: differs by {d}");
    }
}

#[test]
fn hue_saturation_value_draws_follow_albumentations_distribution() {
    let n = 3000;
    let config =
        "hue_shift_limit = [-10, 40]\nsat_shift_limit = 30\nval_shift_limit = [5, 6]\np = 1.0";
    let inner = typed::<HueSaturationValue>(config, &["x"]).0;
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    let ours: Vec<Vec<f64>> = (0..n as u64)
        .map(|s| inner.params(&[&image], s).unwrap().unwrap())
        .collect();
    let init =
        json!({"hue_shift_limit": [-10, 40], "sat_shift_limit": 30, "val_shift_limit": [5, 6]});
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    for (i, key) in ["hue_shift", "sat_shift", "val_shift"].iter().enumerate() {
        let theirs = albumentations_samples("HueSaturationValue", init.clone(), &[4, 4, 3], key, n);
        let a: Vec<f64> = ours.iter().map(|r| r[i]).collect();
        let b: Vec<f64> = theirs.iter().map(|r| r[0]).collect();
        let d = ks_statistic(&a, &b);
        assert!(d < critical, "{key} KS {d}");
    }
}

#[test]
fn color_jitter_matches_albumentations_for_the_drawn_factors_and_order() {
    let image = noise(&[12, 13, 3], 42);
    let float = image.to_kind(Kind::Float) / 255.0;
    let gray = noise(&[12, 13], 43);
    let configs = [
        "brightness = 0.5\ncontrast = [0.3, 1.8]\nsaturation = [0.0, 2.0]\nhue = 0.3",
        "brightness = [0.0, 0.3]\ncontrast = 0\nsaturation = 0\nhue = [-0.5, -0.4]",
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for config in configs {
        let config = format!("{config}\np = 1.0");
        let op = direct("ColorJitter", &config, &["x"]);
        let inner = typed::<ColorJitter>(&config, &["x"]).0;
        for x in [&image, &float, &gray] {
            for seed in 0..6 {
                let p = inner.params(&[x], seed).unwrap().unwrap();
                let order: Vec<i64> = p[4..].iter().map(|&o| o as i64).collect();
                let params = json!({"brightness": p[0], "contrast": p[1], "saturation": p[2], "hue": p[3], "order": order});
                let what = format!(
                    "{config} {:?} {:?} seed {seed} {params}",
                    x.kind(),
                    x.size()
                );
                let gain = p[..3].iter().map(|f| f.max(1.0)).product::<f64>();
                ours.push((what, gain, run(op.as_ref(), &[x], seed).remove(0)));
                cases.push(Case::apply("ColorJitter", json!({}), params, x, None));
            }
        }
    }
    // Each step alone is exact (next test); chained, a value that an OpenCV float32 step
    // rounds the other way (one grey level) is scaled by the factors applied after it.
    for ((what, gain, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        assert_eq!(y.kind(), r.kind(), "{what}");
        let d = max_diff(y, &r);
        if y.kind() == Kind::Uint8 {
            assert!(d <= gain.ceil(), "{what}: differs by {d}");
            let off = (y.to_kind(Kind::Int64) - r.to_kind(Kind::Int64))
                .abs()
                .gt(0)
                .to_kind(Kind::Double)
                .mean(Kind::Double)
                .double_value(&[]);
            assert!(off < 0.01, "{what}: {off} of the values differ");
        } else {
            assert!(d <= 1e-5, "{what}: differs by {d}");
        }
    }
}

#[test]
fn color_jitter_draws_follow_albumentations_distribution() {
    let n = 3000;
    let config =
        "brightness = 0.3\ncontrast = [0.5, 0.9]\nsaturation = 0.9\nhue = [-0.1, 0.4]\np = 1.0";
    let inner = typed::<ColorJitter>(config, &["x"]).0;
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    let ours: Vec<Vec<f64>> = (0..n as u64)
        .map(|s| inner.params(&[&image], s).unwrap().unwrap())
        .collect();
    let init =
        json!({"brightness": 0.3, "contrast": [0.5, 0.9], "saturation": 0.9, "hue": [-0.1, 0.4]});
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    for (i, key) in ["brightness", "contrast", "saturation", "hue"]
        .iter()
        .enumerate()
    {
        let theirs = albumentations_samples("ColorJitter", init.clone(), &[4, 4, 3], key, n);
        let a: Vec<f64> = ours.iter().map(|r| r[i]).collect();
        let b: Vec<f64> = theirs.iter().map(|r| r[0]).collect();
        let d = ks_statistic(&a, &b);
        assert!(d < critical, "{key} KS {d}");
    }
    // The order is a uniform permutation: each adjustment comes first a quarter of the time.
    let theirs = albumentations_samples("ColorJitter", init, &[4, 4, 3], "order", n);
    for step in 0..4 {
        let ours_first = ours.iter().filter(|r| r[4] == step as f64).count() as f64 / n as f64;
        let theirs_first = theirs.iter().filter(|r| r[0] == step as f64).count() as f64 / n as f64;
        assert!(
            (ours_first - 0.25).abs() < 0.03,
            "ours: {step} first {ours_first}"
        );
        assert!(
            (theirs_first - 0.25).abs() < 0.03,
            "theirs: {step} first {theirs_first}"
        );
    }
}

#[test]
/// Each adjustment alone is exact on uint8 (within float32 rounding on floats).
fn each_color_jitter_adjustment_alone_matches_albumentations() {
    use crate::color::Pixels;
    use crate::layout::Spatial;
    let image = noise(&[12, 13, 3], 42);
    let float = image.to_kind(Kind::Float) / 255.0;
    let jitter = typed::<ColorJitter>("p = 1.0", &["x"]).0;
    let singles: [[f64; 4]; 4] = [
        [1.2151805398233817, 1.0, 1.0, 0.0],
        [1.0, 1.5248086105666947, 1.0, 0.0],
        [1.0, 1.0, 1.7345789639545506, 0.0],
        [1.0, 1.0, 1.0, -0.044102531741623485],
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for x in [&image, &float] {
        let layout = Spatial::of("x", x, false).unwrap();
        for (step, f) in singles.iter().enumerate() {
            let mut params = f.to_vec();
            // This step first; the others are identities.
            params.extend((0..4).map(|k| ((step + k) % 4) as f64));
            let order: Vec<i64> = params[4..].iter().map(|&o| o as i64).collect();
            let json = json!({"brightness": f[0], "contrast": f[1], "saturation": f[2], "hue": f[3], "order": order});
            ours.push((
                format!("{:?} step {step}", x.kind()),
                jitter.op.apply(&params, x, &layout).unwrap(),
            ));
            cases.push(Case::apply("ColorJitter", json!({}), json, x, None));
        }
    }
    for ((what, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        let tolerance = if y.kind() == Kind::Uint8 { 0.0 } else { 1e-6 };
        let d = max_diff(y, &r);
        assert!(d <= tolerance, "{what}: differs by {d}");
    }
}
