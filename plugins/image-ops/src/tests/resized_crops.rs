//! `Crop`, `RandomResizedCrop` and `RandomSizedCrop` against albumentations 2.0.8: the same
//! output for the window the op reports, and the same window distribution.

use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::{RandomResizedCrop, RandomSizedCrop};

#[test]
fn crop_matches_albumentations_and_is_batchable() {
    let image = noise(&[9, 12, 3], 11);
    let mask = noise(&[9, 12], 12);
    let op = direct(
        "Crop",
        "x_min = 3\ny_min = 2\nx_max = 11\ny_max = 7",
        &["image", "mask"],
    );
    assert!(op.batchable());
    let out = run(op.as_ref(), &[&image, &mask], 0);
    let init = json!({"x_min": 3, "y_min": 2, "x_max": 11, "y_max": 7});
    let (r, rm) = &albumentations(&[Case::compose("Crop", init, &image, Some(&mask))])[0];
    assert!(out[0].equal(r) && out[1].equal(rm.as_ref().unwrap()));
    let batch = fe_plugin_api::tch::Tensor::stack(&[&image, &image.flip([0])], 0);
    let y = op
        .forward_batch(&[&batch, &batch.select(3, 0)], &super::seeded(0))
        .unwrap();
    assert!(y[0].get(0).equal(&out[0]));
    let err = op.forward(
        &[&noise(&[6, 12, 3], 1), &noise(&[6, 12], 1)],
        &super::seeded(0),
    );
    assert!(err.unwrap_err().message().contains("outside input `image`"));
}

#[test]
fn random_resized_crops_match_albumentations_for_the_drawn_window() {
    let image = noise(&[20, 16, 3], 13);
    let mask = noise(&[20, 16], 14);
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for interp in ["bilinear", "nearest"] {
        let code = if interp == "nearest" { 0 } else { 1 };
        let config =
            format!("height = 12\nwidth = 10\ninterpolation = \"{interp}\"\nmasks = [\"mask\"]");
        let rrc = typed::<RandomResizedCrop>(&config, &["image", "mask"]);
        let op = direct("RandomResizedCrop", &config, &["image", "mask"]);
        for seed in 0..6 {
            let out = run(op.as_ref(), &[&image, &mask], seed);
            ours.push((format!("RandomResizedCrop {interp} seed {seed}"), out));
            let params = json!({"crop_coords": rrc.coords(20, 16, seed)});
            let init = json!({"size": [12, 10], "interpolation": code});
            cases.push(Case::apply(
                "RandomResizedCrop",
                init,
                params,
                &image,
                Some(&mask),
            ));
        }
        let config = format!("min_max_height = [5, 14]\nheight = 8\nwidth = 9\nw2h_ratio = 1.2\ninterpolation = \"{interp}\"\nmasks = [\"mask\"]");
        let rsc = typed::<RandomSizedCrop>(&config, &["image", "mask"]);
        let op = direct("RandomSizedCrop", &config, &["image", "mask"]);
        for seed in 0..6 {
            let out = run(op.as_ref(), &[&image, &mask], seed);
            ours.push((format!("RandomSizedCrop {interp} seed {seed}"), out));
            let params = json!({"crop_coords": rsc.coords(20, 16, seed)});
            let init = json!({"min_max_height": [5, 14], "size": [8, 9], "w2h_ratio": 1.2, "interpolation": code});
            cases.push(Case::apply(
                "RandomSizedCrop",
                init,
                params,
                &image,
                Some(&mask),
            ));
        }
    }
    for ((name, out), (r, rm)) in ours.iter().zip(albumentations(&cases)) {
        assert!(
            max_diff(&out[0], &r) <= 1.0,
            "{name}: {}",
            max_diff(&out[0], &r)
        );
        assert!(out[1].equal(rm.as_ref().unwrap()), "{name} mask");
    }
}

/// Area fraction and aspect ratio of window `[x0, y0, x1, y1]` in an `h × w` image.
fn shape_of(c: &[f64], h: f64, w: f64) -> (f64, f64) {
    let (cw, ch) = (c[2] - c[0], c[3] - c[1]);
    (cw * ch / (h * w), cw / ch)
}

#[test]
fn random_resized_crop_windows_follow_albumentations_distribution() {
    let (h, w, n) = (60, 40, 3000);
    let rrc = typed::<RandomResizedCrop>("height = 8\nwidth = 8", &["x"]);
    let ours: Vec<(f64, f64)> = (0..n as u64)
        .map(|seed| {
            let c = rrc.coords(h, w, seed).map(|v| v as f64);
            shape_of(&c, h as f64, w as f64)
        })
        .collect();
    let theirs: Vec<(f64, f64)> = albumentations_samples(
        "RandomResizedCrop",
        json!({"size": [8, 8]}),
        &[h, w, 3],
        "crop_coords",
        n,
    )
    .iter()
    .map(|c| shape_of(c, h as f64, w as f64))
    .collect();
    // KS critical value at the 0.1% level for two samples of n: 1.95 * sqrt(2 / n).
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let pick = |v: &[(f64, f64)], area: bool| -> Vec<f64> {
        v.iter().map(|&(a, r)| if area { a } else { r }).collect()
    };
    for (what, area) in [("area", true), ("aspect", false)] {
        let d = ks_statistic(&pick(&ours, area), &pick(&theirs, area));
        assert!(d < critical, "{what}: KS {d} >= {critical}");
    }
    // The test can tell distributions apart: a narrower scale range is rejected.
    let narrow = typed::<RandomResizedCrop>("height = 8\nwidth = 8\nscale = [0.3, 1.0]", &["x"]);
    let shifted: Vec<f64> = (0..n as u64)
        .map(|seed| {
            shape_of(
                &narrow.coords(h, w, seed).map(|v| v as f64),
                h as f64,
                w as f64,
            )
            .0
        })
        .collect();
    assert!(ks_statistic(&shifted, &pick(&theirs, true)) > critical);
}
