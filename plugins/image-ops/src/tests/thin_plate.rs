//! `ThinPlateSpline` against albumentations 2.0.8: the maps for the drawn offsets, the warp
//! of images and masks through them, boxes and keypoints under `Compose`, a box drawn into a
//! mask landing where the moved box says, the offsets' distribution, and config errors.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::{json, Value};

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::targets::{compare_targets, Call, Compared, H, W};
use super::{direct, floats, ints, noise, run, typed};
use crate::ThinPlateSpline;

/// `map` (row-major, `w` wide) as nested lists, as albumentations takes it.
fn rows(map: &[f32], w: usize) -> Value {
    json!(map.chunks(w).collect::<Vec<_>>())
}

#[test]
fn tps_maps_are_albumentations_maps() {
    let dummy = Tensor::zeros([1, 1], (Kind::Uint8, Device::Cpu));
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for n in [2, 3, 4, 5] {
        let config = format!("scale_range = [0.3, 0.9]\nnum_control_points = {n}\np = 1.0");
        let op = typed::<ThinPlateSpline>(&config, &["x"]);
        // 7 x 9 has fewer than 100 pixels, where OpenCV's GEMM is its own, not OpenBLAS's.
        for (h, w) in [(24, 32), (7, 9), (40, 57)] {
            for seed in 0..3 {
                let offsets = op.offsets(seed).unwrap();
                let [mx, my] = op.maps(&offsets, h, w);
                let grid = |m: &[f32]| Tensor::from_slice(m).reshape([h as i64, w as i64]);
                ours.push((format!("n {n} {h}x{w} seed {seed}"), grid(&mx), grid(&my)));
                let params = json!({"shape": [h, w], "num_control_points": n, "offsets": offsets});
                cases.push(Case::new(
                    "tps_maps",
                    "ThinPlateSpline",
                    json!({}),
                    params,
                    &dummy,
                    None,
                ));
            }
        }
    }
    let mut worst = [0.0f64; 6];
    for ((what, mx, my), (maps, _)) in ours.iter().zip(albumentations(&cases)) {
        // OpenCV 5's float32 LU rounds differently from the LUImpl ported here (a few ulp
        // of the weights), its log and OpenBLAS's sums by an ulp; the spline magnifies that
        // with the system's conditioning (6e2 for 4 x 4 points, 3e3 for 5 x 5). Relative to
        // the size, as the spline works in the unit square: 1e-4 of 57 px is 6e-3 px, which
        // moves a bilinear sample by under two tenths of a grey level.
        let n: usize = what[2..3].parse().unwrap();
        let size = mx.size().into_iter().max().unwrap() as f64;
        let d = max_diff(mx, &maps.get(0)).max(max_diff(my, &maps.get(1))) / size;
        let tolerance = if n <= 4 { 1e-5 } else { 1e-4 };
        assert!(d <= tolerance, "{what}: maps differ by {d} of the size");
        worst[n] = worst[n].max(d);
    }
    eprintln!("ThinPlateSpline maps: largest difference / size by control points {worst:?}");
}

