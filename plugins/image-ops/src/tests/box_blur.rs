//! `Blur` (box blur) against albumentations 2.0.8 for the drawn kernel size, and the
//! distribution of the sizes.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::Blur;

#[test]
fn box_blur_matches_albumentations_for_the_drawn_size() {
    let image = noise(&[11, 14, 3], 98);
    let images = [
        image.shallow_clone(),
        image.to_kind(Kind::Float) / 255.0,
        noise(&[11, 14], 99),
    ];
    // Sizes up to twice the image exercise repeated reflect-101.
    let config = "blur_limit = [3, 27]\np = 1.0";
    let op = direct("Blur", config, &["x"]);
    let inner = typed::<Blur>(config, &["x"]).0;
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for x in &images {
        for seed in 0..8 {
            let p = inner.params(&[x], seed).unwrap().unwrap();
            let what = format!("{:?} {:?} k {}", x.kind(), x.size(), p[0]);
            ours.push((what, run(op.as_ref(), &[x], seed).remove(0)));
            let params = json!({"kernel": p[0] as i64});
            cases.push(Case::apply("Blur", json!({}), params, x, None));
        }
    }
    for ((what, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        let tolerance = if y.kind() == Kind::Uint8 { 1.0 } else { 1e-5 };
        let d = max_diff(y, &r);
        assert!(d <= tolerance, "{what}: differs by {d}");
    }
}

#[test]
fn box_blur_sizes_follow_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    for (config, init) in [
        ("blur_limit = [3, 11]", json!({"blur_limit": [3, 11]})),
        ("blur_limit = 8", json!({"blur_limit": 8})),
    ] {
        let op = typed::<Blur>(&format!("{config}\np = 1.0"), &["x"]).0;
        let ours: Vec<f64> = (0..n as u64)
            .map(|s| op.params(&[&image], s).unwrap().unwrap()[0])
            .collect();
        let theirs = albumentations_samples("Blur", init, &[4, 4, 3], "kernel", n);
        let theirs: Vec<f64> = theirs.iter().map(|k| k[0]).collect();
        let d = ks_statistic(&ours, &theirs);
        assert!(d < critical, "{config}: size KS {d}");
    }
}
