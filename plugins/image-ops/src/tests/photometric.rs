//! The photometric ops against albumentations 2.0.8: deterministic ones on the same image,
//! random ones with the parameters the op reports it drew; masks are never touched.

use fe_plugin_api::tch::{Kind, Tensor};
use serde_json::{json, Value};

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::color::{Photometric, Pixels};
use crate::{
    ChannelDropout, ChannelShuffle, GaussNoise, Posterize, RGBShift, RandomBrightnessContrast,
    RandomGamma, Solarize,
};

/// A uint8 image and the same image as float32 in [0, 1].
fn images() -> [Tensor; 2] {
    let image = noise(&[6, 7, 3], 20);
    let float = image.to_kind(Kind::Float) / 255.0;
    [image, float]
}

/// The values of a `(6, 7, 3)` array as nested lists.
fn hwc(values: &[f64]) -> Value {
    let rows: Vec<Vec<Vec<f64>>> = values
        .chunks(7 * 3)
        .map(|row| row.chunks(3).map(<[f64]>::to_vec).collect())
        .collect();
    json!(rows)
}

/// Ours and the reference agree exactly on uint8 (within float32 rounding on floats),
/// except uint8 `ToSepia`: `cv2.transform` accumulates in its own order, so a sum that lands
/// on .5 can round the other way (one grey level).
fn assert_close(what: &str, ours: &Tensor, reference: &Tensor) {
    let tolerance = match ours.kind() {
        Kind::Uint8 if what.starts_with("ToSepia") => 1.0,
        Kind::Uint8 => 0.0,
        _ => 1e-6,
    };
    assert_eq!(ours.kind(), reference.kind(), "{what} dtype");
    let d = max_diff(ours, reference);
    assert!(d <= tolerance, "{what}: differs by {d}");
}

