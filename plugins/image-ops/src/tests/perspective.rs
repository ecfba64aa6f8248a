//! `Perspective` against albumentations 2.0.8: the matrix and sizes for the drawn corners
//! (`fit_output` too), the warp of images and masks for that matrix, the whole transform with
//! our corner draws under each `keep_size` / `fit_output` setting, and the distribution of
//! the draws.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::{json, Value};

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, floats, ints, noise, run, typed};
use crate::perspective::corners;
use crate::Perspective;

/// The op's matrix, `max_width` and `max_height` for `seed` on an `h × w` image, and the
/// corners they come from.
fn drawn(op: &Perspective, seed: u64, h: i64, w: i64) -> ([f64; 9], i64, i64, [[f64; 2]; 4]) {
    let jitter = op.jitter(seed).unwrap();
    let (m, mw, mh) = op.matrix(&jitter, h, w);
    (m, mw, mh, corners(&jitter, h, w))
}

#[test]
fn perspective_params_are_albumentations_params() {
    // Large scales fold corners past each other and, on tiny images, bring them closer
    // than 2 pixels (albumentations' adjust_dimension).
    let image = Tensor::zeros([2, 2], (Kind::Uint8, Device::Cpu));
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for ((h, w), fit) in [(40, 60), (7, 5), (3, 2)]
        .into_iter()
        .flat_map(|size| [(size, false), (size, true)])
    {
        let config = format!("scale = [0.05, 0.6]\nfit_output = {fit}\np = 1.0");
        let op = typed::<Perspective>(&config, &["x"]);
        for seed in 0..40 {
            let (m, mw, mh, points) = drawn(&op, seed, h, w);
            ours.push((
                format!("{h}x{w} fit {fit} seed {seed} {points:?}"),
                m,
                mw,
                mh,
            ));
            let params = json!({"points": points, "shape": [h, w], "fit_output": fit});
            cases.push(Case::new(
                "perspective_params",
                "Perspective",
                json!({}),
                params,
                &image,
                None,
            ));
        }
    }
    for ((what, m, mw, mh), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        let r = floats(&r);
        // OpenCV's float32 products and elimination: not bit for bit, but within 1e-15
        // relative (measured 7e-16), which keeps fit_output's far corners where they are.
        for (a, b) in m.iter().zip(&r[..9]) {
            assert!(
                (a - b).abs() <= 1e-12 * b.abs().max(1.0),
                "{what}: {m:?} vs {r:?}"
            );
        }
        assert_eq!([*mw as f64, *mh as f64], [r[9], r[10]], "{what}: sizes");
    }
}

