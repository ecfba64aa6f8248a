//! `CLAHE` against albumentations 2.0.8 for the drawn clip limit, and the uint8 Lab
//! conversions it runs through against OpenCV on every colour.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::lab::{lab_to_rgb, rgb_to_lab};
use crate::CLAHE;

/// All 2^24 byte triples as a `(4096, 4096, 3)` image.
fn every_triple() -> Tensor {
    let v = Tensor::arange(1 << 24, (Kind::Int64, Device::Cpu));
    let triples = Tensor::stack(
        &[
            v.divide_scalar_mode(1 << 16, "floor"),
            v.divide_scalar_mode(256, "floor").remainder(256),
            v.remainder(256),
        ],
        1,
    );
    triples.to_kind(Kind::Uint8).reshape([4096, 4096, 3])
}

fn convert(x: &Tensor, f: fn(&[u8]) -> Vec<u8>) -> Tensor {
    let bytes = Vec::<u8>::try_from(x.flatten(0, -1)).unwrap();
    Tensor::from_slice(&f(&bytes)).reshape(x.size())
}

#[test]
fn uint8_lab_conversions_equal_opencv_on_every_colour() {
    let all = every_triple();
    let cases = [
        Case::new(
            "cv2",
            "cvtColor",
            json!({}),
            json!({"args": [45]}),
            &all,
            None,
        ),
        Case::new(
            "cv2",
            "cvtColor",
            json!({}),
            json!({"args": [57]}),
            &all,
            None,
        ),
    ];
    let reference = albumentations(&cases);
    let to_lab = convert(&all, rgb_to_lab);
    let to_rgb = convert(&all, lab_to_rgb);
    for (what, ours, (theirs, _)) in [
        ("RGB2LAB", to_lab, &reference[0]),
        ("LAB2RGB", to_rgb, &reference[1]),
    ] {
        let differ = ours
            .ne_tensor(theirs)
            .any_dim(2, false)
            .sum(Kind::Int64)
            .int64_value(&[]);
        assert_eq!(differ, 0, "{what}: {differ} colours differ from OpenCV");
    }
}

/// A photo-like uint8 `(h, w, c)` image: dark and bright regions of different texture, so
/// tiles have different histograms and the clip limit bites.
fn scene(h: i64, w: i64, c: i64, seed: i64) -> Tensor {
    let opts = (Kind::Double, Device::Cpu);
    let y = Tensor::arange(h, opts).view([h, 1, 1]);
    let x = Tensor::arange(w, opts).view([1, w, 1]);
    let ch = Tensor::arange(c, opts).view([1, 1, c]);
    let base = (&x * (90.0 / w as f64) + &y * (60.0 / h as f64) + &ch * 25.0) + 20.0;
    let bright = x.ge(w / 2).to_kind(Kind::Double) * 90.0;
    let grain = noise(&[h, w, c], seed).to_kind(Kind::Double) / 12.0;
    (base + bright + grain)
        .clamp(0.0, 255.0)
        .to_kind(Kind::Uint8)
}

#[test]
fn clahe_matches_albumentations_for_the_drawn_clip_limit() {
    let rgb = scene(37, 45, 3, 80);
    let images = [
        rgb.shallow_clone(),
        rgb.to_kind(Kind::Float) / 255.0,
        scene(40, 48, 1, 81).squeeze_dim(2),
        scene(29, 33, 1, 82),
        noise(&[16, 24, 3], 83),
        scene(5, 7, 3, 84),
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for grid in [[8, 8], [3, 5], [4, 1]] {
        let config = format!("clip_limit = [1.0, 8.0]\ntile_grid_size = {grid:?}\np = 1.0");
        let op = direct("CLAHE", &config, &["x"]);
        let inner = typed::<CLAHE>(&config, &["x"]).0;
        for x in &images {
            for seed in 0..4 {
                let p = inner.params(&[x], seed).unwrap().unwrap();
                let what = format!("grid {grid:?} {:?} {:?} clip {}", x.kind(), x.size(), p[0]);
                ours.push((what, run(op.as_ref(), &[x], seed).remove(0)));
                cases.push(Case::apply(
                    "CLAHE",
                    json!({ "tile_grid_size": grid }),
                    json!({ "clip_limit": p[0] }),
                    x,
                    None,
                ));
            }
        }
    }
    for ((what, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        let r = r.reshape(y.size());
        let d = max_diff(y, &r);
        assert!(d <= 1e-6, "{what}: differs by {d}");
    }
}

#[test]
fn clahe_rejects_other_channel_counts() {
    let op = direct("CLAHE", "p = 1.0", &["x"]);
    let two = noise(&[8, 8, 2], 85);
    let err = op.forward(&[&two], &super::seeded(0)).unwrap_err();
    assert!(err.to_string().contains("1 or 3 channels"), "{err}");
}

#[test]
fn clahe_clip_draws_follow_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    let op = typed::<CLAHE>("clip_limit = 6.0\np = 1.0", &["x"]).0;
    let ours: Vec<f64> = (0..n as u64)
        .map(|s| op.params(&[&image], s).unwrap().unwrap()[0])
        .collect();
    let theirs = albumentations_samples(
        "CLAHE",
        json!({"clip_limit": 6.0}),
        &[4, 4, 3],
        "clip_limit",
        n,
    );
    let theirs: Vec<f64> = theirs.iter().map(|r| r[0]).collect();
    let d = ks_statistic(&ours, &theirs);
    assert!(d < critical, "clip limit KS {d}");
}
