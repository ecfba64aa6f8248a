//! `Sharpen` against albumentations 2.0.8: the kernel it builds for the drawn α and lightness,
//! the image filtered with it (uint8 within one grey level of `cv2.filter2D`, whose SIMD
//! path may fuse a multiply-add, floats within float32 rounding), the "gaussian" method's
//! unsharp mask for the drawn α, and the draws' distribution.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::json;

use super::cv_gaussian::opencv;
use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{floats, noise, run, typed};
use crate::sharpen::sharpening_matrix;
use crate::Sharpen;

#[test]
fn sharpen_matches_albumentations_for_the_drawn_kernel() {
    let op: Sharpen = typed(
        "p = 1.0\nalpha = [0.1, 0.9]\nlightness = [0.2, 2.0]",
        &["x"],
    );
    let image = noise(&[9, 10, 3], 3);
    let gray = image.select(2, 0);
    let float = image.to_kind(Kind::Float) / 255.0;
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for seed in 0..6u64 {
        for x in [&image, &gray, &float] {
            let params = op.0.params(&[x], seed).unwrap().unwrap();
            let matrix: Vec<Vec<f32>> = sharpening_matrix(params[0], params[1])
                .chunks(3)
                .map(<[f32]>::to_vec)
                .collect();
            cases.push(Case::apply(
                "Sharpen",
                json!({}),
                json!({"alpha": params[0], "sharpening_matrix": matrix}),
                x,
                None,
            ));
            ours.push(run(&op, &[x], seed).remove(0));
        }
    }
    for (i, (y, (reference, _))) in ours.iter().zip(albumentations(&cases)).enumerate() {
        assert_eq!(y.kind(), reference.kind(), "case {i}");
        let tolerance = if y.kind() == Kind::Uint8 { 1.0 } else { 1e-6 };
        let d = max_diff(y, &reference);
        assert!(d <= tolerance, "case {i}: differs by {d}");
    }
    assert!(max_diff(&ours[0], &image) > 10.0, "the image was sharpened");
}

#[test]
fn the_kernel_is_albumentations_kernel() {
    // albumentations' own draws: α, and the matrix it built from α and its lightness draw.
    let init = json!({"alpha": [0.1, 0.9], "lightness": [0.2, 2.0]});
    let alphas = albumentations_samples("Sharpen", init.clone(), &[4, 4, 3], "alpha", 50);
    let matrices = albumentations_samples("Sharpen", init, &[4, 4, 3], "sharpening_matrix", 50);
    for (alpha, matrix) in alphas.iter().zip(&matrices) {
        let alpha = alpha[0];
        // The centre is (1 - α) + α (8 + L): solve for L, rebuild, compare every entry.
        let lightness = (f64::from(matrix[4] as f32) - (1.0 - alpha)) / alpha - 8.0;
        let ours = sharpening_matrix(alpha, lightness);
        for (a, b) in ours.iter().zip(matrix) {
            assert!((f64::from(*a) - b).abs() < 1e-5, "{ours:?} vs {matrix:?}");
        }
    }
}

#[test]
fn sharpen_draws_follow_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let op: Sharpen = typed("p = 1.0", &["x"]);
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    let ours: Vec<f64> = (0..n as u64)
        .map(|seed| op.0.params(&[&image], seed).unwrap().unwrap()[0])
        .collect();
    let theirs: Vec<f64> = albumentations_samples("Sharpen", json!({}), &[4, 4, 3], "alpha", n)
        .iter()
        .map(|a| a[0])
        .collect();
    let d = ks_statistic(&ours, &theirs);
    assert!(d < critical, "alpha KS {d}");
}

