use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::ErrorKind;

use crate::test_util::{assert_batch_matches_samples, assert_close, build_error, f32s, native, op};

/// Integer and floating kinds that hold 0..=127 exactly.
const REAL_KINDS: [Kind; 9] = [
    Kind::Uint8,
    Kind::Int8,
    Kind::Int16,
    Kind::Int,
    Kind::Int64,
    Kind::Half,
    Kind::BFloat16,
    Kind::Float,
    Kind::Double,
];

fn small_values(kind: Kind) -> Tensor {
    Tensor::from_slice(&[0i64, 10, 51, 100, 127, 64])
        .reshape([2, 3])
        .to_kind(kind)
}

// ---------------------------------------------------------------- Minmax

#[test]
fn minmax_rescales_each_sample_independently() {
    let op = op("Minmax", "", &["x"], &["x"]);
    let sample = Tensor::from_slice(&[0u8, 51, 255]);
    let out = op.forward(&[&sample]).unwrap().remove(0);
    assert_close(&out, Kind::Float, &[3], &[0.0, 0.2, 1.0], 1e-6);
    let batch = f32s(&[0.0, 2.0, 4.0, 10.0, 10.0, 20.0], &[2, 3]);
    let out = op.forward_batch(&[&batch]).unwrap().remove(0);
    assert_close(
        &out,
        Kind::Float,
        &[2, 3],
        &[0.0, 0.5, 1.0, 0.0, 0.0, 1.0],
        1e-6,
    );
}

#[test]
fn minmax_of_a_constant_sample_is_zero_not_nan() {
    let op = op("Minmax", "", &["x"], &["x"]);
    let out = op
        .forward(&[&Tensor::from_slice(&[7.0f32, 7.0])])
        .unwrap()
        .remove(0);
    assert_close(&out, Kind::Float, &[2], &[0.0, 0.0], 0.0);
}

#[test]
fn minmax_batch_equals_stacked_samples() {
    let op = op("Minmax", "", &["x"], &["x"]);
    let samples: Vec<Vec<Tensor>> = (0..3)
        .map(|i| vec![(Tensor::arange(12, (Kind::Int64, Device::Cpu)) * (i + 1)).reshape([3, 4])])
        .collect();
    assert_batch_matches_samples(&op, &samples);
    // A batch of scalar samples: every sample is constant, so all zeros.
    let scalars: Vec<Vec<Tensor>> = [3.0f32, -1.0]
        .iter()
        .map(|v| vec![Tensor::from(*v)])
        .collect();
    assert_batch_matches_samples(&op, &scalars);
    assert!(native("Minmax", "", &["x"], &["x"]).unwrap().batchable());
}

#[test]
fn minmax_handles_every_real_dtype() {
    let op = op("Minmax", "", &["x"], &["x"]);
    // min 0, max 127: x / 127
    let expected: Vec<f64> = [0.0, 10.0, 51.0, 100.0, 127.0, 64.0]
        .iter()
        .map(|v| v / 127.0)
        .collect();
    for kind in REAL_KINDS {
        let out = op.forward(&[&small_values(kind)]).unwrap().remove(0);
        assert_close(&out, Kind::Float, &[2, 3], &expected, 1e-6);
    }
    let flags = op
        .forward(&[&Tensor::from_slice(&[true, false])])
        .unwrap()
        .remove(0);
    assert_close(&flags, Kind::Float, &[2], &[1.0, 0.0], 1e-6);
    let complex = Tensor::zeros([2], (Kind::ComplexFloat, Device::Cpu));
    assert!(op.forward(&[&complex]).is_err());
    assert!(op.forward_batch(&[&complex.unsqueeze(0)]).is_err());
}

// ---------------------------------------------------------------- Normalize

#[test]
fn normalize_defaults_are_imagenet_statistics_on_a_255_scale() {
    // One HWC pixel (255, 0, 128):
    //   (255 - 0.485 * 255) / (0.229 * 255) = 0.515 / 0.229           =  2.2489083
    //   (0   - 0.456 * 255) / (0.224 * 255) = -0.456 / 0.224          = -2.0357143
    //   (128 - 0.406 * 255) / (0.225 * 255) = (128 - 103.53) / 57.375 =  0.4264924
    let op = op("Normalize", "", &["x"], &["x"]);
    let pixel = Tensor::from_slice(&[255u8, 0, 128]).reshape([1, 1, 3]);
    let out = op.forward(&[&pixel]).unwrap().remove(0);
    assert_close(
        &out,
        Kind::Float,
        &[1, 1, 3],
        &[2.2489083, -2.0357143, 0.4264924],
        1e-5,
    );
}

