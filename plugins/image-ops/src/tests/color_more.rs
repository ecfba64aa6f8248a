//! `HueSaturationValue` (and its OpenCV HSV conversions) against albumentations 2.0.8 / OpenCV.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::hsv::{hsv_to_rgb, rgb_to_hsv};
use crate::HueSaturationValue;

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
