//! `InvertImg` and `MultiplicativeNoise` against albumentations 2.0.8: the same output for
//! the factors the op reports it drew, and the same factor distribution.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::{json, Value};

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::MultiplicativeNoise;

/// A uint8 image, the same as float32 in [0, 1], and a plain `(H, W)` one.
fn images() -> [Tensor; 3] {
    let image = noise(&[6, 7, 3], 30);
    let float = image.to_kind(Kind::Float) / 255.0;
    [image, float, noise(&[6, 7], 31)]
}

fn assert_close(what: &str, ours: &Tensor, reference: &Tensor) {
    assert_eq!(ours.kind(), reference.kind(), "{what} dtype");
    let tolerance = if ours.kind() == Kind::Uint8 {
        0.0
    } else {
        1e-6
    };
    let d = max_diff(ours, reference);
    assert!(d <= tolerance, "{what}: differs by {d}");
}

#[test]
fn invert_img_matches_albumentations() {
    let op = direct("InvertImg", "p = 1.0", &["x"]);
    let images = images();
    let cases: Vec<Case> = images
        .iter()
        .map(|x| Case::compose("InvertImg", json!({}), x, None))
        .collect();
    for (x, (r, _)) in images.iter().zip(albumentations(&cases)) {
        assert_close("InvertImg", &run(op.as_ref(), &[x], 0)[0], &r);
    }
}

/// The factors as albumentations hands them to `apply`: a float, a channel vector, or an
/// array of the image's shape.
fn as_albumentations(factors: &[f64], x: &Tensor, per_channel: bool, elementwise: bool) -> Value {
    let size = x.size();
    let c = if size.len() == 3 { size[2] } else { 1 };
    let t = Tensor::from_slice(factors);
    let t = match (elementwise, per_channel) {
        (false, false) if c == 1 => return json!(factors[0]),
        (false, false) => t.repeat([c]),
        (false, true) => t,
        (true, false) if c > 1 => t.reshape([size[0], size[1], 1]).repeat([1, 1, c]),
        (true, _) => t.reshape(size.as_slice()),
    };
    let flat: Vec<f64> = Vec::try_from(t.flatten(0, -1)).unwrap();
    let nested = |v: &[f64], shape: &[i64]| -> Value {
        match shape {
            [_] => json!(v),
            [_, w] => json!(v.chunks(*w as usize).collect::<Vec<_>>()),
            [_, w, c] => json!(v
                .chunks((*w * *c) as usize)
                .map(|row| row.chunks(*c as usize).collect::<Vec<_>>())
                .collect::<Vec<_>>()),
            _ => unreachable!(),
        }
    };
    nested(&flat, &t.size())
}

#[test]
fn multiplicative_noise_matches_albumentations_for_the_drawn_factors() {
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (per_channel, elementwise) in [(false, false), (true, false), (false, true), (true, true)] {
        let config = format!(
            "multiplier = [0.5, 1.6]\nper_channel = {per_channel}\nelementwise = {elementwise}\np = 1.0"
        );
        let typed_op = typed::<MultiplicativeNoise>(&config, &["x"]);
        let op = direct("MultiplicativeNoise", &config, &["x"]);
        for x in images() {
            for seed in 0..3 {
                let factors = typed_op.0.params(&[&x], seed).unwrap().unwrap();
                ours.push((
                    format!("{config} {:?} {:?} seed {seed}", x.kind(), x.size()),
                    run(op.as_ref(), &[&x], seed).remove(0),
                ));
                let init = json!({"multiplier": [0.5, 1.6], "per_channel": per_channel, "elementwise": elementwise});
                let params = json!({"multiplier": as_albumentations(&factors, &x, per_channel, elementwise)});
                cases.push(Case::apply("MultiplicativeNoise", init, params, &x, None));
            }
        }
    }
    for ((what, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        assert_close(what, y, &r);
    }
}

#[test]
fn multiplicative_noise_factors_follow_albumentations_distribution() {
    let n = 3000;
    let op = typed::<MultiplicativeNoise>(
        "multiplier = [0.7, 1.2]\nper_channel = true\np = 1.0",
        &["x"],
    );
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    let draws: Vec<Vec<f64>> = (0..n as u64)
        .map(|s| op.0.params(&[&image], s).unwrap().unwrap())
        .collect();
    let theirs = albumentations_samples(
        "MultiplicativeNoise",
        json!({"multiplier": [0.7, 1.2], "per_channel": true}),
        &[4, 4, 3],
        "multiplier",
        n,
    );
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    for c in 0..3 {
        let column = |v: &[Vec<f64>]| v.iter().map(|r| r[c]).collect::<Vec<_>>();
        let d = ks_statistic(&column(&draws), &column(&theirs));
        assert!(d < critical, "channel {c}: KS {d} >= {critical}");
    }
    // Channels draw independently: the first two differ in almost every draw.
    assert!(draws.iter().filter(|r| r[0] == r[1]).count() < 3);
    // The test tells ranges apart: [0.8, 1.2] is rejected.
    let narrow = typed::<MultiplicativeNoise>("multiplier = [0.8, 1.2]\np = 1.0", &["x"]);
    let shifted: Vec<f64> = (0..n as u64)
        .map(|s| narrow.0.params(&[&image], s).unwrap().unwrap()[0])
        .collect();
    let first: Vec<f64> = theirs.iter().map(|r| r[0]).collect();
    assert!(ks_statistic(&shifted, &first) > critical);
}

#[test]
fn masks_are_untouched_p_zero_is_the_identity_and_bad_ranges_are_errors() {
    let [image, _, mask] = images();
    for name in ["InvertImg", "MultiplicativeNoise"] {
        let op = direct(name, "p = 1.0\nmasks = [\"mask\"]", &["image", "mask"]);
        let out = run(op.as_ref(), &[&image, &mask], 4);
        assert!(out[1].equal(&mask), "{name} left the mask alone");
        assert!(!out[0].equal(&image), "{name} changes the image");
        let off = direct(name, "p = 0.0", &["x"]);
        assert!(
            run(off.as_ref(), &[&image], 1)[0].equal(&image),
            "{name} p = 0"
        );
    }
    let made = fe_plugin_api::testing::numpy_op(
        "MultiplicativeNoise",
        "multiplier = [1.2, 0.9]",
        &["x"],
        &["x"],
    );
    let Err(err) = made else {
        panic!("a decreasing multiplier range is an error")
    };
    assert_eq!(err.field.as_str(), "multiplier", "{}", err.message);
}