#[test]
fn normalize_matches_fastestimator_examples() {
    // The NumPy examples of fastestimator/backend/_tensor_normalize.py (the same formula,
    // channel-last; its extra epsilon of 1e-7 is far below the tolerance). Its expected values
    // were computed with the unrounded standard deviations its docstring shows as 0.2864 and
    // 0.2795: sqrt(5.25) / 8 and sqrt(5) / 8, used here.
    let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]).reshape([2, 2, 2]);
    let scalar = op(
        "Normalize",
        "mean = 0.5625\nstd = 0.28641098093474\nmax_pixel_value = 8.0",
        &["x"],
        &["x"],
    );
    let out = scalar.forward(&[&x]).unwrap().remove(0);
    let expected = [
        -1.52752516,
        -1.0910894,
        -0.65465364,
        -0.21821788,
        0.21821788,
        0.65465364,
        1.0910894,
        1.52752516,
    ];
    assert_close(&out, Kind::Float, &[2, 2, 2], &expected, 1e-5);

    let per_channel = op(
        "Normalize",
        "mean = [0.5, 0.625]\nstd = [0.27950849718747, 0.27950849718747]\nmax_pixel_value = 8",
        &["x"],
        &["x"],
    );
    let out = per_channel.forward(&[&x]).unwrap().remove(0);
    let (a, b) = (1.34164073, 0.44721358);
    assert_close(
        &out,
        Kind::Float,
        &[2, 2, 2],
        &[-a, -a, -b, -b, b, b, a, a],
        1e-5,
    );
}

#[test]
fn normalize_accepts_every_real_dtype_and_gives_float32() {
    // (x - 0.5 * 100) / (0.25 * 100) = (x - 50) / 25
    let op = op(
        "Normalize",
        "mean = 0.5\nstd = 0.25\nmax_pixel_value = 100",
        &["x"],
        &["x"],
    );
    let expected = [-2.0, -1.6, 0.04, 2.0, 3.08, 0.56];
    for kind in REAL_KINDS {
        let out = op.forward(&[&small_values(kind)]).unwrap().remove(0);
        assert_close(&out, Kind::Float, &[2, 3], &expected, 1e-5);
    }
    let flags = Tensor::from_slice(&[true, false]);
    let out = op.forward(&[&flags]).unwrap().remove(0);
    assert_close(&out, Kind::Float, &[2], &[-1.96, -2.0], 1e-6);
}

#[test]
fn normalize_rejects_complex_input() {
    let op = op("Normalize", "mean = 0\nstd = 1", &["x"], &["x"]);
    let z = Tensor::zeros([2], (Kind::ComplexFloat, Device::Cpu));
    let err = op.forward(&[&z]).unwrap_err();
    assert!(err.message.contains("ComplexFloat"), "{err}");
}

#[test]
fn normalize_needs_the_channels_on_the_last_axis() {
    let op = op("Normalize", "", &["x"], &["x"]);
    let chw = Tensor::zeros([3, 4, 4], (Kind::Uint8, Device::Cpu));
    let err = op.forward(&[&chw]).unwrap_err();
    assert!(
        err.message.contains("last axis must hold the 3 channels"),
        "{err}"
    );
    let err = op.forward(&[&Tensor::from(7u8)]).unwrap_err();
    assert!(err.message.contains("shape []"), "{err}");
    // A batch of 3 scalar samples has a last axis of 3, but no channels: still an error.
    let err = op
        .forward_batch(&[&Tensor::zeros([3], (Kind::Uint8, Device::Cpu))])
        .unwrap_err();
    assert!(err.message.contains("shape []"), "{err}");
    // One value for all channels fits any shape.
    let gray = Tensor::full([2, 2], 51, (Kind::Uint8, Device::Cpu));
    let scalar = self::op("Normalize", "mean = 0.2\nstd = 0.2", &["x"], &["x"]);
    let out = scalar.forward(&[&gray]).unwrap().remove(0);
    assert_close(&out, Kind::Float, &[2, 2], &[0.0; 4], 1e-6);
}

#[test]
fn normalize_transforms_each_input_key() {
    let op = op(
        "Normalize",
        "mean = 0\nstd = 0.5\nmax_pixel_value = 2",
        &["a", "b"],
        &["c", "d"],
    );
    let a = Tensor::from_slice(&[1.0f32, 2.0]);
    let b = Tensor::from_slice(&[4u8]);
    let out = op.forward(&[&a, &b]).unwrap();
    assert_eq!(out.len(), 2);
    assert_close(&out[0], Kind::Float, &[2], &[1.0, 2.0], 1e-6);
    assert_close(&out[1], Kind::Float, &[1], &[4.0], 1e-6);
}

