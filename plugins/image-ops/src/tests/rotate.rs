use fe_plugin_api::abi_stable::std_types::{RSlice, RString};
use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{parse_config, testing, CreateContext, FromConfig};

use super::{bytes, direct, floats, ints, op, ramp, run};
use crate::{Limit, Rotate, RotateConfig};

fn rotate(config: &str, x: &Tensor) -> Tensor {
    op("Rotate", config, &["x"])
        .forward(&[x])
        .unwrap()
        .remove(0)
}

#[test]
fn quarter_turns_match_rot90() {
    let x = ramp(&[3, 3, 2], Kind::Uint8);
    for interpolation in ["bilinear", "nearest", "bicubic"] {
        let with = |angle: &str| format!("limit = {angle}\ninterpolation = \"{interpolation}\"");
        // Positive angles turn counter-clockwise, like np.rot90.
        assert!(rotate(&with("[90, 90]"), &x).equal(&x.rot90(1, [0, 1])));
        assert!(rotate(&with("[-90, -90]"), &x).equal(&x.rot90(-1, [0, 1])));
        assert!(rotate(&with("[180, 180]"), &x).equal(&x.flip([0, 1])));
        assert!(rotate(&with("0"), &x).equal(&x));
    }
    let gray = ramp(&[4, 4], Kind::Float);
    let turned = rotate("limit = [90, 90]", &gray);
    assert_eq!(turned.kind(), Kind::Float);
    assert!(turned.allclose(&gray.rot90(1, [0, 1]), 1e-4, 1e-4, false));
}

#[test]
fn border_modes_on_a_wide_image() {
    // 2 x 4 ramp turned by 90 degrees about its centre: rows 0 and 1 of the output sample
    // input columns 2 and 1 at input rows -1, 0, 1, 2.
    let x = ramp(&[2, 4], Kind::Uint8);
    let cases = [
        ("", [6, 2, 6, 2, 5, 1, 5, 1]),
        ("border_mode = \"reflect_101\"", [6, 2, 6, 2, 5, 1, 5, 1]),
        ("border_mode = \"reflect\"", [2, 2, 6, 6, 1, 1, 5, 5]),
        ("border_mode = \"replicate\"", [2, 2, 6, 6, 1, 1, 5, 5]),
        (
            "border_mode = \"constant\"\nvalue = 9",
            [9, 2, 6, 9, 9, 1, 5, 9],
        ),
        ("border_mode = \"constant\"", [0, 2, 6, 0, 0, 1, 5, 0]),
    ];
    for (border, expected) in cases {
        let y = rotate(&format!("limit = [90, 90]\n{border}"), &x);
        assert_eq!(y.size(), [2, 4]);
        assert_eq!(ints(&y), expected, "{border}");
    }
}

#[test]
fn forty_five_degrees_with_constant_border_blanks_the_corners() {
    let x = Tensor::ones([5, 5, 1], (Kind::Uint8, Device::Cpu));
    let config = "limit = [45, 45]\nborder_mode = \"constant\"\ninterpolation = \"nearest\"";
    let y = rotate(config, &x).squeeze_dim(2);
    // Corner (0, 0) samples input row 2 - 2√2 ≈ -0.83, outside; the centre stays.
    for (r, c) in [(0, 0), (0, 4), (4, 0), (4, 4)] {
        assert_eq!(y.int64_value(&[r, c]), 0, "corner {r}, {c}");
    }
    assert_eq!(y.int64_value(&[2, 2]), 1);
    // With the default reflection there is no border to see.
    let y = rotate("limit = [45, 45]", &x.to_kind(Kind::Float));
    assert!(floats(&y).iter().all(|v| (v - 1.0).abs() < 1e-5));
}

#[test]
fn angles_are_seeded_and_cover_the_range() {
    let keys = [RString::from("x")];
    let ctx = CreateContext {
        inputs: RSlice::from_slice(&keys),
        outputs: RSlice::from_slice(&keys),
        ..CreateContext::detached("test")
    };
    let config: RotateConfig = parse_config("limit = 30").unwrap();
    assert_eq!(config.limit, Limit::Symmetric(30.0));
    let rotate = Rotate::from_config(config, &ctx).unwrap();
    let angles: Vec<f64> = (0..500).map(|seed| rotate.angle(seed)).collect();
    assert!(angles.iter().all(|a| (-30.0..=30.0).contains(a)));
    assert!(angles.iter().any(|&a| a < -25.0) && angles.iter().any(|&a| a > 25.0));
    assert_eq!(rotate.angle(7), rotate.angle(7));
    assert_ne!(rotate.angle(7), rotate.angle(8));
}

#[test]
fn random_rotation_is_reproducible_per_seed_and_varies_across_seeds() {
    let op = direct("Rotate", "interpolation = \"nearest\"", &["image", "mask"]);
    assert!(!op.batchable());
    let image = Tensor::rand([9, 9, 3], (Kind::Float, Device::Cpu))
        .g_mul_scalar(255.0)
        .to_kind(Kind::Uint8);
    let mask = image.select(2, 1).contiguous();
    let first = run(op.as_ref(), &[&image, &mask], 1);
    assert_eq!(first[0].size(), [9, 9, 3]);
    assert_eq!(first[1].size(), [9, 9]);
    // Image and mask share the angle.
    assert!(first[0].select(2, 1).equal(&first[1]));
    assert!(run(op.as_ref(), &[&image, &mask], 1)[0].equal(&first[0]));
    let distinct = (2..10)
        .filter(|&seed| !run(op.as_ref(), &[&image, &mask], seed)[0].equal(&first[0]))
        .count();
    assert_eq!(distinct, 8);
}

#[test]
fn bad_config_is_rejected() {
    let build = |config: &str| testing::numpy_op("Rotate", config, &["x"], &["x"]).unwrap_err();
    assert_eq!(build("limit = -5").field.as_str(), "limit");
    assert_eq!(build("limit = [10, 5]").field.as_str(), "limit");
    assert_eq!(
        build("border_mode = \"wrap\"").field.as_str(),
        "border_mode"
    );
    assert_eq!(build("angle = 3").field.as_str(), "angle");
    let err = op("Rotate", "", &["x"])
        .forward(&[&bytes(&[1, 2], &[2])])
        .unwrap_err();
    assert!(err.message.contains("input `x`"), "{err}");
}