#[test]
fn thin_plate_spline_matches_albumentations_for_the_drawn_maps() {
    let (h, w) = (22, 27);
    let image = noise(&[h, w, 3], 115);
    let mask = noise(&[h, w], 116).f_remainder(4).unwrap();
    let images = [
        image.shallow_clone(),
        image.to_kind(Kind::Float) / 255.0,
        noise(&[h, w], 117),
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (config, init) in [
        // A scalar fill is every channel's; albumentations hands cv2.remap the bare number,
        // which OpenCV reads as (40, 0, 0, 0), so its fill is spelled out per channel.
        (
            "fill = 40\nfill_mask = 7",
            json!({"fill": [40, 40, 40], "fill_mask": 7}),
        ),
        ("border_mode = \"reflect_101\"", json!({"border_mode": 4})),
        ("interpolation = \"nearest\"", json!({"interpolation": 0})),
        (
            "mask_interpolation = \"bilinear\"\nborder_mode = \"replicate\"",
            json!({"mask_interpolation": 1, "border_mode": 1}),
        ),
    ] {
        let config = format!(
            "{config}\nscale_range = [0.4, 0.9]\nnum_control_points = 3\nmasks = [\"m\"]\np = 1.0"
        );
        let op = direct("ThinPlateSpline", &config, &["x", "m"]);
        let inner = typed::<ThinPlateSpline>(&config, &["x", "m"]);
        for x in &images {
            for seed in 0..3 {
                let [mx, my] = inner.maps(&inner.offsets(seed).unwrap(), h as usize, w as usize);
                let what = format!("{config} {:?} {:?} seed {seed}", x.kind(), x.size());
                ours.push((what, run(op.as_ref(), &[x, &mask], seed)));
                let params =
                    json!({"map_x": rows(&mx, w as usize), "map_y": rows(&my, w as usize)});
                cases.push(Case::apply(
                    "ThinPlateSpline",
                    init.clone(),
                    params,
                    x,
                    Some(&mask),
                ));
            }
        }
    }
    let (mut moved, mut worst) = (0.0f64, 0.0f64);
    for ((what, y), (r, m)) in ours.iter().zip(albumentations(&cases)) {
        let tolerance = if y[0].kind() == Kind::Uint8 {
            1.0
        } else {
            1e-5
        };
        let d = max_diff(&y[0], &r);
        assert!(d <= tolerance, "{what}: image differs by {d}");
        worst = worst.max(d);
        let m = m.unwrap();
        if what.contains("mask_interpolation") {
            let d = max_diff(&y[1], &m);
            assert!(d <= 1.0, "{what}: bilinear mask differs by {d}");
        } else {
            assert_eq!(ints(&y[1]), ints(&m), "{what}: mask differs");
        }
        moved = moved.max(max_diff(&y[1], &mask));
    }
    assert!(moved > 0.0, "no mask changed");
    eprintln!("ThinPlateSpline warp: largest image difference {worst}");
}

const MASK: &str = "scale_range = [0.5, 1.0]\nnum_control_points = 3\np = 1.0";
const DIRECT: &str = "scale_range = [0.5, 1.0]\np = 1.0\nkeypoint_remapping_method = \"direct\"";

#[test]
fn thin_plate_spline_targets_match_albumentations_for_the_drawn_maps() {
    let mut calls = Vec::new();
    for (config, method) in [(MASK, "mask"), (DIRECT, "direct")] {
        let inner = typed::<ThinPlateSpline>(config, &["image"]);
        for seed in 0..4 {
            let [mx, my] = inner.maps(&inner.offsets(seed).unwrap(), H as usize, W as usize);
            calls.push(Call {
                name: "ThinPlateSpline",
                config,
                transform: "ThinPlateSpline",
                init: json!({ "keypoint_remapping_method": method }),
                params: json!({"map_x": rows(&mx, W as usize), "map_y": rows(&my, W as usize)}),
                seed,
            });
        }
    }
    let mut moved = 0;
    for Compared { out, given, .. } in compare_targets(&calls, &noise(&[H, W, 3], 41)) {
        moved += i64::from(out[1].size() != given.size() || floats(&out[1]) != floats(&given));
    }
    assert!(moved >= 24, "boxes moved in {moved} of 32 calls");
}

#[test]
fn a_drawn_box_lands_where_the_moved_box_says() {
    // Under a remap albumentations moves a box as the mask of its pixels x_min..=x_max,
    // y_min..=y_max (nearest, zero border), as a mask input with the default nearest
    // sampling and constant 0 border is moved: the extents agree exactly.
    let (x0, y0, x1, y1) = (9i64, 6i64, 21i64, 18i64);
    let bbox = Tensor::from_slice(&[x0, y0, x1, y1].map(|v| v as f32)).reshape([1, 4]);
    let mask = Tensor::zeros([H, W], (Kind::Uint8, Device::Cpu));
    let _ = mask
        .narrow(0, y0, y1 - y0 + 1)
        .narrow(1, x0, x1 - x0 + 1)
        .fill_(1);
    let config =
        format!("{MASK}\nmasks = [\"mask\"]\nbboxes = [\"bbox\"]\nbbox_params = \"pascal_voc\"");
    let op = direct("ThinPlateSpline", &config, &["mask", "bbox"]);
    for seed in 0..12 {
        let out = run(op.as_ref(), &[&mask, &bbox], seed);
        let at = ints(&out[0].nonzero());
        let (ys, xs): (Vec<i64>, Vec<i64>) = at.chunks(2).map(|p| (p[0], p[1])).unzip();
        let extent = [
            xs.iter().min(),
            ys.iter().min(),
            xs.iter().max(),
            ys.iter().max(),
        ]
        .map(|v| *v.unwrap() as f64);
        assert_eq!(floats(&out[1]), extent, "seed {seed}");
    }
}

#[test]
fn offsets_follow_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let config = "scale_range = [0.1, 0.5]\nnum_control_points = 3\np = 1.0";
    let op = typed::<ThinPlateSpline>(config, &["x"]);
    let maps: Vec<[Vec<f32>; 2]> = (0..n as u64)
        .map(|s| op.maps(&op.offsets(s).unwrap(), 6, 8))
        .collect();
    let init = json!({"scale_range": [0.1, 0.5], "num_control_points": 3});
    // The top-left pixel is a control point (map_x there is 8 times its x offset); the
    // centre pixel mixes all of them.
    for (axis, key, pixel) in [(0, "map_x", 0), (1, "map_y", 3 * 8 + 4)] {
        let ours: Vec<f64> = maps.iter().map(|m| f64::from(m[axis][pixel])).collect();
        let theirs = albumentations_samples("ThinPlateSpline", init.clone(), &[6, 8, 3], key, n);
        let theirs: Vec<f64> = theirs.iter().map(|r| r[pixel]).collect();
        let d = ks_statistic(&ours, &theirs);
        assert!(d < critical, "{key}[{pixel}]: KS {d}");
    }
    // A fixed strength: offsets N(0, 0.02), x and y independent.
    let op = typed::<ThinPlateSpline>("scale_range = [0.2, 0.2]\np = 1.0", &["x"]);
    let draws: Vec<[f64; 2]> = (0..2000).flat_map(|s| op.offsets(s).unwrap()).collect();
    let count = draws.len() as f64;
    let mean = |f: &dyn Fn(&[f64; 2]) -> f64| draws.iter().map(f).sum::<f64>() / count;
    let (mx, my) = (mean(&|d| d[0]), mean(&|d| d[1]));
    let (sx, sy) = (mean(&|d| d[0] * d[0]).sqrt(), mean(&|d| d[1] * d[1]).sqrt());
    let corr = mean(&|d| d[0] * d[1]) / (sx * sy);
    assert!(mx.abs() < 3e-4 && my.abs() < 3e-4, "means {mx}, {my}");
    assert!(
        (sx / 0.02 - 1.0).abs() < 0.02 && (sy / 0.02 - 1.0).abs() < 0.02,
        "std {sx}, {sy}"
    );
    assert!(corr.abs() < 0.02, "x / y correlation {corr}");
}