#[test]
fn normalize_batch_equals_stacked_samples() {
    let op = op("Normalize", "", &["x"], &["x"]);
    let samples: Vec<Vec<Tensor>> = (0..4)
        .map(|i| {
            let image =
                (Tensor::arange(4 * 5 * 3, (Kind::Int64, Device::Cpu)) * (i + 3)).remainder(256);
            vec![image.reshape([4, 5, 3]).to_kind(Kind::Uint8)]
        })
        .collect();
    assert_batch_matches_samples(&op, &samples);
    let pixels: Vec<Vec<Tensor>> = (0..2)
        .map(|i| vec![Tensor::from_slice(&[10.0f64 * i as f64, 20.0, 30.0])])
        .collect();
    assert_batch_matches_samples(&op, &pixels);
    assert!(native("Normalize", "", &["x"], &["x"]).unwrap().batchable());
}

#[test]
fn normalize_config_errors_name_the_field() {
    let cases = [
        ("std = 0", "std"),
        ("std = [0.2, -0.1, 0.3]", "std"),
        ("mean = [0.1, 0.2]\nstd = [0.1, 0.2, 0.3]", "std"),
        ("mean = []", "mean"),
        ("std = []", "std"),
        ("mean = nan", "mean"),
        ("max_pixel_value = 0", "max_pixel_value"),
        ("max_pixel_value = -255", "max_pixel_value"),
        ("mean = 'imagenet'", "mean"),
        ("epsilon = 1e-7", "epsilon"),
    ];
    for (config, field) in cases {
        let err = build_error("Normalize", config, &["x"], &["x"]);
        assert_eq!(err.kind, ErrorKind::Config, "{config}: {err}");
        assert_eq!(err.field.as_str(), field, "{config}: {err}");
    }
    let err = build_error("Normalize", "", &["x", "y"], &["x"]);
    assert_eq!(err.field.as_str(), "outputs");
    let err = build_error("Normalize", "", &[], &[]);
    assert_eq!(err.field.as_str(), "inputs");
}

// ---------------------------------------------------------------- ToFloat

#[test]
fn to_float_infers_the_divisor_from_the_dtype() {
    let op = op("ToFloat", "", &["x"], &["x"]);
    let out = op
        .forward(&[&Tensor::from_slice(&[0u8, 51, 255])])
        .unwrap()
        .remove(0);
    assert_close(&out, Kind::Float, &[3], &[0.0, 0.2, 1.0], 1e-7);
    // Floating inputs are divided by 1: only the dtype changes.
    for kind in [Kind::Half, Kind::BFloat16, Kind::Float, Kind::Double] {
        let x = Tensor::from_slice(&[0.5f64, -2.0, 3.0]).to_kind(kind);
        let out = op.forward(&[&x]).unwrap().remove(0);
        assert_close(&out, Kind::Float, &[3], &[0.5, -2.0, 3.0], 0.0);
    }
}

#[test]
fn to_float_needs_max_value_for_other_integer_types() {
    let op = op("ToFloat", "", &["x"], &["x"]);
    for kind in [Kind::Int8, Kind::Int16, Kind::Int, Kind::Int64, Kind::Bool] {
        let x = Tensor::from_slice(&[1i64, 0]).to_kind(kind);
        let err = op.forward(&[&x]).unwrap_err();
        assert!(err.message.contains("set `max_value`"), "{kind:?}: {err}");
    }
    let given = self::op("ToFloat", "max_value = 1000", &["x"], &["x"]);
    for kind in REAL_KINDS {
        let out = given.forward(&[&small_values(kind)]).unwrap().remove(0);
        let expected = [0.0, 0.01, 0.051, 0.1, 0.127, 0.064];
        assert_close(&out, Kind::Float, &[2, 3], &expected, 1e-7);
    }
    let flags = self::op("ToFloat", "max_value = 2", &["x"], &["x"]);
    let out = flags
        .forward(&[&Tensor::from_slice(&[true, false])])
        .unwrap()
        .remove(0);
    assert_close(&out, Kind::Float, &[2], &[0.5, 0.0], 0.0);
}

#[test]
fn to_float_max_value_overrides_the_dtype_default() {
    let op = op("ToFloat", "max_value = 510", &["x"], &["x"]);
    let out = op
        .forward(&[&Tensor::from_slice(&[255u8])])
        .unwrap()
        .remove(0);
    assert_close(&out, Kind::Float, &[1], &[0.5], 0.0);
}

