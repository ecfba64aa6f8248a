//! `OpticalDistortion` against albumentations 2.0.8: the maps for the drawn `k` in both
//! modes, the warp of image and mask through them, and the distribution of `k`.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, ints, noise, run, typed};
use crate::OpticalDistortion;

/// `map` (row-major `h × w`) as a float32 `(h, w)` tensor.
fn grid(map: &[f32], h: i64, w: i64) -> Tensor {
    Tensor::from_slice(map).reshape([h, w])
}

#[test]
fn optical_maps_are_albumentations_maps() {
    let dummy = Tensor::zeros([1, 1], (Kind::Uint8, Device::Cpu));
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for mode in ["camera", "fisheye"] {
        let op = typed::<OpticalDistortion>(
            &format!("distort_limit = 0.8\ndistortion_mode = \"{mode}\"\np = 1.0"),
            &["x"],
        );
        for (h, w) in [(20, 25), (17, 9), (40, 64)] {
            for seed in 0..5 {
                let k = op.k(seed).unwrap();
                let [mx, my] = op.maps(k, h as usize, w as usize);
                ours.push((
                    format!("{mode} {h}x{w} k {k}"),
                    grid(&mx, h, w),
                    grid(&my, h, w),
                ));
                let params = json!({"shape": [h, w], "k": k, "mode": mode});
                cases.push(Case::new(
                    "optical_maps",
                    "OpticalDistortion",
                    json!({}),
                    params,
                    &dummy,
                    None,
                ));
            }
        }
    }
    for ((what, mx, my), (maps, _)) in ours.iter().zip(albumentations(&cases)) {
        // Float32 maps: OpenCV sums in another order and numpy's float32 sin / cos / atan2
        // are its own; 1e-4 px moves a bilinear sample by under 0.03 grey levels.
        let dx = max_diff(mx, &maps.get(0));
        let dy = max_diff(my, &maps.get(1));
        assert!(
            dx <= 1e-4 && dy <= 1e-4,
            "{what}: maps differ by {dx}, {dy}"
        );
    }
}

#[test]
fn optical_distortion_matches_albumentations_for_the_drawn_maps() {
    let image = noise(&[22, 27, 3], 105);
    let mask = noise(&[22, 27], 106).f_remainder(4).unwrap();
    let images = [
        image.shallow_clone(),
        image.to_kind(Kind::Float) / 255.0,
        noise(&[22, 27], 107),
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (config, init) in [
        // A scalar fill is every channel's; albumentations hands cv2.remap the bare number,
        // which OpenCV reads as (40, 0, 0, 0), so its fill is spelled out per channel.
        (
            "distortion_mode = \"camera\"\nfill = 40\nfill_mask = 7",
            json!({"fill": [40, 40, 40], "fill_mask": 7}),
        ),
        (
            "distortion_mode = \"fisheye\"\nborder_mode = \"reflect_101\"",
            json!({"border_mode": 4}),
        ),
        (
            "distortion_mode = \"camera\"\ninterpolation = \"nearest\"",
            json!({"interpolation": 0}),
        ),
    ] {
        let config = format!("{config}\ndistort_limit = 0.6\nmasks = [\"m\"]\np = 1.0");
        let op = direct("OpticalDistortion", &config, &["x", "m"]);
        let inner = typed::<OpticalDistortion>(&config, &["x", "m"]);
        for x in &images {
            for seed in 0..4 {
                let k = inner.k(seed).unwrap();
                let [mx, my] = inner.maps(k, 22, 27);
                let what = format!("{config} {:?} {:?} k {k}", x.kind(), x.size());
                ours.push((what, run(op.as_ref(), &[x, &mask], seed)));
                let rows = |m: &[f32]| json!(m.chunks(27).collect::<Vec<_>>());
                let params = json!({"map_x": rows(&mx), "map_y": rows(&my)});
                cases.push(Case::apply(
                    "OpticalDistortion",
                    init.clone(),
                    params,
                    x,
                    Some(&mask),
                ));
            }
        }
    }
    let mut moved = 0.0f64;
    for ((what, y), (r, m)) in ours.iter().zip(albumentations(&cases)) {
        let tolerance = if y[0].kind() == Kind::Uint8 {
            1.0
        } else {
            1e-5
        };
        let d = max_diff(&y[0], &r);
        assert!(d <= tolerance, "{what}: image differs by {d}");
        assert_eq!(ints(&y[1]), ints(&m.unwrap()), "{what}: mask differs");
        moved = moved.max(max_diff(&y[1], &mask));
    }
    assert!(moved > 0.0, "no mask changed");
}

#[test]
fn optical_distortion_k_follows_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    for mode in ["camera", "fisheye"] {
        let config = format!("distort_limit = [-0.3, 0.5]\ndistortion_mode = \"{mode}\"\np = 1.0");
        let op = typed::<OpticalDistortion>(&config, &["x"]);
        // map_x at the top-left pixel is monotone in k: compare it.
        let ours: Vec<f64> = (0..n as u64)
            .map(|s| f64::from(op.maps(op.k(s).unwrap(), 6, 8)[0][0]))
            .collect();
        let init = json!({"distort_limit": [-0.3, 0.5], "mode": mode});
        let theirs = albumentations_samples("OpticalDistortion", init, &[6, 8, 3], "map_x", n);
        let theirs: Vec<f64> = theirs.iter().map(|r| r[0]).collect();
        let d = ks_statistic(&ours, &theirs);
        assert!(d < critical, "{mode}: map_x[0, 0] KS {d}");
    }
}
