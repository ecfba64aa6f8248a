//! `ISONoise` against albumentations 2.0.8: the noised image for the drawn strengths and
//! noise fields, and the distributions of the strengths and of the fields.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, floats, noise, run, typed};
use crate::hls::rgb_to_hls;
use crate::iso_noise::{lightness_std, rgb_pixels};
use crate::layout::Spatial;
use crate::ISONoise;

/// The hue noise handed to the reference: where it turns a hue below 0, one turn (360°)
/// more, and how many such pixels. OpenCV's vectorised float HLS → RGB does not wrap
/// negative hues (it extrapolates the red sector), its scalar path and ours do; with the
/// turn added both paths give the wrapped colour.
fn wrapped_hues(x: &Tensor, noise: &[f64]) -> (Vec<f64>, usize) {
    let layout = Spatial::of("x", x, false).unwrap();
    let pixels = rgb_pixels(x, &layout).unwrap();
    let mut turned = 0;
    let hues = pixels
        .iter()
        .zip(noise)
        .map(|(&p, &n)| {
            if (f64::from(rgb_to_hls(p)[0]) + n) as f32 >= 0.0 {
                n
            } else {
                turned += 1;
                n + 360.0
            }
        })
        .collect();
    (hues, turned)
}

#[test]
fn iso_noise_matches_albumentations_for_the_drawn_fields() {
    let image = noise(&[9, 13, 3], 90);
    // A dark, low-contrast image keeps most pixels off the clipping bounds.
    let dim = image.f_div_scalar(4).unwrap().to_kind(Kind::Uint8);
    let images = [
        image.shallow_clone(),
        image.to_kind(Kind::Float) / 255.0,
        dim.shallow_clone(),
        dim.to_kind(Kind::Float) / 255.0,
    ];
    let (mut cases, mut ours, mut wrapped) = (Vec::new(), Vec::new(), 0);
    // The defaults, and strengths whose Poisson counts are mostly non-zero.
    for config in [
        "p = 1.0",
        "color_shift = [1, 5]\nintensity = [2, 4]\np = 1.0",
    ] {
        let op = direct("ISONoise", config, &["x"]);
        let inner = typed::<ISONoise>(config, &["x"]).0;
        for x in &images {
            for seed in 0..4 {
                let p = inner.params(&[x], seed).unwrap().unwrap();
                let n = (p.len() - 2) / 2;
                let what = format!("{config} {:?} seed {seed} {:?}", x.kind(), &p[..2]);
                ours.push((
                    what,
                    x.shallow_clone(),
                    run(op.as_ref(), &[x], seed).remove(0),
                ));
                let (hues, turned) = wrapped_hues(x, &p[2 + n..]);
                wrapped += turned;
                let params = json!({
                    "color_shift": p[0], "intensity": p[1],
                    "counts": p[2..2 + n], "hues": hues,
                });
                cases.push(Case::new(
                    "iso_noise",
                    "ISONoise",
                    json!({}),
                    params,
                    x,
                    None,
                ));
            }
        }
    }
    let mut moved = 0.0f64;
    for ((what, x, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        let tolerance = if y.kind() == Kind::Uint8 { 1.0 } else { 1e-5 };
        let d = max_diff(y, &r);
        assert!(d <= tolerance, "{what}: differs by {d}");
        assert_eq!(y.kind(), x.kind(), "{what}: dtype");
        let scale = if x.kind() == Kind::Uint8 { 255.0 } else { 1.0 };
        moved = moved.max(max_diff(x, &r) / scale);
    }
    // The comparison means something only if the reference changed the images, and the
    // wrap is exercised.
    assert!(
        moved > 0.2,
        "albumentations barely changed the images: {moved}"
    );
    assert!(wrapped >= 10, "only {wrapped} hues went below 0");
}

#[test]
fn iso_noise_needs_rgb() {
    let op = direct("ISONoise", "p = 1.0", &["x"]);
    for shape in [&[6i64, 7][..], &[6, 7, 1], &[6, 7, 4]] {
        let x = noise(shape, 91);
        let err = op
            .forward(&[&x], &super::seeded(0))
            .unwrap_err()
            .to_string();
        assert!(err.contains("ISONoise needs"), "{shape:?}: {err}");
    }
    let err = super::testing::numpy_op("ISONoise", "intensity = [0.1, 500]", &["x"], &["x"])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("hi <= 100"), "{err}");
}

#[test]
fn iso_noise_strengths_follow_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    let op = typed::<ISONoise>(
        "color_shift = [0.02, 0.3]\nintensity = [0.2, 0.9]\np = 1.0",
        &["x"],
    )
    .0;
    let ours: Vec<Vec<f64>> = (0..n as u64)
        .map(|s| op.params(&[&image], s).unwrap().unwrap()[..2].to_vec())
        .collect();
    for (i, key) in ["color_shift", "intensity"].iter().enumerate() {
        let init = json!({"color_shift": [0.02, 0.3], "intensity": [0.2, 0.9]});
        let theirs = albumentations_samples("ISONoise", init, &[4, 4, 3], key, n);
        let theirs: Vec<f64> = theirs.iter().map(|r| r[0]).collect();
        let ours: Vec<f64> = ours.iter().map(|p| p[i]).collect();
        let d = ks_statistic(&ours, &theirs);
        assert!(d < critical, "{key} KS {d}");
    }
}

#[test]
fn iso_noise_fields_follow_numpy_distribution() {
    // Fixed strengths, so every pixel's count is Poisson(std(L) · 3) and its hue noise
    // N(0, 0.1 · 3); pooled over seeds.
    let config = "color_shift = [0.1, 0.1]\nintensity = [3, 3]\np = 1.0";
    let op = typed::<ISONoise>(config, &["x"]).0;
    let image = noise(&[16, 16, 3], 92);
    let layout = Spatial::of("x", &image, false).unwrap();
    let lam = lightness_std(&rgb_pixels(&image, &layout).unwrap()) * 3.0;
    let (mut counts, mut hues) = (Vec::new(), Vec::new());
    for seed in 0..12 {
        let p = op.params(&[&image], seed).unwrap().unwrap();
        let n = (p.len() - 2) / 2;
        counts.extend_from_slice(&p[2..2 + n]);
        hues.extend_from_slice(&p[2 + n..]);
    }
    let n = counts.len();
    let params = json!({"lam": lam, "sigma": 0.3, "n": n});
    let case = Case::new("numpy_draws", "ISONoise", json!({}), params, &image, None);
    let (theirs, _) = albumentations(&[case]).remove(0);
    let theirs = floats(&theirs);
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let d = ks_statistic(&counts, &theirs[..n]);
    assert!(d < critical, "Poisson({lam}) counts KS {d}");
    let d = ks_statistic(&hues, &theirs[n..]);
    assert!(d < critical, "hue noise KS {d}");
    assert!(
        counts.iter().any(|&c| c >= 2.0),
        "lam {lam} should give counts of 2+"
    );
}