#[test]
fn to_float_batch_equals_stacked_samples_and_config_errors() {
    let op = op("ToFloat", "", &["x", "y"], &["x", "y"]);
    let samples: Vec<Vec<Tensor>> = (0..3u8)
        .map(|i| {
            vec![
                Tensor::from_slice(&[i, 2 * i, 255 - i]).reshape([1, 3]),
                Tensor::from_slice(&[i as f32 / 3.0]),
            ]
        })
        .collect();
    assert_batch_matches_samples(&op, &samples);
    assert!(native("ToFloat", "", &["x"], &["x"]).unwrap().batchable());
    for config in ["max_value = 0", "max_value = -1", "max_value = inf"] {
        let err = build_error("ToFloat", config, &["x"], &["x"]);
        assert_eq!(err.field.as_str(), "max_value", "{config}");
    }
    assert_eq!(
        build_error("ToFloat", "max = 1", &["x"], &["x"])
            .field
            .as_str(),
        "max"
    );
}

// ---------------------------------------------------------------- Binarize

#[test]
fn binarize_matches_fastestimator_tests() {
    // test/PR_test/unit_test/op/numpyop/univariate/test_binarize.py
    let single = op("Binarize", "threshold = 1", &["x"], &["x"]);
    let out = single
        .forward(&[&Tensor::from_slice(&[1i64, 2, 3, 4])])
        .unwrap()
        .remove(0);
    assert_close(&out, Kind::Float, &[4], &[1.0, 1.0, 1.0, 1.0], 0.0);
    let multi = op("Binarize", "threshold = 1", &["x", "y"], &["x", "y"]);
    let out = multi
        .forward(&[
            &Tensor::from_slice(&[2i64, 2]),
            &Tensor::from_slice(&[0i64, 1, 2]),
        ])
        .unwrap();
    assert_close(&out[0], Kind::Float, &[2], &[1.0, 1.0], 0.0);
    assert_close(&out[1], Kind::Float, &[3], &[0.0, 1.0, 1.0], 0.0);
}

#[test]
fn binarize_handles_every_real_dtype() {
    let op = op("Binarize", "threshold = 51", &["x"], &["x"]);
    for kind in REAL_KINDS {
        let out = op.forward(&[&small_values(kind)]).unwrap().remove(0);
        assert_close(
            &out,
            Kind::Float,
            &[2, 3],
            &[0.0, 0.0, 1.0, 1.0, 1.0, 1.0],
            0.0,
        );
    }
    let half = self::op("Binarize", "threshold = 0.5", &["x"], &["x"]);
    let out = half
        .forward(&[&Tensor::from_slice(&[true, false])])
        .unwrap()
        .remove(0);
    assert_close(&out, Kind::Float, &[2], &[1.0, 0.0], 0.0);
}

#[test]
fn binarize_compares_integers_exactly_and_floats_in_their_precision() {
    // 16777217 is not a float32; compared in float32 it would equal 16777216 < threshold.
    let op = op("Binarize", "threshold = 16777216.5", &["x"], &["x"]);
    let out = op
        .forward(&[&Tensor::from_slice(&[16_777_217i64, 16_777_216])])
        .unwrap()
        .remove(0);
    assert_close(&out, Kind::Float, &[2], &[1.0, 0.0], 0.0);
    // As NumPy does, a float32 input compares with the threshold rounded to float32:
    // float32(0.1) = 0.10000000149011612 and float32(0.1000000015) is the same number.
    let op = self::op("Binarize", "threshold = 0.1000000015", &["x"], &["x"]);
    let out = op
        .forward(&[&Tensor::from_slice(&[0.1f32])])
        .unwrap()
        .remove(0);
    assert_close(&out, Kind::Float, &[1], &[1.0], 0.0);
    let out = op
        .forward(&[&Tensor::from_slice(&[0.1f64])])
        .unwrap()
        .remove(0);
    assert_close(&out, Kind::Float, &[1], &[0.0], 0.0);
}

#[test]
fn binarize_batch_equals_stacked_samples_and_config_errors() {
    let op = op("Binarize", "threshold = 0.25", &["x"], &["x"]);
    let samples: Vec<Vec<Tensor>> = (0..4)
        .map(|i| vec![f32s(&[0.0, 0.25 * i as f32, 0.3, -1.0], &[2, 2])])
        .collect();
    assert_batch_matches_samples(&op, &samples);
    assert!(native("Binarize", "threshold = 0", &["x"], &["x"])
        .unwrap()
        .batchable());
    let err = build_error("Binarize", "", &["x"], &["x"]);
    assert!(err.message.contains("missing field `threshold`"), "{err}");
    assert_eq!(
        build_error("Binarize", "threshold = nan", &["x"], &["x"])
            .field
            .as_str(),
        "threshold"
    );
    assert_eq!(
        build_error("Binarize", "threshold = 1\nstrict = true", &["x"], &["x"])
            .field
            .as_str(),
        "strict"
    );
}
