//! `GlassBlur` against albumentations 2.0.8: the image for the drawn swap offsets (fed to its
//! `apply` as `dxy`), the offsets' distribution, and the settings it refuses.

use fe_plugin_api::tch::{Kind, Tensor};
use serde_json::{json, Value};

use super::cv_gaussian::blur;
use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{floats, noise, run, typed};
use crate::GlassBlur;

/// The flat draws as albumentations' `(pixels, iterations, 2)` integer array.
fn dxy(draws: &[f64], iterations: usize) -> Value {
    let pairs: Vec<[i64; 2]> = draws
        .chunks(2)
        .map(|p| [p[0] as i64, p[1] as i64])
        .collect();
    json!(pairs.chunks(iterations).collect::<Vec<_>>())
}

#[test]
fn glass_blur_matches_albumentations_for_the_drawn_swaps() {
    let image = noise(&[14, 12, 3], 80);
    let images = [
        image.shallow_clone(),
        noise(&[11, 13], 81),
        image.to_kind(Kind::Float) / 255.0,
    ];
    let settings = [
        (0.7, 4, 2, "fast"),
        (1.3, 2, 3, "fast"),
        (0.5, 3, 2, "exact"),
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (sigma, delta, iterations, mode) in settings {
        let config = format!(
            "sigma = {sigma}\nmax_delta = {delta}\niterations = {iterations}\nmode = \"{mode}\"\np = 1.0"
        );
        let op: GlassBlur = typed(&config, &["x"]);
        let init =
            json!({"sigma": sigma, "max_delta": delta, "iterations": iterations, "mode": mode});
        for x in &images {
            for seed in 0..2u64 {
                let draws = op.0.params(&[x], seed).unwrap().unwrap();
                let params = json!({ "dxy": dxy(&draws, iterations) });
                // albumentations' exact mode swaps a colour pixel through a numpy view, which
                // copies instead of swapping; each channel alone (a 2-D image) swaps truly.
                let channels: Vec<Tensor> = if mode == "exact" && x.dim() == 3 {
                    (0..x.size()[2]).map(|c| x.select(2, c)).collect()
                } else {
                    vec![x.shallow_clone()]
                };
                for c in &channels {
                    cases.push(Case::apply(
                        "GlassBlur",
                        init.clone(),
                        params.clone(),
                        c,
                        None,
                    ));
                }
                let y = run(&op, &[x], seed).remove(0);
                let what = format!("{config} {:?} {:?} seed {seed}", x.kind(), x.size());
                ours.push((what, x.shallow_clone(), channels.len(), y));
            }
        }
    }
    let mut references = albumentations(&cases).into_iter().map(|(r, _)| r);
    for (what, x, channels, y) in &ours {
        let parts: Vec<Tensor> = references.by_ref().take(*channels).collect();
        let theirs = if *channels > 1 {
            Tensor::stack(&parts, 2)
        } else {
            parts[0].shallow_clone()
        };
        assert_eq!(y.kind(), theirs.kind(), "{what}");
        let tolerance = if y.kind() == Kind::Uint8 { 0.0 } else { 1e-6 };
        let d = max_diff(y, &theirs);
        assert!(d <= tolerance, "{what}: differs by {d}");
        let unswapped = blur(&blur(x, 0, 0.7), 0, 0.7);
        if x.kind() == Kind::Uint8 && what.starts_with("sigma = 0.7") {
            assert!(
                max_diff(y, &unswapped) > 5.0,
                "{what}: the swaps moved pixels"
            );
        }
    }
}

#[test]
fn glass_blur_offsets_follow_albumentations_distribution() {
    let (seeds, shape) = (40, [12, 11, 3]);
    let op: GlassBlur = typed("max_delta = 3\niterations = 2\np = 1.0", &["x"]);
    let image = noise(&shape, 82);
    let mut ours = Vec::new();
    for seed in 0..seeds as u64 {
        let draws = op.0.params(&[&image], seed).unwrap().unwrap();
        // (12 - 6) × (11 - 6) swapped pixels, 2 rounds, (dy, dx) each.
        assert_eq!(draws.len(), 6 * 5 * 2 * 2);
        ours.extend(draws);
    }
    let init = json!({"max_delta": 3, "iterations": 2});
    let theirs: Vec<f64> = albumentations_samples("GlassBlur", init, &shape, "dxy", seeds).concat();
    assert_eq!(theirs.len(), ours.len());
    let range = |v: &[f64]| {
        v.iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)))
    };
    assert_eq!(
        range(&ours),
        (-3.0, 2.0),
        "numpy's integers(-d, d) leaves d out"
    );
    assert_eq!(range(&ours), range(&theirs));
    let critical = 1.95 * (2.0 / ours.len() as f64).sqrt();
    let d = ks_statistic(&ours, &theirs);
    assert!(d < critical, "offset KS {d}");
}

#[test]
fn an_image_too_small_to_swap_is_blurred_twice() {
    // 6 rows leave no row max_delta = 4 away from both edges, so nothing is drawn.
    let op: GlassBlur = typed("p = 1.0", &["x"]);
    let x = noise(&[6, 20, 3], 83);
    assert_eq!(op.0.params(&[&x], 0).unwrap().unwrap().len(), 0);
    let y = run(&op, &[&x], 0).remove(0);
    assert_eq!(floats(&y), floats(&blur(&blur(&x, 0, 0.7), 0, 0.7)));
}

#[test]
fn bad_settings_are_errors_naming_the_key() {
    for (config, key) in [
        ("sigma = 0.0", "sigma"),
        ("max_delta = 0", "max_delta"),
        ("iterations = 0", "iterations"),
        ("mode = \"slow\"", "mode"),
    ] {
        let Err(e) = fe_plugin_api::testing::numpy_op("GlassBlur", config, &["x"], &["x"]) else {
            panic!("{config} should fail");
        };
        assert_eq!(e.field.to_string(), key, "{config}: {e}");
    }
}
