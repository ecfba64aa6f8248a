use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::ErrorKind;

use crate::test_util::{
    assert_batch_matches_samples, assert_close, assert_identical, build_error, native, op,
};

/// Every dtype the shape ops are tested with: they only move elements.
const KINDS: [Kind; 5] = [
    Kind::Uint8,
    Kind::Bool,
    Kind::Int64,
    Kind::Float,
    Kind::Double,
];

fn arange(n: i64, kind: Kind) -> Tensor {
    let values = Tensor::arange(n, (Kind::Int64, Device::Cpu));
    if kind == Kind::Bool {
        values.remainder(2).to_kind(kind)
    } else {
        values.to_kind(kind)
    }
}

// ---------------------------------------------------------------- ExpandDims

#[test]
fn expand_dims_per_sample_and_batch_agree() {
    let op = op("ExpandDims", "axis = 0", &["x"], &["x"]);
    let sample = Tensor::zeros([28, 28], (Kind::Uint8, Device::Cpu));
    assert_eq!(op.forward(&[&sample]).unwrap()[0].size(), [1, 28, 28]);
    let batch = Tensor::zeros([5, 28, 28], (Kind::Uint8, Device::Cpu));
    assert_eq!(
        op.forward_batch(&[&batch]).unwrap()[0].size(),
        [5, 1, 28, 28]
    );
    let last = self::op("ExpandDims", "", &["x"], &["x"]);
    assert_eq!(last.forward(&[&sample]).unwrap()[0].size(), [28, 28, 1]);
    for axis in [-3, -1, 0, 1, 2] {
        let op = self::op(
            "ExpandDims",
            &format!("axis = {axis}"),
            &["x", "y"],
            &["x", "y"],
        );
        let samples: Vec<Vec<Tensor>> = (0..3)
            .map(|i| {
                vec![
                    arange(6, Kind::Float).reshape([2, 3]) + i,
                    arange(6, Kind::Bool).reshape([3, 2]),
                ]
            })
            .collect();
        assert_batch_matches_samples(&op, &samples);
    }
    assert!(native("ExpandDims", "", &["x"], &["x"])
        .unwrap()
        .batchable());
    assert_eq!(
        build_error("ExpandDims", "", &["x", "y"], &["x"])
            .field
            .as_str(),
        "outputs"
    );
}

// ---------------------------------------------------------------- Reshape

#[test]
fn reshape_matches_fastestimator_tests() {
    // test/PR_test/unit_test/op/numpyop/univariate/test_reshape.py
    let single = op("Reshape", "shape = [2, 2]", &["x"], &["x"]);
    let out = single
        .forward(&[&Tensor::from_slice(&[1i64, 2, 3, 4])])
        .unwrap()
        .remove(0);
    assert_identical(&out, &Tensor::from_slice(&[1i64, 2, 3, 4]).reshape([2, 2]));
    let multi = op("Reshape", "shape = [1, 2]", &["x", "y"], &["x", "y"]);
    let out = multi
        .forward(&[
            &Tensor::from_slice(&[2i64, 2]),
            &Tensor::from_slice(&[1i64, 2]),
        ])
        .unwrap();
    assert_identical(&out[0], &Tensor::from_slice(&[2i64, 2]).reshape([1, 2]));
    assert_identical(&out[1], &Tensor::from_slice(&[1i64, 2]).reshape([1, 2]));
}

#[test]
fn reshape_infers_one_size_and_accepts_a_single_number() {
    let infer = op("Reshape", "shape = [-1, 4]", &["x"], &["x"]);
    let x = arange(24, Kind::Float).reshape([2, 3, 4]);
    let out = infer.forward(&[&x]).unwrap().remove(0);
    assert_eq!(out.size(), [6, 4]);
    assert_close(
        &out,
        Kind::Float,
        &[6, 4],
        &(0..24).map(f64::from).collect::<Vec<_>>(),
        0.0,
    );
    let flat = op("Reshape", "shape = 6", &["x"], &["x"]);
    assert_eq!(
        flat.forward(&[&arange(6, Kind::Uint8).reshape([2, 3])])
            .unwrap()[0]
            .size(),
        [6]
    );
    let scalar = op("Reshape", "shape = []", &["x"], &["x"]);
    let out = scalar
        .forward(&[&Tensor::from_slice(&[7i64])])
        .unwrap()
        .remove(0);
    assert_identical(&out, &Tensor::from(7i64));
}

#[test]
fn reshape_keeps_every_dtype() {
    let op = op("Reshape", "shape = [3, -1]", &["x"], &["x"]);
    for kind in KINDS {
        let x = arange(6, kind);
        let out = op.forward(&[&x]).unwrap().remove(0);
        assert_identical(&out, &x.reshape([3, 2]));
    }
}

#[test]
fn reshape_reports_sizes_that_do_not_fit() {
    let cases: [(&str, &[i64]); 4] = [
        ("shape = [2, 2]", &[5]),
        ("shape = [-1, 2]", &[5]),
        ("shape = [0, -1]", &[0]),
        ("shape = []", &[2]),
    ];
    for (config, shape) in cases {
        let op = op("Reshape", config, &["x"], &["x"]);
        let x = Tensor::zeros(shape, (Kind::Float, Device::Cpu));
        let err = op.forward(&[&x]).unwrap_err();
        assert!(
            err.message.contains("cannot reshape a sample of shape"),
            "{config}: {err}"
        );
    }
}