#[test]
fn deterministic_color_ops_match_albumentations() {
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (name, init) in [
        ("Equalize", json!({})),
        (
            "ToGray",
            json!({"num_output_channels": 3, "method": "weighted_average"}),
        ),
        ("ToSepia", json!({})),
    ] {
        for image in images() {
            // Equalize of floats goes through uint8 in both implementations.
            let op = direct(name, "p = 1.0", &["x"]);
            ours.push((
                format!("{name} {:?}", image.kind()),
                run(op.as_ref(), &[&image], 0).remove(0),
            ));
            cases.push(Case::compose(name, init.clone(), &image, None));
        }
    }
    for ((what, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        assert_close(what, y, &r);
    }
}

/// Our op `T` on `image` for `seed`, its drawn parameters, and its output.
fn drawn<T>(op: &Photometric<T>, image: &Tensor, seed: u64) -> Vec<f64>
where
    T: Pixels,
{
    op.params(&[image], seed)
        .unwrap()
        .expect("p = 1 always applies")
}

#[test]
fn random_color_ops_match_albumentations_for_the_drawn_parameters() {
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    let mut add = |name: &'static str,
                   config: &str,
                   init: Value,
                   params: &dyn Fn(&[f64], &Tensor) -> Value,
                   draw: &dyn Fn(&Tensor, u64) -> Vec<f64>| {
        let op = direct(name, &format!("{config}\np = 1.0"), &["x"]);
        for image in images() {
            for seed in 0..3 {
                let p = draw(&image, seed);
                ours.push((
                    format!("{name} {config} {:?} seed {seed}", image.kind()),
                    run(op.as_ref(), &[&image], seed).remove(0),
                ));
                cases.push(Case::apply(
                    name,
                    init.clone(),
                    params(&p, &image),
                    &image,
                    None,
                ));
            }
        }
    };
    for config in [
        "brightness_limit = 0.3\ncontrast_limit = [-0.5, 0.6]",
        "brightness_by_max = false",
    ] {
        let op = typed::<RandomBrightnessContrast>(&format!("{config}\np = 1.0"), &["x"]);
        add(
            "RandomBrightnessContrast",
            config,
            json!({}),
            &|p, _| json!({"alpha": p[0], "beta": p[1]}),
            &|x, s| drawn(&op.0, x, s),
        );
    }
    let gamma = typed::<RandomGamma>("gamma_limit = [40, 250]\np = 1.0", &["x"]);
    add(
        "RandomGamma",
        "gamma_limit = [40, 250]",
        json!({}),
        &|p, _| json!({"gamma": p[0]}),
        &|x, s| drawn(&gamma.0, x, s),
    );
    let posterize = typed::<Posterize>("num_bits = [1, 7]\np = 1.0", &["x"]);
    add(
        "Posterize",
        "num_bits = [1, 7]",
        json!({}),
        &|p, _| json!({"num_bits": p[0] as i64}),
        &|x, s| drawn(&posterize.0, x, s),
    );
    let solarize = typed::<Solarize>("threshold = [30, 220]\np = 1.0", &["x"]);
    add(
        "Solarize",
        "threshold = [30, 220]",
        json!({}),
        &|p, _| json!({"threshold": p[0] / 255.0}),
        &|x, s| drawn(&solarize.0, x, s),
    );
    let shuffle = typed::<ChannelShuffle>("p = 1.0", &["x"]);
    add(
        "ChannelShuffle",
        "",
        json!({}),
        &|p, _| json!({"channels_shuffled": p.iter().map(|&c| c as i64).collect::<Vec<_>>()}),
        &|x, s| drawn(&shuffle.0, x, s),
    );
    let dropout = typed::<ChannelDropout>(
        "channel_drop_range = [1, 2]\nfill_value = 0.5\np = 1.0",
        &["x"],
    );
    add(
        "ChannelDropout",
        "channel_drop_range = [1, 2]\nfill_value = 0.5",
        json!({"channel_drop_range": [1, 2], "fill": 0.5}),
        &|p, _| json!({"channels_to_drop": p.iter().map(|&c| c as i64).collect::<Vec<_>>()}),
        &|x, s| drawn(&dropout.0, x, s),
    );
    let gauss = typed::<GaussNoise>("var_limit = [100, 400]\nmean = 3\np = 1.0", &["x"]);
    let noise_map = |p: &[f64], _: &Tensor| json!({ "noise_map": hwc(&p[1..]) });
    add(
        "GaussNoise",
        "var_limit = [100, 400]\nmean = 3",
        json!({}),
        &noise_map,
        &|x, s| drawn(&gauss.0, x, s),
    );
    let shift = typed::<RGBShift>(
        "r_shift_limit = 40\ng_shift_limit = [-10, 5]\np = 1.0",
        &["x"],
    );
    let shift_map = |p: &[f64], _: &Tensor| json!({"noise_map": vec![vec![p.to_vec(); 7]; 6]});
    add(
        "RGBShift",
        "r_shift_limit = 40\ng_shift_limit = [-10, 5]",
        json!({}),
        &shift_map,
        &|x, s| drawn(&shift.0, x, s),
    );
    for ((what, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        assert_close(what, y, &r);
    }
}

#[test]
fn masks_are_untouched_and_p_zero_is_the_identity() {
    let [image, _] = images();
    let mask = noise(&[6, 7], 21);
    let names = [
        "RandomBrightnessContrast",
        "RandomGamma",
        "Posterize",
        "Solarize",
        "Equalize",
        "GaussNoise",
        "ToGray",
        "ToSepia",
        "ChannelShuffle",
        "ChannelDropout",
        "RGBShift",
        "HueSaturationValue",
        "ColorJitter",
        "GaussianBlur",
        "MedianBlur",
        "Downscale",
        "ImageCompression",
        "MotionBlur",
        "CLAHE",
    ];
    for name in names {
        let op = direct(name, "p = 1.0\nmasks = [\"mask\"]", &["image", "mask"]);
        let changed = (0..5).any(|seed| {
            let out = run(op.as_ref(), &[&image, &mask], seed);
            assert!(out[1].equal(&mask), "{name} left the mask alone");
            assert_eq!(out[0].size(), image.size());
            !out[0].equal(&image)
        });
        assert!(changed, "{name} changes the image");
        let off = direct(name, "p = 0.0", &["x"]);
        assert!(
            run(off.as_ref(), &[&image], 1)[0].equal(&image),
            "{name} p = 0"
        );
        let again = run(op.as_ref(), &[&image, &mask], 3);
        assert!(
            again[0].equal(&run(op.as_ref(), &[&image, &mask], 3)[0]),
            "{name} is seeded"
        );
    }
}

#[test]
fn brightness_contrast_draws_follow_albumentations_distribution() {
    let n = 3000;
    let op = typed::<RandomBrightnessContrast>(
        "brightness_limit = [-0.1, 0.3]\ncontrast_limit = 0.4\np = 1.0",
        &["x"],
    );
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, fe_plugin_api::tch::Device::Cpu));
    let ours: Vec<Vec<f64>> = (0..n as u64).map(|s| drawn(&op.0, &image, s)).collect();
    let init = json!({"brightness_limit": [-0.1, 0.3], "contrast_limit": 0.4});
    let alphas = albumentations_samples(
        "RandomBrightnessContrast",
        init.clone(),
        &[4, 4, 3],
        "alpha",
        n,
    );
    let betas = albumentations_samples("RandomBrightnessContrast", init, &[4, 4, 3], "beta", n);
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let column = |v: &[Vec<f64>], i: usize| v.iter().map(|r| r[i]).collect::<Vec<_>>();
    let d = ks_statistic(&column(&ours, 0), &column(&alphas, 0));
    assert!(d < critical, "alpha KS {d}");
    let d = ks_statistic(&column(&ours, 1), &column(&betas, 0));
    assert!(d < critical, "beta KS {d}");
}