#[test]
fn perspective_warps_like_albumentations_for_the_drawn_matrix() {
    let image = noise(&[21, 26, 3], 102);
    let mask = noise(&[21, 26], 103).f_remainder(6).unwrap();
    let images = [
        image.shallow_clone(),
        image.to_kind(Kind::Float) / 255.0,
        noise(&[21, 26], 104),
    ];
    let configs: [(&str, Value); 3] = [
        ("", json!({})),
        (
            "interpolation = \"nearest\"\nfill = 77\nfill_mask = 9",
            json!({"interpolation": 0, "fill": 77, "fill_mask": 9}),
        ),
        ("border_mode = \"reflect_101\"", json!({"border_mode": 4})),
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (config, init) in configs {
        let config = format!("{config}\nscale = [0.05, 0.3]\nmasks = [\"m\"]\np = 1.0");
        let op = direct("Perspective", &config, &["x", "m"]);
        let inner = typed::<Perspective>(&config, &["x", "m"]);
        for x in &images {
            for seed in 0..5 {
                let (m, mw, mh, _) = drawn(&inner, seed, 21, 26);
                let what = format!("{config} {:?} {:?} seed {seed}", x.kind(), x.size());
                ours.push((what, run(op.as_ref(), &[x, &mask], seed)));
                let matrix: Vec<&[f64]> = m.chunks(3).collect();
                let params = json!({"matrix": matrix, "max_width": mw, "max_height": mh});
                cases.push(Case::apply(
                    "Perspective",
                    init.clone(),
                    params,
                    x,
                    Some(&mask),
                ));
            }
        }
    }
    for ((what, y), (r, m)) in ours.iter().zip(albumentations(&cases)) {
        let tolerance = if y[0].kind() == Kind::Uint8 {
            1.0
        } else {
            1e-5
        };
        let d = max_diff(&y[0], &r);
        assert!(d <= tolerance, "{what}: image differs by {d}");
        assert_eq!(ints(&y[1]), ints(&m.unwrap()), "{what}: mask differs");
    }
}

/// Every `keep_size` / `fit_output` setting, as Rust config and albumentations init.
fn settings() -> [(&'static str, Value); 4] {
    [
        ("keep_size = true\nfit_output = false", json!({})),
        ("keep_size = false", json!({"keep_size": false})),
        ("fit_output = true", json!({"fit_output": true})),
        (
            "keep_size = false\nfit_output = true",
            json!({"keep_size": false, "fit_output": true}),
        ),
    ]
}

#[test]
fn perspective_canvases_match_albumentations_for_the_drawn_corners() {
    // albumentations runs whole (corners, matrix, expansion, warp) on our normals, so sizes
    // and pixels are compared end to end.
    let image = noise(&[21, 26, 3], 105);
    let mask = noise(&[21, 26], 106).f_remainder(6).unwrap();
    let images = [
        image.shallow_clone(),
        image.to_kind(Kind::Float) / 255.0,
        noise(&[21, 26], 107),
    ];
    // A scalar fill is every channel's; albumentations hands cv2.warpPerspective the bare
    // number, which OpenCV reads as (77, 0, 0, 0), so its fill is spelled out per channel.
    let borders: [(&str, Value); 2] = [
        (
            "fill = 77\nfill_mask = 9",
            json!({"fill": [77, 77, 77], "fill_mask": 9}),
        ),
        (
            "border_mode = \"reflect_101\"\ninterpolation = \"nearest\"",
            json!({"border_mode": 4, "interpolation": 0}),
        ),
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (setting, init) in settings() {
        for (border, border_init) in &borders {
            let config =
                format!("{setting}\n{border}\nscale = [0.05, 0.3]\nmasks = [\"m\"]\np = 1.0");
            let op = direct("Perspective", &config, &["x", "m"]);
            let inner = typed::<Perspective>(&config, &["x", "m"]);
            let mut init = init.clone();
            init.as_object_mut()
                .unwrap()
                .extend(border_init.as_object().unwrap().clone());
            for x in &images {
                for seed in 0..6 {
                    let what = format!("{config} {:?} {:?} seed {seed}", x.kind(), x.size());
                    ours.push((what, run(op.as_ref(), &[x, &mask], seed)));
                    let params = json!({"normals": inner.jitter(seed).unwrap()});
                    cases.push(Case::new(
                        "compose",
                        "Perspective",
                        init.clone(),
                        params,
                        x,
                        Some(&mask),
                    ));
                }
            }
        }
    }
    let mut resized = 0;
    for ((what, y), (r, m)) in ours.iter().zip(albumentations(&cases)) {
        // OpenCV weighs float32 pixels in float32: relative to the fill blended in.
        let scale = r.abs().max().double_value(&[]).max(1.0);
        let tolerance = if y[0].kind() == Kind::Uint8 {
            1.0
        } else {
            1e-5 * scale
        };
        let d = max_diff(&y[0], &r);
        assert!(d <= tolerance, "{what}: image differs by {d}");
        let m = m.unwrap();
        assert_eq!(y[1].size(), m.size(), "{what}: mask shape");
        assert_eq!(ints(&y[1]), ints(&m), "{what}: mask differs");
        resized += i64::from(y[0].size()[..2] != [21, 26]);
    }
    // keep_size = false gives other sizes in (nearly) every call.
    assert!(resized >= 60, "{resized} calls changed the size");
}

#[test]
fn degenerate_or_huge_canvases_are_errors() {
    let canvas = typed::<Perspective>("keep_size = false\nfit_output = true", &["x"]);
    assert_eq!(
        canvas.output((10, 12), 30, 20).unwrap(),
        ((1.0, 1.0), (20, 30))
    );
    let err = canvas.output((10, 12), 0, 20).unwrap_err();
    assert!(err.message().contains("0 canvas"), "{}", err.message());
    let err = canvas.output((10, 12), 9000, 9000).unwrap_err();
    assert!(err.message().contains("lower `scale`"), "{}", err.message());
    // Resized back to the input, a huge canvas costs nothing.
    let fit = typed::<Perspective>("fit_output = true", &["x"]);
    assert_eq!(fit.output((10, 12), 24, 5).unwrap(), ((0.5, 2.0), (10, 12)));
}

#[test]
fn perspective_draws_follow_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let op = typed::<Perspective>("scale = [0.02, 0.2]\np = 1.0", &["x"]);
    let ours: Vec<[f64; 4]> = (0..n as u64)
        .map(|s| {
            let (m, mw, mh, _) = drawn(&op, s, 40, 60);
            [mw as f64, mh as f64, m[0], m[2]]
        })
        .collect();
    let init = json!({"scale": [0.02, 0.2]});
    let widths = albumentations_samples("Perspective", init.clone(), &[40, 60, 3], "max_width", n);
    let heights =
        albumentations_samples("Perspective", init.clone(), &[40, 60, 3], "max_height", n);
    let matrices = albumentations_samples("Perspective", init, &[40, 60, 3], "matrix", n);
    let theirs: Vec<[f64; 4]> = (0..n)
        .map(|i| [widths[i][0], heights[i][0], matrices[i][0], matrices[i][2]])
        .collect();
    for (i, what) in ["max_width", "max_height", "m00", "m02"].iter().enumerate() {
        let a: Vec<f64> = ours.iter().map(|r| r[i]).collect();
        let b: Vec<f64> = theirs.iter().map(|r| r[i]).collect();
        let d = ks_statistic(&a, &b);
        assert!(d < critical, "{what} KS {d}");
    }
}
