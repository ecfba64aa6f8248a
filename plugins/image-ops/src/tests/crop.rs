use std::collections::BTreeSet;

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::testing;

use super::{direct, ints, op, ramp, run};

#[test]
fn center_crop_takes_the_middle() {
    // 5 x 6 ramp; a 3 x 2 window starts at row (5-3)/2 = 1, column (6-2)/2 = 2.
    let x = ramp(&[5, 6], Kind::Uint8);
    let y = op("CenterCrop", "height = 3\nwidth = 2", &["x"])
        .forward(&[&x])
        .unwrap()
        .remove(0);
    assert_eq!(y.size(), [3, 2]);
    assert_eq!(ints(&y), [8, 9, 14, 15, 20, 21]);
    // Odd margins leave the extra pixel at the bottom / right.
    let x = ramp(&[4, 4, 2], Kind::Float);
    let y = op("CenterCrop", "height = 1\nwidth = 1", &["x"])
        .forward(&[&x])
        .unwrap()
        .remove(0);
    assert_eq!(y.size(), [1, 1, 2]);
    assert_eq!(ints(&y), [10, 11]);
}

#[test]
fn center_crop_batch_equals_stacked_samples() {
    let config = "height = 2\nwidth = 3";
    assert!(direct("CenterCrop", config, &["x"]).batchable());
    let op = op("CenterCrop", config, &["x", "m"]);
    let x = ramp(&[4, 5, 7, 3], Kind::Uint8);
    let m = ramp(&[4, 5, 7], Kind::Int64);
    let batch = op.forward_batch(&[&x, &m]).unwrap();
    assert_eq!(batch[0].size(), [4, 2, 3, 3]);
    assert_eq!(batch[1].size(), [4, 2, 3]);
    for i in 0..4 {
        let single = op.forward(&[&x.get(i), &m.get(i)]).unwrap();
        assert!(batch[0].get(i).equal(&single[0]));
        assert!(batch[1].get(i).equal(&single[1]));
    }
}

/// The window's top-left corner, read off a crop of a `width`-wide ramp.
fn corner(crop: &Tensor, width: i64) -> (i64, i64) {
    let first = ints(crop)[0];
    (first / width, first % width)
}

#[test]
fn random_crop_is_a_window_at_a_seeded_position() {
    let op = direct("RandomCrop", "height = 6\nwidth = 5", &["x", "mask"]);
    assert!(!op.batchable());
    let plane = ramp(&[8, 7], Kind::Int64);
    let x = Tensor::stack(
        &[&plane, &plane.g_add_scalar(1000), &plane.g_add_scalar(2000)],
        2,
    );
    let mask = ramp(&[8, 7], Kind::Uint8);
    let mut corners = BTreeSet::new();
    for seed in 0..200 {
        let out = run(op.as_ref(), &[&x, &mask], seed);
        assert_eq!(out[0].size(), [6, 5, 3]);
        assert_eq!(out[1].size(), [6, 5]);
        let (top, left) = corner(&out[1], 7);
        assert!(top <= 2 && left <= 2, "window at {top}, {left}");
        let expected = x.narrow(0, top, 6).narrow(1, left, 5);
        assert!(out[0].equal(&expected), "image and mask cropped alike");
        assert!(out[1].equal(&mask.narrow(0, top, 6).narrow(1, left, 5)));
        // The same seed gives the same window.
        let again = run(op.as_ref(), &[&x, &mask], seed);
        assert!(again[0].equal(&out[0]));
        corners.insert((top, left));
    }
    assert_eq!(corners.len(), 9, "every position is reachable: {corners:?}");
}

#[test]
fn random_crop_of_the_full_size_is_the_identity() {
    let x = ramp(&[3, 4], Kind::Float);
    let y = op("RandomCrop", "height = 3\nwidth = 4", &["x"])
        .forward(&[&x])
        .unwrap()
        .remove(0);
    assert!(y.equal(&x));
}

#[test]
fn crops_larger_than_the_image_or_mismatched_inputs_are_errors() {
    for name in ["RandomCrop", "CenterCrop"] {
        let op = op(name, "height = 4\nwidth = 4", &["x", "y"]);
        let small = ramp(&[3, 8], Kind::Uint8);
        let err = op.forward(&[&small, &small]).unwrap_err();
        assert!(err.message.contains("larger than input `x`"), "{err}");
        let other = ramp(&[8, 9], Kind::Uint8);
        let big = ramp(&[8, 8], Kind::Uint8);
        let err = op.forward(&[&big, &other]).unwrap_err();
        assert!(err.message.contains("input `y` is 8x9"), "{err}");
        let err = testing::numpy_op(name, "height = 4\nwidth = -1", &["x"], &["x"]).unwrap_err();
        assert_eq!(err.field.as_str(), "width");
    }
}
