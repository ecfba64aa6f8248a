//! `ElasticTransform` against albumentations 2.0.8: its displacement maps for our noise,
//! and the warp of image and mask through them.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, max_diff, Case};
use super::{direct, floats, noise, run, typed};
use crate::ElasticTransform;

#[test]
fn elastic_maps_are_albumentations_maps_for_the_same_noise() {
    let dummy = Tensor::zeros([1, 1], (Kind::Uint8, Device::Cpu));
    let configs: [(&str, bool, bool, &str, f64, f64); 5] = [
        (
            "alpha = 30.0\nsigma = 4.0",
            false,
            false,
            "gaussian",
            30.0,
            4.0,
        ),
        (
            "alpha = 12.0\nsigma = 2.5\nsame_dxdy = true",
            true,
            false,
            "gaussian",
            12.0,
            2.5,
        ),
        (
            "alpha = 20.0\nsigma = 3.0\nnoise_distribution = \"uniform\"",
            false,
            false,
            "uniform",
            20.0,
            3.0,
        ),
        (
            "alpha = 50.0\nsigma = 6.0\napproximate = true",
            false,
            true,
            "gaussian",
            50.0,
            6.0,
        ),
        ("", false, false, "gaussian", 1.0, 50.0),
    ];
    let (h, w) = (19i64, 23i64);
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (config, same, approximate, dist, alpha, sigma) in configs {
        let op = typed::<ElasticTransform>(&format!("{config}\np = 1.0"), &["x"]);
        for seed in 0..3 {
            let noise = op.noise(h, w, seed).unwrap();
            let params = json!({"shape": [h, w], "noise": noise, "alpha": alpha, "sigma": sigma,
                "same_dxdy": same, "approximate": approximate, "noise_distribution": dist});
            cases.push(Case::new(
                "elastic",
                "ElasticTransform",
                json!({}),
                params,
                &dummy,
                None,
            ));
            ours.push((
                format!("{config} seed {seed}"),
                op.maps(noise, h as usize, w as usize),
            ));
        }
    }
    for ((what, [mx, my]), (maps, _)) in ours.iter().zip(albumentations(&cases)) {
        // OpenCV sums the blur in float32, we in float64: coordinates agree to a few float32
        // steps (measured at most 2.4e-6 pixels).
        for (axis, ours) in [(0, mx), (1, my)] {
            let theirs = floats(&maps.get(axis));
            let d = ours
                .iter()
                .zip(&theirs)
                .map(|(a, b)| (f64::from(*a) - b).abs())
                .fold(0.0, f64::max);
            assert!(d <= 2e-5, "{what}: axis {axis} differs by {d}");
        }
    }
}

#[test]
fn elastic_transform_matches_albumentations_for_the_drawn_maps() {
    let image = noise(&[19, 23, 3], 95);
    let mask = noise(&[19, 23], 96)
        .divide_scalar_mode(64, "floor")
        .to_kind(Kind::Uint8);
    let float = image.to_kind(Kind::Float) / 255.0;
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (border, flag) in [("constant", 0), ("reflect_101", 4)] {
        for x in [&image, &float] {
            let fill = if x.kind() == Kind::Uint8 { 9.0 } else { 0.75 };
            let config = format!(
                "alpha = 25.0\nsigma = 3.0\nborder_mode = \"{border}\"\nfill = {fill}\nfill_mask = 2\nmasks = [\"mask\"]\np = 1.0"
            );
            let op = direct("ElasticTransform", &config, &["x", "mask"]);
            let inner = typed::<ElasticTransform>(&config, &["x", "mask"]);
            for seed in 0..3 {
                let [mx, my] = inner.maps(inner.noise(19, 23, seed).unwrap(), 19, 23);
                let rows =
                    |m: &[f32]| -> Vec<Vec<f32>> { m.chunks(23).map(<[f32]>::to_vec).collect() };
                ours.push((
                    format!("{border} {:?} seed {seed}", x.kind()),
                    run(op.as_ref(), &[x, &mask], seed),
                ));
                // A list fill: albumentations passes a number to cv2.remap as Scalar(fill),
                // which fills the first channel only.
                let init =
                    json!({"border_mode": flag, "fill": [fill, fill, fill, fill], "fill_mask": 2});
                let params = json!({"map_x": rows(&mx), "map_y": rows(&my)});
                cases.push(Case::apply(
                    "ElasticTransform",
                    init,
                    params,
                    x,
                    Some(&mask),
                ));
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
        assert!(out[1].equal(&m.unwrap()), "{what}: mask differs");
    }
}
