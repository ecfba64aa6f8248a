//! `GridMask` against FastEstimator's (its numpy + OpenCV algorithm, restated in
//! `albumentations_ref.py`) for the drawn grid, and the draws against FastEstimator's.

use fe_plugin_api::tch::{Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, ks_statistic, max_diff, Case};
use super::{direct, floats, ints, noise, run, typed};
use crate::GridMask;

#[test]
fn grid_mask_matches_fastestimator_for_the_drawn_grid() {
    let image = noise(&[23, 31, 3], 93);
    let mask = noise(&[23, 31], 94).f_remainder(3).unwrap();
    let images = [
        image.shallow_clone(),
        image.to_kind(Kind::Float) / 255.0,
        noise(&[23, 31], 95),
    ];
    // Each config with the values the reference needs: rotation on, ratio, fills.
    let configs = [
        (
            "d_range = [4, 12]\nratio = 0.5\nmask_fill_value = 7",
            json!({"rotate": false, "ratio": 0.5, "fill": 0.0, "mask_fill": 7}),
        ),
        (
            "d_range = [5, 9]\nratio = 0.3\nrotate_angle = 40\nfill_value = 0.25\nmask_fill_value = 5",
            json!({"rotate": true, "ratio": 0.3, "fill": 0.25, "mask_fill": 5}),
        ),
        (
            "d_range = [20, 40]\nrotate_angle = 180\nfill_value = 200\nmask_fill_value = 9",
            json!({"rotate": true, "ratio": 0.6, "fill": 200.0, "mask_fill": 9}),
        ),
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (config, fixed) in configs {
        let config = format!("{config}\nmasks = [\"m\"]");
        let op = direct("GridMask", &config, &["x", "m"]);
        let inner = typed::<GridMask>(&config, &["x", "m"]);
        for x in &images {
            for seed in 0..6 {
                let g = inner.grid(seed).unwrap();
                let out = run(op.as_ref(), &[x, &mask], seed);
                ours.push((format!("{config} {:?} {:?} {g:?}", x.kind(), x.size()), out));
                let mut params = json!({
                    "d": g.d, "offset_y": g.offset_y, "offset_x": g.offset_x, "angle": g.angle,
                });
                for (k, v) in fixed.as_object().unwrap() {
                    params[k] = v.clone();
                }
                cases.push(Case::new(
                    "grid_mask",
                    "GridMask",
                    json!({}),
                    params,
                    x,
                    Some(&mask),
                ));
            }
        }
    }
    let (mut dropped, mut total) = (0usize, 0usize);
    for ((what, y), (r, m)) in ours.iter().zip(albumentations(&cases)) {
        assert_eq!(y[0].kind(), r.kind(), "{what}: dtype");
        let d = max_diff(&y[0], &r);
        assert!(d <= 1e-7, "{what}: image differs by {d}");
        let m = m.unwrap();
        assert_eq!(ints(&y[1]), ints(&m), "{what}: mask differs");
        dropped += ints(&m).iter().filter(|&&v| v >= 5).count();
        total += m.numel();
    }
    // Both dropped and kept pixels are compared.
    let share = dropped as f64 / total as f64;
    assert!(0.05 < share && share < 0.9, "dropped share {share}");
}

#[test]
fn grid_mask_leaves_unfilled_masks_and_skipped_samples_alone() {
    let image = noise(&[10, 12, 3], 96);
    let mask = noise(&[10, 12], 97);
    let op = direct("GridMask", "d_range = [3, 5]\nmasks = [\"m\"]", &["x", "m"]);
    let out = run(op.as_ref(), &[&image, &mask], 1);
    assert_eq!(ints(&out[1]), ints(&mask), "mask without mask_fill_value");
    assert!(max_diff(&out[0], &image) > 0.0, "image should be masked");
    let op = direct("GridMask", "d_range = [3, 5]\np = 0.0", &["x"]);
    assert_eq!(
        ints(&run(op.as_ref(), &[&image], 1)[0]),
        ints(&image),
        "p = 0"
    );
    for (config, key) in [
        ("ratio = 1.0", "in (0, 1)"),
        ("d_range = [0, 4]", "1 <= lo <= hi"),
        ("rotate_angle = -1", ">= 0"),
    ] {
        let err = super::testing::numpy_op("GridMask", config, &["x"], &["x"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains(key), "{config}: {err}");
    }
}

#[test]
fn grid_mask_draws_follow_fastestimator_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let op = typed::<GridMask>("d_range = [10, 30]\nrotate_angle = 25", &["x"]);
    let ours: Vec<[f64; 4]> = (0..n as u64)
        .map(|s| {
            let g = op.grid(s).unwrap();
            [g.d as f64, g.offset_y as f64, g.offset_x as f64, g.angle]
        })
        .collect();
    let params = json!({"d_range": [10, 30], "rotate_angle": 25.0, "n": n});
    let image = Tensor::zeros([2, 2], (Kind::Uint8, fe_plugin_api::tch::Device::Cpu));
    let case = Case::new(
        "grid_mask_draws",
        "GridMask",
        json!({}),
        params,
        &image,
        None,
    );
    let theirs = floats(&albumentations(&[case]).remove(0).0);
    for (i, what) in ["d", "offset_y", "offset_x", "angle"].iter().enumerate() {
        let a: Vec<f64> = ours.iter().map(|r| r[i]).collect();
        let b: Vec<f64> = theirs.iter().skip(i).step_by(4).copied().collect();
        let d = ks_statistic(&a, &b);
        assert!(d < critical, "{what} KS {d}");
    }
}
