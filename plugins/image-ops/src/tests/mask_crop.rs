//! `CropNonEmptyMaskIfExists` against albumentations 2.0.8: the same crop for the window the
//! op drew, labelled pixels chosen uniformly and always inside the window, and the same
//! window distribution for a fixed mask.

use std::collections::BTreeMap;

use fe_plugin_api::tch::{Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, albumentations_mask_samples, ks_statistic, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::mask_crop::Draw;
use crate::CropNonEmptyMaskIfExists;

const H: i64 = 12;
const W: i64 = 16;

/// Pixels labelled 3 in channel 0 (the ones that count).
const LABELLED: [[i64; 2]; 5] = [[0, 0], [1, 2], [5, 5], [7, 9], [11, 15]];

/// A `(12, 16, 2)` mask: value 3 at `LABELLED` in channel 0, the ignored value 7 at two
/// more pixels there, and labels in channel 1, which is ignored.
fn mask() -> Tensor {
    let mut m = vec![0u8; (H * W * 2) as usize];
    let mut set = |[y, x]: [i64; 2], c: i64, v: u8| m[((y * W + x) * 2 + c) as usize] = v;
    for p in LABELLED {
        set(p, 0, 3);
    }
    set([2, 2], 0, 7);
    set([9, 1], 0, 7);
    set([4, 12], 1, 1);
    set([6, 6], 1, 5);
    Tensor::from_slice(&m).reshape([H, W, 2])
}

const CONFIG: &str =
    "height = 5\nwidth = 7\nignore_values = [7]\nignore_channels = [1]\nmasks = [\"mask\"]";

#[test]
fn mask_crop_matches_albumentations_for_the_drawn_window() {
    let image = noise(&[H, W, 3], 95);
    let images = [image.shallow_clone(), image.to_kind(Kind::Float) / 255.0];
    let mask = mask();
    let keys = ["image", "mask"];
    let op = direct("CropNonEmptyMaskIfExists", CONFIG, &keys);
    let draws = typed::<CropNonEmptyMaskIfExists>(CONFIG, &keys);
    let labelled = draws.labelled(&[&image, &mask]).unwrap();
    assert_eq!(labelled, LABELLED);
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for x in &images {
        for seed in 0..8 {
            let Draw { window, .. } = draws.draw(&labelled, (H, W), seed).unwrap();
            ours.push((
                format!("{:?} seed {seed} {window:?}", x.kind()),
                run(op.as_ref(), &[x, &mask], seed),
            ));
            let init =
                json!({"height": 5, "width": 7, "ignore_values": [7], "ignore_channels": [1]});
            let params = json!({ "crop_coords": window });
            cases.push(Case::apply(
                "CropNonEmptyMaskIfExists",
                init,
                params,
                x,
                Some(&mask),
            ));
        }
    }
    for ((what, out), (r, rm)) in ours.iter().zip(albumentations(&cases)) {
        assert_eq!(max_diff(&out[0], &r), 0.0, "{what}: image");
        assert!(out[1].equal(rm.as_ref().unwrap()), "{what}: mask");
    }
    let off = direct(
        "CropNonEmptyMaskIfExists",
        &format!("{CONFIG}\np = 0.0"),
        &keys,
    );
    assert!(run(off.as_ref(), &[&image, &mask], 0)[0].equal(&image));
}

/// Pearson's chi-square statistic of `counts` against equal expected counts.
fn chi_square(counts: &BTreeMap<i64, f64>, cells: usize, n: f64) -> f64 {
    let expected = n / cells as f64;
    assert!(counts.len() <= cells);
    let seen: f64 = counts
        .values()
        .map(|c| (c - expected).powi(2) / expected)
        .sum();
    seen + (cells - counts.len()) as f64 * expected
}

#[test]
fn mask_crop_picks_labelled_pixels_uniformly_inside_the_window() {
    let n = 5000;
    let keys = ["image", "mask"];
    let op = typed::<CropNonEmptyMaskIfExists>(CONFIG, &keys);
    let (image, mask) = (noise(&[H, W, 3], 96), mask());
    let labelled = op.labelled(&[&image, &mask]).unwrap();
    let mut chosen = BTreeMap::new();
    for seed in 0..n {
        let Draw { pixel, window } = op.draw(&labelled, (H, W), seed).unwrap();
        let [y, x] = pixel.expect("labelled pixels exist");
        let [x0, y0, x1, y1] = window;
        assert!(
            x0 <= x && x < x1 && y0 <= y && y < y1,
            "{pixel:?} outside {window:?}"
        );
        assert!(0 <= x0 && x1 <= W && 0 <= y0 && y1 <= H && x1 - x0 == 7 && y1 - y0 == 5);
        let i = LABELLED.iter().position(|&p| p == [y, x]).unwrap() as i64;
        *chosen.entry(i).or_insert(0.0) += 1.0;
    }
    // 4 degrees of freedom: 18.47 is the 0.001 quantile.
    let chi = chi_square(&chosen, LABELLED.len(), n as f64);
    assert!(chi < 18.47, "chosen pixels {chosen:?}: chi-square {chi}");

    // Only ignored labels: a uniform window anywhere.
    let empty = mask.masked_fill(&mask.eq(3), 7);
    assert!(op.labelled(&[&image, &empty]).unwrap().is_empty());
    let mut left = BTreeMap::new();
    for seed in 0..n {
        let d = op.draw(&[], (H, W), seed).unwrap();
        assert_eq!(d.pixel, None);
        *left.entry(d.window[0]).or_insert(0.0) += 1.0;
    }
    // 9 offsets, 8 degrees of freedom: 26.12 is the 0.001 quantile.
    let chi = chi_square(&left, (W - 7 + 1) as usize, n as f64);
    assert!(chi < 26.12, "x_min {left:?}: chi-square {chi}");
}

#[test]
fn mask_crop_windows_follow_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let mask = mask();
    let op = typed::<CropNonEmptyMaskIfExists>(CONFIG, &["image", "mask"]);
    let labelled = op.labelled(&[&mask, &mask]).unwrap();
    let ours: Vec<[i64; 4]> = (0..n as u64)
        .map(|s| op.draw(&labelled, (H, W), s).unwrap().window)
        .collect();
    let init = json!({"height": 5, "width": 7, "ignore_values": [7], "ignore_channels": [1]});
    let theirs =
        albumentations_mask_samples("CropNonEmptyMaskIfExists", init, &mask, "crop_coords", n);
    for (i, what) in ["x_min", "y_min"].into_iter().enumerate() {
        let a: Vec<f64> = ours.iter().map(|c| c[i] as f64).collect();
        let b: Vec<f64> = theirs.iter().map(|c| c[i]).collect();
        let d = ks_statistic(&a, &b);
        assert!(d < critical, "{what}: KS {d} >= {critical}");
    }
}

