use fe_plugin_api::tch::Kind;
use fe_plugin_api::testing;

use super::{bytes, direct, ints, op, ramp, run};

#[test]
fn p_one_always_mirrors_the_width_axis() {
    let op = op("HorizontalFlip", "p = 1.0", &["x", "m"]);
    // (2, 3, 2): pixel (r, c) holds [10r + c, 100 + 10r + c].
    let x = bytes(
        &[0, 100, 1, 101, 2, 102, 10, 110, 11, 111, 12, 112],
        &[2, 3, 2],
    );
    let m = bytes(&[1, 2, 3, 4, 5, 6], &[2, 3]);
    let out = op.forward(&[&x, &m]).unwrap();
    assert_eq!(out[0].size(), [2, 3, 2]);
    assert_eq!(
        ints(&out[0]),
        [2, 102, 1, 101, 0, 100, 12, 112, 11, 111, 10, 110]
    );
    assert_eq!(ints(&out[1]), [3, 2, 1, 6, 5, 4]);
}

#[test]
fn p_zero_never_flips() {
    let op = direct("HorizontalFlip", "p = 0", &["x"]);
    let x = ramp(&[3, 4], Kind::Float);
    for seed in 0..50 {
        assert!(run(op.as_ref(), &[&x], seed)[0].equal(&x));
    }
}

#[test]
fn default_flips_about_half_the_seeds_and_inputs_together() {
    let op = direct("HorizontalFlip", "", &["x", "m"]);
    assert!(!op.batchable());
    let x = ramp(&[2, 5, 3], Kind::Uint8);
    let m = ramp(&[2, 5], Kind::Int64);
    let mut flipped = 0;
    for seed in 0..400 {
        let out = run(op.as_ref(), &[&x, &m], seed);
        let image_flipped = out[0].equal(&x.flip([1]));
        assert!(image_flipped || out[0].equal(&x));
        assert_eq!(out[1].equal(&m.flip([1])), image_flipped, "seed {seed}");
        let again = run(op.as_ref(), &[&x, &m], seed);
        assert!(again[0].equal(&out[0]), "seed {seed} is reproducible");
        flipped += usize::from(image_flipped);
    }
    assert!((150..=250).contains(&flipped), "{flipped} of 400 flipped");
}

#[test]
fn p_outside_unit_interval_is_rejected() {
    let err = testing::numpy_op("HorizontalFlip", "p = 1.5", &["x"], &["x"]).unwrap_err();
    assert_eq!(err.field.as_str(), "p");
    let err = testing::numpy_op("HorizontalFlip", "prob = 0.5", &["x"], &["x"]).unwrap_err();
    assert_eq!(err.field.as_str(), "prob");
}