#[test]
fn bad_configs_are_refused_and_p_zero_keeps_the_inputs() {
    let build = |config: &str| {
        fe_plugin_api::testing::numpy_op("ThinPlateSpline", config, &["x"], &["x"]).err()
    };
    for (config, field) in [
        ("scale_range = [0.5, 0.2]", "scale_range"),
        ("scale_range = [0.2, 1.5]", "scale_range"),
        ("num_control_points = 1", "num_control_points"),
        ("num_control_points = 21", "num_control_points"),
        ("interpolation = \"bicubic\"", "interpolation"),
        ("mask_interpolation = \"bicubic\"", "mask_interpolation"),
        (
            "keypoint_remapping_method = \"inverse\"",
            "keypoint_remapping_method",
        ),
    ] {
        let err = build(config).unwrap_or_else(|| panic!("{config} accepted"));
        assert_eq!(err.field.as_str(), field, "{config}: {}", err.message);
    }
    assert!(
        build("scale = [0.1, 0.2]").is_some(),
        "an unknown key is accepted"
    );
    let op = direct("ThinPlateSpline", "p = 0.0", &["x"]);
    let x = noise(&[9, 11, 3], 5);
    assert_eq!(ints(&run(op.as_ref(), &[&x], 3)[0]), ints(&x));
}
