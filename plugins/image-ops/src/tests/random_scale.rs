//! `RandomScale` against albumentations 2.0.8: the same output (size included) for the
//! factor the op reports it drew, and the same factor distribution.

use fe_plugin_api::tch::Kind;
use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::RandomScale;

#[test]
fn random_scale_matches_albumentations_for_the_drawn_factor() {
    let image = noise(&[15, 22, 3], 70);
    let float = image.to_kind(Kind::Float) / 255.0;
    let mask = noise(&[15, 22], 71);
    let keys = ["image", "mask"];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (i, (interp, code)) in [("bilinear", 1), ("nearest", 0), ("bicubic", 2)]
        .into_iter()
        .enumerate()
    {
        let config = format!(
            "scale_limit = [-0.6, 0.9]\ninterpolation = \"{interp}\"\nmasks = [\"mask\"]\np = 1.0"
        );
        let op = direct("RandomScale", &config, &keys);
        let draws = typed::<RandomScale>(&config, &keys);
        for x in [&image, &float] {
            for seed in 4 * i as u64..4 * i as u64 + 4 {
                let s = draws.scale(seed).unwrap();
                let what = format!("{interp} {:?} seed {seed} scale {s}", x.kind());
                ours.push((what, run(op.as_ref(), &[x, &mask], seed)));
                let init = json!({"scale_limit": [-0.6, 0.9], "interpolation": code});
                cases.push(Case::apply(
                    "RandomScale",
                    init,
                    json!({"scale": s}),
                    x,
                    Some(&mask),
                ));
            }
        }
    }
    let mut sizes = std::collections::BTreeSet::new();
    for ((what, out), (r, rm)) in ours.iter().zip(albumentations(&cases)) {
        let tolerance = if out[0].kind() == Kind::Uint8 {
            1.0
        } else {
            1e-5
        };
        let d = max_diff(&out[0], &r);
        assert!(d <= tolerance, "{what}: image differs by {d}");
        assert!(out[1].equal(rm.as_ref().unwrap()), "{what}: mask");
        sizes.insert(out[0].size());
    }
    assert!(sizes.len() >= 6, "the size varies with the draw: {sizes:?}");
    let off = direct("RandomScale", "p = 0.0", &["x"]);
    assert!(run(off.as_ref(), &[&image], 0)[0].equal(&image));
}

#[test]
fn random_scale_factors_follow_albumentations_distribution() {
    let n = 3000;
    let op = typed::<RandomScale>("scale_limit = [-0.3, 0.2]\np = 1.0", &["x"]);
    let ours: Vec<f64> = (0..n as u64).map(|s| op.scale(s).unwrap()).collect();
    let init = json!({"scale_limit": [-0.3, 0.2]});
    let theirs: Vec<f64> = albumentations_samples("RandomScale", init, &[8, 8, 3], "scale", n)
        .iter()
        .map(|r| r[0])
        .collect();
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let d = ks_statistic(&ours, &theirs);
    assert!(d < critical, "scale: KS {d} >= {critical}");
    // A symmetric limit l is [1 - l, 1 + l]: rejected against [0.7, 1.2].
    let symmetric = typed::<RandomScale>("scale_limit = 0.3\np = 1.0", &["x"]);
    let other: Vec<f64> = (0..n as u64).map(|s| symmetric.scale(s).unwrap()).collect();
    assert!(other.iter().all(|s| (0.7..=1.3).contains(s)));
    assert!(ks_statistic(&other, &theirs) > critical);
    let made =
        fe_plugin_api::testing::numpy_op("RandomScale", "scale_limit = [-1.5, 0]", &["x"], &["x"]);
    let Err(e) = made else {
        panic!("a factor below 0")
    };
    assert_eq!(e.field.as_str(), "scale_limit");
}
