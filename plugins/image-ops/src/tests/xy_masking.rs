//! `XYMasking` against albumentations 2.0.8: the same image and mask for the bands the op
//! reports it drew, and the same band distribution.

use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, Case};
use super::{direct, noise, run, typed};
use crate::XYMasking;

const CONFIG: &str = "num_masks_x = [1, 3]\nnum_masks_y = 2\nmask_x_length = [2, 5]\nmask_y_length = 4\nfill_value = 7\nmask_fill_value = 3\nmasks = [\"mask\"]\np = 1.0";

#[test]
fn xy_masking_matches_albumentations_for_the_drawn_bands() {
    let image = noise(&[14, 19, 3], 50);
    let float = image.to_kind(fe_plugin_api::tch::Kind::Float) / 255.0;
    let mask = noise(&[14, 19], 51);
    let keys = ["image", "mask"];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (x, config, fill) in [
        (&image, CONFIG.to_owned(), 7.0),
        (
            &float,
            CONFIG.replace("fill_value = 7", "fill = 0.25"),
            0.25,
        ),
    ] {
        let op = direct("XYMasking", &config, &keys);
        let draws = typed::<XYMasking>(&config, &keys);
        for seed in 0..5 {
            let holes = draws.holes(14, 19, seed).unwrap();
            ours.push((
                format!("{:?} seed {seed}", x.kind()),
                run(op.as_ref(), &[x, &mask], seed),
            ));
            let init = json!({"num_masks_x": [1, 3], "mask_x_length": [2, 5], "fill": fill, "fill_mask": 3});
            let params = json!({"holes": holes, "seed": 0});
            cases.push(Case::apply("XYMasking", init, params, x, Some(&mask)));
        }
    }
    for ((what, out), (r, rm)) in ours.iter().zip(albumentations(&cases)) {
        assert!(out[0].equal(&r), "{what}: image");
        assert!(out[1].equal(rm.as_ref().unwrap()), "{what}: mask");
    }
    // Without mask_fill_value masks stay as they are.
    let op = direct(
        "XYMasking",
        "num_masks_x = [1, 1]\nmask_x_length = [3, 3]\nmasks = [\"mask\"]\np = 1.0",
        &keys,
    );
    let out = run(op.as_ref(), &[&image, &mask], 0);
    assert!(out[1].equal(&mask) && !out[0].equal(&image));
}

#[test]
fn xy_masking_bands_follow_albumentations_distribution() {
    let (n, shape) = (2000, [20, 30, 3]);
    let config = "num_masks_x = [0, 3]\nnum_masks_y = [1, 2]\nmask_x_length = 6\nmask_y_length = [2, 5]\np = 1.0";
    let op = typed::<XYMasking>(config, &["x"]);
    let ours: Vec<Vec<[i64; 4]>> = (0..n as u64)
        .map(|s| op.holes(20, 30, s).unwrap())
        .collect();
    let init = json!({"num_masks_x": [0, 3], "num_masks_y": [1, 2], "mask_x_length": 6, "mask_y_length": [2, 5]});
    let theirs: Vec<Vec<[i64; 4]>> = albumentations_samples("XYMasking", init, &shape, "holes", n)
        .iter()
        .map(|row| {
            row.chunks(4)
                .filter(|c| !c[0].is_nan())
                .map(|c| [c[0], c[1], c[2], c[3]].map(|v| v as i64))
                .collect()
        })
        .collect();
    let vertical = |h: &[i64; 4]| h[1] == 0 && h[3] == 20 && !(h[0] == 0 && h[2] == 30);
    // Per call: vertical and horizontal band counts; per band: its start and length.
    type Stat = fn(&[[i64; 4]], &dyn Fn(&[i64; 4]) -> bool) -> Vec<f64>;
    let count: Stat = |holes, vertical| vec![holes.iter().filter(|h| vertical(h)).count() as f64];
    let stats: [(&str, Stat, bool); 6] = [
        ("vertical count", count, true),
        ("horizontal count", count, false),
        (
            "x start",
            |holes, v| holes.iter().filter(|h| v(h)).map(|h| h[0] as f64).collect(),
            true,
        ),
        (
            "x length",
            |holes, v| {
                holes
                    .iter()
                    .filter(|h| v(h))
                    .map(|h| (h[2] - h[0]) as f64)
                    .collect()
            },
            true,
        ),
        (
            "y start",
            |holes, v| {
                holes
                    .iter()
                    .filter(|h| !v(h))
                    .map(|h| h[1] as f64)
                    .collect()
            },
            true,
        ),
        (
            "y length",
            |holes, v| {
                holes
                    .iter()
                    .filter(|h| !v(h))
                    .map(|h| (h[3] - h[1]) as f64)
                    .collect()
            },
            true,
        ),
    ];
    for (what, stat, is_vertical) in stats {
        let pick = |calls: &[Vec<[i64; 4]>]| -> Vec<f64> {
            calls
                .iter()
                .flat_map(|holes| {
                    if is_vertical {
                        stat(holes, &vertical)
                    } else {
                        stat(holes, &|h| !vertical(h))
                    }
                })
                .collect()
        };
        let (a, b) = (pick(&ours), pick(&theirs));
        let critical = 1.95 * ((a.len() + b.len()) as f64 / (a.len() * b.len()) as f64).sqrt();
        let d = ks_statistic(&a, &b);
        assert!(d < critical, "{what}: KS {d} >= {critical}");
    }
}

#[test]
fn bad_band_settings_are_errors() {
    let made = |config: &str| fe_plugin_api::testing::numpy_op("XYMasking", config, &["x"], &["x"]);
    let Err(e) = made("num_masks_x = 2") else {
        panic!("no band length")
    };
    assert_eq!(e.field.as_str(), "mask_x_length");
    let Err(e) = made("mask_y_length = [5, 2]") else {
        panic!("decreasing range")
    };
    assert_eq!(e.field.as_str(), "mask_y_length");
    let op = direct(
        "XYMasking",
        "num_masks_x = 1\nmask_x_length = [4, 40]\np = 1.0",
        &["x"],
    );
    let err = op
        .forward(&[&noise(&[10, 20], 1)], &super::seeded(0))
        .unwrap_err();
    assert!(
        err.message().contains("mask_x_length reaches 40"),
        "{}",
        err.message()
    );
}
