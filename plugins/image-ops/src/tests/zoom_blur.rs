//! `ZoomBlur` against albumentations 2.0.8 for the drawn zoom factors, and the distribution
//! of the factors.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::zoom_blur::zoom_factors;
use crate::ZoomBlur;

#[test]
fn zoom_blur_matches_albumentations_for_the_drawn_factors() {
    let image = noise(&[13, 17, 3], 100);
    let images = [
        image.shallow_clone(),
        image.to_kind(Kind::Float) / 255.0,
        noise(&[16, 11], 101),
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for config in [
        "p = 1.0",
        "max_factor = [1.2, 1.9]\nstep_factor = [0.05, 0.2]\np = 1.0",
    ] {
        let op = direct("ZoomBlur", config, &["x"]);
        let inner = typed::<ZoomBlur>(config, &["x"]).0;
        for x in &images {
            for seed in 0..5 {
                let p = inner.params(&[x], seed).unwrap().unwrap();
                let factors = zoom_factors(p[0], p[1]);
                let what = format!("{config} {:?} {:?} {factors:?}", x.kind(), x.size());
                ours.push((
                    what,
                    x.shallow_clone(),
                    run(op.as_ref(), &[x], seed).remove(0),
                ));
                let params = json!({ "zoom_factors": factors });
                cases.push(Case::apply("ZoomBlur", json!({}), params, x, None));
            }
        }
    }
    let mut moved = 0.0f64;
    for ((what, x, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        assert_eq!(y.kind(), x.kind(), "{what}: dtype");
        let tolerance = if y.kind() == Kind::Uint8 { 1.0 } else { 1e-5 };
        let d = max_diff(y, &r);
        assert!(d <= tolerance, "{what}: differs by {d}");
        let scale = if x.kind() == Kind::Uint8 { 255.0 } else { 1.0 };
        moved = moved.max(max_diff(x, &r) / scale);
    }
    assert!(
        moved > 0.2,
        "albumentations barely changed the images: {moved}"
    );
}

#[test]
fn zoom_factors_are_numpy_arange() {
    // (1.3 - 1) / 0.1 is 3.0000000000000004 in float64: numpy gives 4 factors, 1.3 included.
    assert_eq!(zoom_factors(0.1, 1.3).len(), 4);
    assert_eq!(zoom_factors(0.05, 1.05), vec![1.0, 1.05]);
    assert_eq!(zoom_factors(0.25, 1.6), vec![1.0, 1.25, 1.5]);
}

#[test]
fn zoom_blur_factors_follow_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    let op = typed::<ZoomBlur>(
        "max_factor = [1.1, 1.6]\nstep_factor = [0.02, 0.1]\np = 1.0",
        &["x"],
    )
    .0;
    let ours: Vec<Vec<f64>> = (0..n as u64)
        .map(|s| {
            let p = op.params(&[&image], s).unwrap().unwrap();
            zoom_factors(p[0], p[1])
        })
        .collect();
    let init = json!({"max_factor": [1.1, 1.6], "step_factor": [0.02, 0.1]});
    let theirs = albumentations_samples("ZoomBlur", init, &[4, 4, 3], "zoom_factors", n);
    let theirs: Vec<Vec<f64>> = theirs
        .iter()
        .map(|r| r.iter().copied().filter(|v| !v.is_nan()).collect())
        .collect();
    let summary = |rows: &[Vec<f64>], i: usize| -> Vec<f64> {
        rows.iter()
            .map(|f| match i {
                0 => f.len() as f64,
                1 => f[f.len() - 1],
                _ => f.get(1).map_or(0.0, |s| s - 1.0),
            })
            .collect()
    };
    for (i, what) in ["count", "largest factor", "step"].iter().enumerate() {
        let d = ks_statistic(&summary(&ours, i), &summary(&theirs, i));
        assert!(d < critical, "{what} KS {d}");
    }
}
