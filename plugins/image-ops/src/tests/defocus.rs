//! `Defocus` against albumentations 2.0.8: the blur for the radius and alias sigma the op
//! drew, and the distribution of those draws.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::defocus::defocus_kernel;
use crate::Defocus;

#[test]
fn defocus_matches_albumentations_for_the_drawn_radius_and_sigma() {
    let image = noise(&[20, 23, 3], 90);
    let images = [
        image.shallow_clone(),
        image.to_kind(Kind::Float) / 255.0,
        noise(&[18, 21], 91),
        // Smaller than the kernel: the border reflects more than once.
        noise(&[7, 9, 1], 92),
    ];
    // Radii both sides of 8 (3 × 3 and 5 × 5 alias blurs); sigma 0 takes OpenCV's fixed
    // binomial kernels.
    let configs = [
        "radius = [1, 12]\nalias_blur = [0.0, 0.8]",
        "radius = [2, 2]\nalias_blur = 0.0",
        "radius = [10, 10]\nalias_blur = [0.0, 0.0]",
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    let mut radii = std::collections::BTreeSet::new();
    for config in configs {
        let config = format!("{config}\np = 1.0");
        let op = direct("Defocus", &config, &["x"]);
        let inner = typed::<Defocus>(&config, &["x"]).0;
        for x in &images {
            for seed in 0..5 {
                let p = inner.params(&[x], seed).unwrap().unwrap();
                radii.insert(p[0] as i64);
                ours.push((
                    format!("{config:?} {:?} {:?} {p:?}", x.kind(), x.size()),
                    run(op.as_ref(), &[x], seed).remove(0),
                ));
                let params = json!({"radius": p[0] as i64, "alias_blur": p[1]});
                cases.push(Case::apply("Defocus", json!({}), params, x, None));
            }
        }
    }
    assert!(
        radii.iter().any(|&r| r <= 8) && radii.iter().any(|&r| r > 8),
        "{radii:?}"
    );
    let mut worst = [0.0f64; 2];
    for ((what, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        let (tolerance, slot) = if y.kind() == Kind::Uint8 {
            (1.0, 0)
        } else {
            (1e-5, 1)
        };
        let d = max_diff(y, &r);
        assert!(d <= tolerance, "{what}: differs by {d}");
        worst[slot] = worst[slot].max(d);
    }
    eprintln!(
        "Defocus vs albumentations: uint8 {} float {}",
        worst[0], worst[1]
    );
}

#[test]
fn defocus_kernel_is_albumentations_soft_disc() {
    // Sums of albumentations' kernels: a disc reaching the grid's edge gets mass back from
    // the reflect-101 border of the alias blur, as OpenCV blurs it.
    for (radius, sigma, expected) in [
        (1, 0.0, 1.0),
        (3, 0.3, 1.0),
        (8, 0.5, 1.0129754540),
        (9, 0.1, 1.0),
        (14, 2.0, 1.0284044575),
    ] {
        let (k, size) = defocus_kernel(radius, sigma).unwrap();
        assert_eq!(size, 2 * radius.max(8) + 1);
        let sum: f64 = k.iter().map(|&v| f64::from(v)).sum();
        assert!((sum - expected).abs() < 1e-6, "r {radius}: sum {sum}");
        let c = (size / 2) as usize;
        let row = &k[c * size as usize..(c + 1) * size as usize];
        assert!(
            row.windows(2).take(c).all(|w| w[0] <= w[1]),
            "r {radius}: rises"
        );
    }
    let masks = direct("Defocus", "p = 1.0\nmasks = [\"m\"]", &["x", "m"]);
    let (x, m) = (noise(&[9, 9, 3], 93), noise(&[9, 9], 94));
    let out = run(masks.as_ref(), &[&x, &m], 0);
    assert!(out[1].equal(&m), "masks are left alone");
    assert!(!out[0].equal(&x));
    for (config, field) in [
        ("radius = 0", "radius"),
        ("radius = [5, 3]", "radius"),
        ("alias_blur = -0.1", "alias_blur"),
        ("alias_blur = [0.5, 0.2]", "alias_blur"),
    ] {
        let Err(e) = fe_plugin_api::testing::numpy_op("Defocus", config, &["x"], &["x"]) else {
            panic!("{config} accepted");
        };
        assert_eq!(e.field.as_str(), field, "{config}");
    }
}

#[test]
fn defocus_draws_follow_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    for (config, init) in [
        ("", json!({})),
        (
            "radius = 6\nalias_blur = 0.9",
            json!({"radius": 6, "alias_blur": 0.9}),
        ),
    ] {
        let op = typed::<Defocus>(&format!("{config}\np = 1.0"), &["x"]).0;
        let ours: Vec<Vec<f64>> = (0..n as u64)
            .map(|s| op.params(&[&image], s).unwrap().unwrap())
            .collect();
        for (i, key) in ["radius", "alias_blur"].into_iter().enumerate() {
            let theirs = albumentations_samples("Defocus", init.clone(), &[4, 4, 3], key, n);
            let a: Vec<f64> = ours.iter().map(|p| p[i]).collect();
            let b: Vec<f64> = theirs.iter().map(|r| r[0]).collect();
            let d = ks_statistic(&a, &b);
            assert!(d < critical, "{config:?}: {key} KS {d}");
        }
    }
}