#[test]
fn mask_crop_unites_masks_and_checks_its_config() {
    let keys = ["image", "a", "b"];
    let config = "height = 3\nwidth = 3\nmasks = [\"a\", \"b\"]";
    let op = typed::<CropNonEmptyMaskIfExists>(config, &keys);
    let a = Tensor::zeros([6, 6], (Kind::Uint8, fe_plugin_api::tch::Device::Cpu));
    let b = a.copy();
    let _ = a.get(1).get(4).fill_(2);
    let _ = b.get(5).get(0).fill_(1);
    let image = noise(&[6, 6], 97);
    assert_eq!(op.labelled(&[&image, &a, &b]).unwrap(), [[1, 4], [5, 0]]);
    // Float masks, which albumentations cannot `|=`, unite their labelled pixels too.
    let fa = a.to_kind(Kind::Float) * 0.25;
    assert_eq!(op.labelled(&[&image, &fa, &b]).unwrap(), [[1, 4], [5, 0]]);
    let big = direct(
        "CropNonEmptyMaskIfExists",
        "height = 7\nwidth = 3\nmasks = [\"a\"]",
        &keys,
    );
    assert!(big.forward(&[&image, &a, &b], &super::seeded(0)).is_err());
    for (config, field) in [
        ("height = 0\nwidth = 3\nmasks = [\"a\"]", "height"),
        ("height = 3\nwidth = 3", "masks"),
        ("height = 3\nwidth = 3\nmasks = [\"c\"]", "masks"),
        ("height = 3\nwidth = 3\nmasks = [\"a\"]\np = 2.0", "p"),
        (
            "height = 3\nwidth = 3\nmasks = [\"b\"]\nkeypoints = [\"b\"]",
            "masks",
        ),
    ] {
        let made =
            fe_plugin_api::testing::numpy_op("CropNonEmptyMaskIfExists", config, &keys, &keys);
        let Err(e) = made else {
            panic!("{config} accepted");
        };
        assert_eq!(e.field.as_str(), field, "{config}");
    }
}
