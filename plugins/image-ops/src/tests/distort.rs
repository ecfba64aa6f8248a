//! `GridDistortion` against albumentations 2.0.8: the distortion maps for the drawn
//! stretches, the warp of image and mask through them, and the maps' distribution.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, floats, noise, run, typed};
use crate::distort::grid_axis;
use crate::GridDistortion;

#[test]
fn grid_maps_are_albumentations_maps() {
    let dummy = Tensor::zeros([1, 1], (Kind::Uint8, Device::Cpu));
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    // Sizes divisible by the bands, not, and barely larger than them.
    for (h, w, steps) in [
        (20, 25, 5),
        (23, 31, 5),
        (17, 9, 4),
        (12, 40, 7),
        (50, 61, 9),
    ] {
        for normalized in [true, false] {
            let config = format!(
                "num_steps = {steps}\ndistort_limit = 0.5\nnormalized = {normalized}\np = 1.0"
            );
            let op = typed::<GridDistortion>(&config, &["x"]);
            for seed in 0..4 {
                // The raw stretches: draw unnormalised, let albumentations normalise them.
                let raw = typed::<GridDistortion>(
                    &config.replace("normalized = true", "normalized = false"),
                    &["x"],
                );
                let [sx, sy] = raw.params(h, w, seed).unwrap();
                let params = json!({"shape": [h, w], "num_steps": steps, "steps_x": sx, "steps_y": sy, "normalized": normalized});
                cases.push(Case::new(
                    "grid",
                    "GridDistortion",
                    json!({}),
                    params,
                    &dummy,
                    None,
                ));
                let [nx, ny] = op.params(h, w, seed).unwrap();
                let xs = grid_axis(w as usize, steps, &nx);
                let ys = grid_axis(h as usize, steps, &ny);
                ours.push((
                    format!("{h}x{w} steps {steps} normalized {normalized} seed {seed}"),
                    xs,
                    ys,
                ));
            }
        }
    }
    for ((what, xs, ys), (maps, _)) in ours.iter().zip(albumentations(&cases)) {
        let (h, w) = (ys.len() as i64, xs.len() as i64);
        let map_x = floats(&maps.get(0).narrow(0, 0, 1).reshape([w]));
        let map_y = floats(&maps.get(1).narrow(1, 0, 1).reshape([h]));
        assert_eq!(&map_x, xs, "{what}: map_x");
        assert_eq!(&map_y, ys, "{what}: map_y");
    }
}

#[test]
fn grid_distortion_matches_albumentations_for_the_drawn_maps() {
    let image = noise(&[22, 27, 3], 90);
    let mask = noise(&[22, 27], 91)
        .divide_scalar_mode(64, "floor")
        .to_kind(Kind::Uint8);
    let images = [
        image.shallow_clone(),
        image.to_kind(Kind::Float) / 255.0,
        noise(&[22, 27], 92),
    ];
    let borders = [
        ("constant", 0),
        ("reflect_101", 4),
        ("replicate", 1),
        ("reflect", 2),
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (border, flag) in borders {
        for (interp, cv_interp) in [("bilinear", 1), ("nearest", 0)] {
            for x in &images {
                // A fill the dtype holds exactly, as OpenCV casts borderValue to it.
                let fill = if x.kind() == Kind::Uint8 { 7.0 } else { 0.25 };
                let config = format!(
                    "distort_limit = 0.6\nborder_mode = \"{border}\"\ninterpolation = \"{interp}\"\nfill = {fill}\nfill_mask = 3\nmasks = [\"mask\"]\np = 1.0"
                );
                let op = direct("GridDistortion", &config, &["x", "mask"]);
                let inner = typed::<GridDistortion>(&config, &["x", "mask"]);
                for seed in 0..3 {
                    let [sx, sy] = inner.params(22, 27, seed).unwrap();
                    let (xs, ys) = (grid_axis(27, 5, &sx), grid_axis(22, 5, &sy));
                    let map_x: Vec<Vec<f64>> = vec![xs; 22];
                    let map_y: Vec<Vec<f64>> = ys.iter().map(|&v| vec![v; 27]).collect();
                    let out = run(op.as_ref(), &[x, &mask], seed);
                    ours.push((
                        format!(
                            "{border} {interp} {:?} {:?} seed {seed}",
                            x.kind(),
                            x.size()
                        ),
                        out,
                    ));
                    // albumentations hands a scalar fill to cv2.remap as Scalar(fill, 0, 0, 0),
                    // filling the first channel only; ours fills every channel, as a list does.
                    let init = json!({"border_mode": flag, "interpolation": cv_interp, "fill": [fill, fill, fill, fill], "fill_mask": 3});
                    let params = json!({"map_x": map_x, "map_y": map_y});
                    cases.push(Case::apply("GridDistortion", init, params, x, Some(&mask)));
                }
            }
        }
    }
    for ((what, out), (r, m)) in ours.iter().zip(albumentations(&cases)) {
        let tolerance = if out[0].kind() == Kind::Uint8 {
            1.0
        } else {
            1e-5
        };
        let d = max_diff(&out[0], &r);
        assert!(d <= tolerance, "{what}: image differs by {d}");
        let m = m.unwrap();
        assert!(
            out[1].equal(&m.reshape(out[1].size())),
            "{what}: mask differs"
        );
    }
}

#[test]
fn grid_draws_follow_albumentations_distribution() {
    let n = 2000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let (h, w) = (20, 25);
    let op = typed::<GridDistortion>("distort_limit = [-0.2, 0.4]\np = 1.0", &["x"]);
    let init = json!({"distort_limit": [-0.2, 0.4]});
    let theirs_x = albumentations_samples("GridDistortion", init.clone(), &[h, w, 3], "map_x", n);
    let theirs_y = albumentations_samples("GridDistortion", init, &[h, w, 3], "map_y", n);
    let ours: Vec<[Vec<f64>; 2]> = (0..n as u64)
        .map(|s| {
            let [sx, sy] = op.params(h, w, s).unwrap();
            [grid_axis(w as usize, 5, &sx), grid_axis(h as usize, 5, &sy)]
        })
        .collect();
    // Band edges and interiors of the first row (x) and column (y).
    for (axis, theirs, points) in [(0, &theirs_x, [5usize, 12, 19]), (1, &theirs_y, [4, 9, 15])] {
        for p in points {
            let a: Vec<f64> = ours.iter().map(|o| o[axis][p]).collect();
            let b: Vec<f64> = theirs
                .iter()
                .map(|row| {
                    if axis == 0 {
                        row[p]
                    } else {
                        row[p * w as usize]
                    }
                })
                .collect();
            let d = ks_statistic(&a, &b);
            assert!(d < critical, "axis {axis} point {p}: KS {d}");
        }
    }
}

#[test]
fn grid_distortion_rejects_images_smaller_than_the_bands() {
    let op = direct("GridDistortion", "num_steps = 5\np = 1.0", &["x"]);
    let tiny = noise(&[4, 30, 3], 93);
    let err = op.forward(&[&tiny], &super::seeded(0)).unwrap_err();
    assert!(err.to_string().contains("smaller than num_steps"), "{err}");
}
