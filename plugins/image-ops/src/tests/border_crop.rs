//! `RandomCropFromBorders` against albumentations 2.0.8: the same crop for the window the
//! op reports it drew, and the same window distribution.

use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, Case};
use super::{direct, noise, run, typed};
use crate::RandomCropFromBorders;

const CONFIG: &str = "crop_left = 0.3\ncrop_right = 0.5\ncrop_top = 0.2\ncrop_bottom = 0.6";

#[test]
fn border_crop_matches_albumentations_for_the_drawn_window() {
    let image = noise(&[17, 23, 3], 80);
    let mask = noise(&[17, 23], 81);
    let keys = ["image", "mask"];
    let op = direct("RandomCropFromBorders", CONFIG, &keys);
    let draws = typed::<RandomCropFromBorders>(CONFIG, &keys);
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for seed in 0..8 {
        let window = draws.window(17, 23, seed);
        ours.push((
            format!("seed {seed} {window:?}"),
            run(op.as_ref(), &[&image, &mask], seed),
        ));
        let params = json!({ "crop_coords": window });
        cases.push(Case::apply(
            "RandomCropFromBorders",
            json!({}),
            params,
            &image,
            Some(&mask),
        ));
    }
    let mut sizes = std::collections::BTreeSet::new();
    for ((what, out), (r, rm)) in ours.iter().zip(albumentations(&cases)) {
        assert!(out[0].equal(&r), "{what}: image");
        assert!(out[1].equal(rm.as_ref().unwrap()), "{what}: mask");
        sizes.insert(out[0].size());
    }
    assert!(sizes.len() >= 5, "the size varies with the draw: {sizes:?}");
    let off = direct("RandomCropFromBorders", "p = 0.0", &["x"]);
    assert!(run(off.as_ref(), &[&image], 0)[0].equal(&image));
}

#[test]
fn border_crop_windows_follow_albumentations_distribution() {
    let (n, h, w) = (3000, 20, 30);
    let op = typed::<RandomCropFromBorders>(CONFIG, &["x"]);
    let ours: Vec<[i64; 4]> = (0..n as u64).map(|s| op.window(h, w, s)).collect();
    let init = json!({"crop_left": 0.3, "crop_right": 0.5, "crop_top": 0.2, "crop_bottom": 0.6});
    let theirs =
        albumentations_samples("RandomCropFromBorders", init, &[h, w, 3], "crop_coords", n);
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    for (i, what) in ["x_min", "y_min", "x_max", "y_max"].into_iter().enumerate() {
        let a: Vec<f64> = ours.iter().map(|c| c[i] as f64).collect();
        let b: Vec<f64> = theirs.iter().map(|c| c[i]).collect();
        let d = ks_statistic(&a, &b);
        assert!(d < critical, "{what}: KS {d} >= {critical}");
    }
    let made = fe_plugin_api::testing::numpy_op(
        "RandomCropFromBorders",
        "crop_left = 0.6\ncrop_right = 0.5",
        &["x"],
        &["x"],
    );
    let Err(e) = made else {
        panic!("left + right > 1")
    };
    assert_eq!(e.field.as_str(), "crop_right");
}
