//! `GaussianBlur` and `MedianBlur` against albumentations 2.0.8 for the drawn parameters.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::blur::gaussian_kernel;
use crate::{GaussianBlur, MedianBlur};

/// uint8 `(H, W, 3)` and `(H, W)` images and the colour one as float32.
fn images() -> [Tensor; 3] {
    let image = noise(&[11, 14, 3], 50);
    let float = image.to_kind(Kind::Float) / 255.0;
    [image, float, noise(&[11, 14], 51)]
}

#[test]
fn gaussian_blur_matches_albumentations_for_the_drawn_kernel() {
    // Kernels wider than the image exercise repeated reflect-101.
    let configs = [
        "sigma_limit = [0.3, 6.0]",
        "blur_limit = [3, 30]\nsigma_limit = 2.0",
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for config in configs {
        let config = format!("{config}\np = 1.0");
        let op = direct("GaussianBlur", &config, &["x"]);
        let inner = typed::<GaussianBlur>(&config, &["x"]).0;
        for x in &images() {
            for seed in 0..5 {
                let p = inner.params(&[x], seed).unwrap().unwrap();
                let kernel = gaussian_kernel(p[0], p[1] as i64);
                let what = format!("{config} {:?} {:?} seed {seed} {p:?}", x.kind(), x.size());
                ours.push((what, run(op.as_ref(), &[x], seed).remove(0)));
                cases.push(Case::apply(
                    "GaussianBlur",
                    json!({}),
                    json!({ "kernel": kernel }),
                    x,
                    None,
                ));
            }
        }
    }
    for ((what, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        let tolerance = if y.kind() == Kind::Uint8 { 1.0 } else { 1e-5 };
        let d = max_diff(y, &r);
        assert!(d <= tolerance, "{what}: differs by {d}");
    }
}

#[test]
fn gaussian_kernel_is_albumentations_kernel() {
    for (sigma, size) in [(0.7, 0), (2.3, 0), (1.5, 4), (1.0, 9), (0.4, 1)] {
        let init = json!({"sigma_limit": [sigma, sigma], "blur_limit": [size, size]});
        let theirs = albumentations_samples("GaussianBlur", init, &[4, 4, 3], "kernel", 1);
        let ours = gaussian_kernel(sigma, size);
        assert_eq!(ours.len(), theirs[0].len(), "sigma {sigma} size {size}");
        for (a, b) in ours.iter().zip(&theirs[0]) {
            assert!(
                (a - b).abs() < 1e-12,
                "sigma {sigma} size {size}: {ours:?} vs {theirs:?}"
            );
        }
    }
}

#[test]
fn median_blur_matches_albumentations_for_the_drawn_aperture() {
    let config = "blur_limit = [3, 9]\np = 1.0";
    let op = direct("MedianBlur", config, &["x"]);
    let inner = typed::<MedianBlur>(config, &["x"]).0;
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for x in &images() {
        for seed in 0..6 {
            let p = inner.params(&[x], seed).unwrap().unwrap();
            ours.push((
                format!("{:?} {:?} k {}", x.kind(), x.size(), p[0]),
                run(op.as_ref(), &[x], seed).remove(0),
            ));
            cases.push(Case::apply(
                "MedianBlur",
                json!({}),
                json!({"kernel": p[0] as i64}),
                x,
                None,
            ));
        }
    }
    for ((what, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        let tolerance = if y.kind() == Kind::Uint8 { 0.0 } else { 1e-6 };
        let d = max_diff(y, &r);
        assert!(d <= tolerance, "{what}: differs by {d}");
    }
}

#[test]
fn blur_draws_follow_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    let gauss = typed::<GaussianBlur>(
        "sigma_limit = [0.5, 2.5]\nblur_limit = [3, 11]\np = 1.0",
        &["x"],
    )
    .0;
    let ours: Vec<Vec<f64>> = (0..n as u64)
        .map(|s| gauss.params(&[&image], s).unwrap().unwrap())
        .collect();
    // albumentations reports the kernel; its length is the size and its centre fixes sigma.
    let theirs = albumentations_samples(
        "GaussianBlur",
        json!({"sigma_limit": [0.5, 2.5], "blur_limit": [3, 11]}),
        &[4, 4, 3],
        "kernel",
        n,
    );
    let our_sizes: Vec<f64> = ours
        .iter()
        .map(|p| gaussian_kernel(p[0], p[1] as i64).len() as f64)
        .collect();
    let our_centres: Vec<f64> = ours
        .iter()
        .map(|p| {
            let k = gaussian_kernel(p[0], p[1] as i64);
            k[k.len() / 2]
        })
        .collect();
    // Rows of different lengths come back NaN-padded.
    let theirs: Vec<Vec<f64>> = theirs
        .iter()
        .map(|k| k.iter().copied().filter(|v| !v.is_nan()).collect())
        .collect();
    let their_sizes: Vec<f64> = theirs.iter().map(|k| k.len() as f64).collect();
    let their_centres: Vec<f64> = theirs.iter().map(|k| k[k.len() / 2]).collect();
    let d = ks_statistic(&our_sizes, &their_sizes);
    assert!(d < critical, "kernel size KS {d}");
    let d = ks_statistic(&our_centres, &their_centres);
    assert!(d < critical, "kernel centre KS {d}");
    let median = typed::<MedianBlur>("blur_limit = [3, 9]\np = 1.0", &["x"]).0;
    let ours: Vec<f64> = (0..n as u64)
        .map(|s| median.params(&[&image], s).unwrap().unwrap()[0])
        .collect();
    let theirs = albumentations_samples(
        "MedianBlur",
        json!({"blur_limit": [3, 9]}),
        &[4, 4, 3],
        "kernel",
        n,
    );
    let theirs: Vec<f64> = theirs.iter().map(|k| k[0]).collect();
    let d = ks_statistic(&ours, &theirs);
    assert!(d < critical, "aperture KS {d}");
}