#[test]
fn reshape_batch_equals_stacked_samples() {
    let op = op("Reshape", "shape = [3, -1]", &["x", "y"], &["x", "y"]);
    let samples: Vec<Vec<Tensor>> = (0..3)
        .map(|i| {
            vec![
                arange(6, Kind::Int64).reshape([2, 3]) * i,
                arange(3, Kind::Bool),
            ]
        })
        .collect();
    assert_batch_matches_samples(&op, &samples);
    // An empty batch keeps its per-sample shape: -1 is resolved from the sample, not the batch.
    let empty = Tensor::zeros([0, 2, 3], (Kind::Float, Device::Cpu));
    let out = op.forward_batch(&[&empty, &empty]).unwrap();
    assert_eq!(out[0].size(), [0, 3, 2]);
    assert!(native("Reshape", "shape = 1", &["x"], &["x"])
        .unwrap()
        .batchable());
}

#[test]
fn reshape_config_errors_name_the_field() {
    for config in [
        "shape = [-1, -1]",
        "shape = [-2, 3]",
        "shape = 'flat'",
        "shape = [1.5]",
    ] {
        let err = build_error("Reshape", config, &["x"], &["x"]);
        assert_eq!(err.kind, ErrorKind::Config, "{config}");
        assert!(err.field.starts_with("shape"), "{config}: {err}");
    }
    let err = build_error("Reshape", "", &["x"], &["x"]);
    assert!(err.message.contains("missing field `shape`"), "{err}");
    assert_eq!(
        build_error("Reshape", "shape = 1\norder = 'F'", &["x"], &["x"])
            .field
            .as_str(),
        "order"
    );
}

// ---------------------------------------------------------------- ChannelTranspose

#[test]
fn channel_transpose_defaults_to_hwc_to_chw() {
    // test/PR_test/unit_test/op/numpyop/univariate/test_channel_transpose.py: (28, 28, 3) in,
    // (3, 28, 28) out, for one key and for two.
    let op = op("ChannelTranspose", "", &["x", "y"], &["x", "y"]);
    let image = Tensor::rand([28, 28, 3], (Kind::Double, Device::Cpu));
    let out = op.forward(&[&image, &image]).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].size(), [3, 28, 28]);
    assert_eq!(out[1].size(), [3, 28, 28]);
    // Values: x[h][w][c] = 12h + 4w + c lands at out[c][h][w].
    let x = arange(24, Kind::Int64).reshape([2, 3, 4]);
    let out = op.forward(&[&x, &x]).unwrap().remove(0);
    let mut expected = Vec::new();
    for c in 0..4 {
        for h in 0..2 {
            for w in 0..3 {
                expected.push(f64::from(12 * h + 4 * w + c));
            }
        }
    }
    assert_close(&out, Kind::Int64, &[4, 2, 3], &expected, 0.0);
    assert!(out.is_contiguous());
}

#[test]
fn channel_transpose_takes_any_permutation_and_dtype() {
    let swap = op("ChannelTranspose", "axes = [1, 0]", &["x"], &["x"]);
    let negative = op("ChannelTranspose", "axes = [-1, 0, 1]", &["x"], &["x"]);
    let default = op("ChannelTranspose", "", &["x"], &["x"]);
    for kind in KINDS {
        let m = arange(6, kind).reshape([2, 3]);
        assert_identical(&swap.forward(&[&m]).unwrap()[0], &m.tr().contiguous());
        let x = arange(24, kind).reshape([2, 3, 4]);
        assert_identical(
            &negative.forward(&[&x]).unwrap()[0],
            &default.forward(&[&x]).unwrap()[0],
        );
    }
}

#[test]
fn channel_transpose_needs_samples_of_the_permutation_rank() {
    let op = op("ChannelTranspose", "", &["x"], &["x"]);
    let gray = Tensor::zeros([28, 28], (Kind::Uint8, Device::Cpu));
    let err = op.forward(&[&gray]).unwrap_err();
    assert!(
        err.message
            .contains("needs rank-3 samples, got shape [28, 28]"),
        "{err}"
    );
    let err = op.forward_batch(&[&gray.unsqueeze(0)]).unwrap_err();
    assert!(err.message.contains("got shape [28, 28]"), "{err}");
}

#[test]
fn channel_transpose_batch_equals_stacked_samples() {
    for axes in ["[2, 0, 1]", "[1, 2, 0]", "[0, 2, 1]"] {
        let op = op(
            "ChannelTranspose",
            &format!("axes = {axes}"),
            &["x"],
            &["x"],
        );
        let samples: Vec<Vec<Tensor>> = (0..3)
            .map(|i| vec![arange(24, Kind::Float).reshape([2, 3, 4]) - i])
            .collect();
        assert_batch_matches_samples(&op, &samples);
    }
    assert!(native("ChannelTranspose", "", &["x"], &["x"])
        .unwrap()
        .batchable());
}

#[test]
fn channel_transpose_config_errors_name_the_field() {
    for config in [
        "axes = [0, 0, 1]",
        "axes = [0, 3, 1]",
        "axes = [0, 1, -4]",
        "axes = 2",
    ] {
        let err = build_error("ChannelTranspose", config, &["x"], &["x"]);
        assert_eq!(err.kind, ErrorKind::Config, "{config}");
        assert_eq!(err.field.as_str(), "axes", "{config}: {err}");
    }
    assert_eq!(
        build_error("ChannelTranspose", "perm = [0]", &["x"], &["x"])
            .field
            .as_str(),
        "perm"
    );
}