#[test]
fn bad_ranges_are_errors_naming_the_key() {
    for (config, key) in [
        ("alpha = [0.5, 1.5]", "alpha"),
        ("lightness = [1.0, 0.5]", "lightness"),
        ("method = \"box\"", "method"),
        ("method = \"gaussian\"\nkernel_size = 1", "kernel_size"),
        ("method = \"gaussian\"\nkernel_size = 4", "kernel_size"),
        ("method = \"gaussian\"\nsigma = 0.0", "sigma"),
    ] {
        let Err(e) = fe_plugin_api::testing::numpy_op("Sharpen", config, &["x"], &["x"]) else {
            panic!("{config} should fail");
        };
        assert_eq!(e.field.to_string(), key, "{config}: {e}");
    }
}

#[test]
fn sharpen_gaussian_matches_albumentations_for_the_drawn_alpha() {
    let image = noise(&[10, 9, 3], 4);
    let images = [
        image.shallow_clone(),
        noise(&[7, 12], 5),
        image.to_kind(Kind::Float) / 255.0,
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (size, sigma) in [(5, 1.0), (3, 2.0), (9, 0.6)] {
        let config = format!(
            "method = \"gaussian\"\nkernel_size = {size}\nsigma = {sigma}\nalpha = [0.1, 0.9]\np = 1.0"
        );
        let op: Sharpen = typed(&config, &["x"]);
        let init = json!({"method": "gaussian", "kernel_size": size, "sigma": sigma});
        for x in &images {
            for seed in 0..3u64 {
                let params = op.0.params(&[x], seed).unwrap().unwrap();
                assert_eq!(params.len(), 1, "only alpha is drawn");
                let what = format!("{config} {:?} {:?} seed {seed}", x.kind(), x.size());
                ours.push((
                    what,
                    x.shallow_clone(),
                    params[0],
                    run(&op, &[x], seed).remove(0),
                ));
                let drawn = json!({"alpha": params[0], "sharpening_matrix": null});
                cases.push(Case::apply("Sharpen", init.clone(), drawn, x, None));
                cases.push(opencv(x, size, sigma));
            }
        }
    }
    let references = albumentations(&cases);
    let (mut wrapped, mut kept) = (0, 0);
    for ((what, x, alpha, y), pair) in ours.iter().zip(references.chunks(2)) {
        let (theirs, blurred) = (&pair[0].0, &pair[1].0);
        assert_eq!(y.kind(), theirs.kind(), "{what}");
        if y.kind() != Kind::Uint8 {
            let d = max_diff(y, theirs);
            assert!(d <= 1e-6, "{what}: differs by {d}");
            continue;
        }
        // albumentations takes x - blurred in uint8, which wraps where the blur is brighter:
        // there we hold the signed unsharp mask over OpenCV's blur, elsewhere its output.
        let (x, b, y, t) = (floats(x), floats(blurred), floats(y), floats(theirs));
        for i in 0..x.len() {
            let signed = (x[i] + alpha * (x[i] - b[i])).clamp(0.0, 255.0).trunc();
            assert_eq!(y[i], signed, "{what}: element {i}");
            if x[i] >= b[i] {
                assert_eq!(
                    y[i], t[i],
                    "{what}: element {i} differs from albumentations"
                );
                kept += 1;
            } else {
                wrapped += 1;
            }
        }
    }
    assert!(
        kept > 500 && wrapped > 500,
        "both sides tested: {kept} / {wrapped}"
    );
    assert!(
        max_diff(&ours[0].3, &image) > 10.0,
        "the image was sharpened"
    );
}

#[test]
fn sharpen_gaussian_alpha_follows_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let op: Sharpen = typed("method = \"gaussian\"\nalpha = [0.3, 0.8]\np = 1.0", &["x"]);
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    let ours: Vec<f64> = (0..n as u64)
        .map(|seed| op.0.params(&[&image], seed).unwrap().unwrap()[0])
        .collect();
    let init = json!({"method": "gaussian", "alpha": [0.3, 0.8]});
    let theirs: Vec<f64> = albumentations_samples("Sharpen", init, &[4, 4, 3], "alpha", n)
        .iter()
        .map(|a| a[0])
        .collect();
    let d = ks_statistic(&ours, &theirs);
    assert!(d < critical, "alpha KS {d}");
}
