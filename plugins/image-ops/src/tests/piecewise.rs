//! `PiecewiseAffine` against albumentations 2.0.8: the maps for our drawn jitter, the warp
//! of image and mask through them, the distribution of the draws, and the config checks.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, floats, ints, noise, run, typed};
use crate::piecewise::piecewise_maps;
use crate::PiecewiseAffine;

#[test]
fn piecewise_maps_equal_albumentations_for_the_same_jitter() {
    let dummy = Tensor::zeros([1, 1], (Kind::Uint8, Device::Cpu));
    // Default draws; uneven grids on small and odd sizes; pixel scales; a 12 x 13 grid
    // (156 points: numpy's sums split above 128); one-pixel-wide images.
    let configs: [(&str, &[(i64, i64)]); 5] = [
        ("", &[(20, 25), (9, 17)]),
        (
            "scale = [0.05, 0.2]\nnb_rows = [2, 5]\nnb_cols = [3, 6]",
            &[(17, 9), (31, 40)],
        ),
        ("scale = [2.0, 6.0]\nabsolute_scale = true", &[(24, 30)]),
        ("scale = 0.1\nnb_rows = 12\nnb_cols = 13", &[(30, 33)]),
        ("scale = 0.3\nnb_rows = 3", &[(1, 12), (10, 1)]),
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (config, sizes) in configs {
        let op = typed::<PiecewiseAffine>(&format!("{config}\np = 1.0"), &["x"]);
        for &(h, w) in sizes {
            for seed in 0..3 {
                let draw = op.draw(h, w, seed).unwrap();
                let jitter: Vec<f64> = draw.normals.iter().map(|z| draw.jitter_scale * z).collect();
                let params = json!({"shape": [h, w], "rows": draw.rows, "cols": draw.cols,
                    "scale": draw.scale, "absolute_scale": config.contains("absolute"),
                    "jitter_scale": draw.jitter_scale, "jitter": jitter});
                cases.push(Case::new(
                    "piecewise_maps",
                    "PiecewiseAffine",
                    json!({}),
                    params,
                    &dummy,
                    None,
                ));
                let what = format!(
                    "{config:?} {h}x{w} seed {seed} grid {}x{}",
                    draw.rows, draw.cols
                );
                ours.push((what, piecewise_maps(&draw, h as usize, w as usize)));
            }
        }
    }
    let mut moved = 0.0f64;
    for ((what, [mx, my]), (maps, _)) in ours.iter().zip(albumentations(&cases)) {
        for (axis, ours) in [(0, mx), (1, my)] {
            let ours: Vec<f64> = ours.iter().map(|&v| f64::from(v)).collect();
            let theirs = floats(&maps.get(axis));
            assert_eq!(ours, theirs, "{what}: axis {axis}");
        }
        let w = maps.size()[2] as usize;
        let identity = (0..mx.len()).map(|i| (f64::from(mx[i]) - (i % w) as f64).abs());
        moved = identity.fold(moved, f64::max);
    }
    assert!(moved > 1.0, "the maps barely move: {moved}");
}

#[test]
fn piecewise_affine_matches_albumentations_for_the_drawn_maps() {
    let (h, w) = (22i64, 27i64);
    let image = noise(&[h, w, 3], 110);
    let mask = noise(&[h, w], 111).f_remainder(5).unwrap();
    let images = [
        image.shallow_clone(),
        image.to_kind(Kind::Float) / 255.0,
        noise(&[h, w], 112),
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (config, init) in [
        // A scalar fill is every channel's; albumentations hands cv2.remap the bare number,
        // which fills the first channel only, so its fill is spelled out per channel.
        (
            "cval = 40\ncval_mask = 7",
            json!({"fill": [40, 40, 40], "fill_mask": 7}),
        ),
        ("border_mode = \"reflect_101\"", json!({"border_mode": 4})),
        ("interpolation = \"nearest\"", json!({"interpolation": 0})),
    ] {
        let config =
            format!("{config}\nscale = [0.1, 0.2]\nnb_rows = [3, 5]\nmasks = [\"m\"]\np = 1.0");
        let op = direct("PiecewiseAffine", &config, &["x", "m"]);
        let inner = typed::<PiecewiseAffine>(&config, &["x", "m"]);
        for x in &images {
            for seed in 0..3 {
                let draw = inner.draw(h, w, seed).unwrap();
                let [mx, my] = piecewise_maps(&draw, h as usize, w as usize);
                let what = format!("{config} {:?} {:?} seed {seed}", x.kind(), x.size());
                ours.push((what, run(op.as_ref(), &[x, &mask], seed)));
                let rows = |m: &[f32]| json!(m.chunks(w as usize).collect::<Vec<_>>());
                let params = json!({"map_x": rows(&mx), "map_y": rows(&my)});
                cases.push(Case::apply(
                    "PiecewiseAffine",
                    init.clone(),
                    params,
                    x,
                    Some(&mask),
                ));
            }
        }
    }
    let (mut worst, mut moved) = (0.0f64, 0.0f64);
    for ((what, y), (r, m)) in ours.iter().zip(albumentations(&cases)) {
        let tolerance = if y[0].kind() == Kind::Uint8 {
            1.0
        } else {
            1e-5
        };
        let d = max_diff(&y[0], &r);
        assert!(d <= tolerance, "{what}: image differs by {d}");
        assert_eq!(ints(&y[1]), ints(&m.unwrap()), "{what}: mask differs");
        worst = worst.max(d);
        moved = moved.max(max_diff(&y[1], &mask));
    }
    assert!(
        moved > 0.0,
        "no mask changed (worst image difference {worst})"
    );
}

#[test]
fn piecewise_jitter_is_normal_with_albumentations_standard_deviation() {
    // scale 0.06 on a 30 x 45 image: sigma = 0.06 * 30 / 3 = 0.6 px.
    let op = typed::<PiecewiseAffine>("scale = [0.06, 0.06]\np = 1.0", &["x"]);
    let pixels =
        typed::<PiecewiseAffine>("scale = [1.5, 1.5]\nabsolute_scale = true\np = 1.0", &["x"]);
    let mut jitter = Vec::new();
    for seed in 0..200 {
        let draw = op.draw(30, 45, seed).unwrap();
        assert!(
            (draw.jitter_scale - 0.6).abs() < 1e-12,
            "{}",
            draw.jitter_scale
        );
        assert_eq!((draw.rows, draw.cols, draw.normals.len()), (4, 4, 32));
        jitter.extend(draw.normals.iter().map(|z| draw.jitter_scale * z));
        let sigma = pixels.draw(30, 45, seed).unwrap().jitter_scale;
        assert!((sigma - 0.5).abs() < 1e-12, "absolute scale: {sigma}");
    }
    let n = jitter.len();
    let dummy = Tensor::zeros([1, 1], (Kind::Uint8, Device::Cpu));
    let params = json!({"lam": 1.0, "sigma": 0.6, "n": n});
    let case = Case::new(
        "numpy_draws",
        "PiecewiseAffine",
        json!({}),
        params,
        &dummy,
        None,
    );
    let theirs = floats(&albumentations(&[case]).remove(0).0);
    let d = ks_statistic(&jitter, &theirs[n..]);
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    assert!(d < critical, "jitter KS {d} against numpy's N(0, 0.6)");
}

#[test]
fn piecewise_draws_follow_albumentations_distribution() {
    let n = 1500;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let (h, w) = (6i64, 8i64);
    let config = "scale = [0.05, 0.3]\nnb_rows = [2, 4]\nnb_cols = [3, 5]\np = 1.0";
    let op = typed::<PiecewiseAffine>(config, &["x"]);
    let draws: Vec<_> = (0..n as u64).map(|s| op.draw(h, w, s).unwrap()).collect();
    // The grid sizes: each of the three values a third of the time (3 sigma).
    for (what, sizes) in [
        ("rows", draws.iter().map(|d| d.rows - 2).collect::<Vec<_>>()),
        ("cols", draws.iter().map(|d| d.cols - 3).collect()),
    ] {
        for k in 0..3 {
            let count = sizes.iter().filter(|&&s| s == k).count() as f64;
            let sd = (n as f64 * (1.0 / 3.0) * (2.0 / 3.0)).sqrt();
            assert!(
                (count - n as f64 / 3.0).abs() < 3.0 * sd,
                "{what} {k}: {count}"
            );
        }
    }
    let ours: Vec<[Vec<f32>; 2]> = draws
        .iter()
        .map(|d| piecewise_maps(d, h as usize, w as usize))
        .collect();
    let init = json!({"scale": [0.05, 0.3], "nb_rows": [2, 4], "nb_cols": [3, 5]});
    for (axis, key) in [(0, "map_x"), (1, "map_y")] {
        let theirs = albumentations_samples("PiecewiseAffine", init.clone(), &[h, w, 3], key, n);
        // A corner (a control point, clipped at 0), an edge and two interior pixels.
        for pixel in [0usize, 3, 19, 44] {
            let a: Vec<f64> = ours.iter().map(|m| f64::from(m[axis][pixel])).collect();
            let b: Vec<f64> = theirs.iter().map(|r| r[pixel]).collect();
            let d = ks_statistic(&a, &b);
            assert!(d < critical, "{key}[{pixel}]: KS {d}");
        }
    }
}

#[test]
fn piecewise_affine_zero_scale_leaves_inputs_alone() {
    let x = noise(&[9, 11, 3], 113);
    let op = direct("PiecewiseAffine", "scale = 0.0\np = 1.0", &["x"]);
    for seed in 0..3 {
        assert!(run(op.as_ref(), &[&x], seed)[0].equal(&x));
    }
}

#[test]
fn piecewise_affine_config_errors_name_the_key() {
    let build = |config: &str| {
        fe_plugin_api::testing::numpy_op("PiecewiseAffine", config, &["x"], &["x"]).err()
    };
    for (config, field) in [
        ("nb_rows = 1", "nb_rows"),
        ("nb_cols = [5, 3]", "nb_cols"),
        ("scale = [-0.1, 0.2]", "scale"),
        ("scale = [0.2, 0.1]", "scale"),
        ("mask_interpolation = \"bicubic\"", "mask_interpolation"),
        ("interpolation = \"bicubic\"", "interpolation"),
        (
            "keypoint_remapping_method = \"inverse\"",
            "keypoint_remapping_method",
        ),
    ] {
        let err = build(config).unwrap_or_else(|| panic!("{config} was accepted"));
        assert_eq!(err.field.as_str(), field, "{config}: {err:?}");
    }
    // albumentations 1.x's keypoints_threshold (scikit-image's warp) is gone in 2.0.8.
    let err = build("keypoints_threshold = 0.01").expect("keypoints_threshold was accepted");
    assert_eq!(err.field.as_str(), "keypoints_threshold", "{err:?}");
    assert!(build("cval = 3\ncval_mask = 1\nnb_rows = [2, 6]\nscale = 0.04").is_none());
}
