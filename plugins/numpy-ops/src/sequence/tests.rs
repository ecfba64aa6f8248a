use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::ErrorKind;

use crate::test_util::{
    assert_batch_matches_samples, assert_close, assert_identical, build_error, native, op,
};

fn ints(values: &[i64]) -> Tensor {
    Tensor::from_slice(values)
}

// test/PR_test/unit_test/op/numpyop/univariate/test_pad_sequence.py, case by case.

#[test]
fn pad_sequence_appends_by_default() {
    let op = op("PadSequence", "max_len = 7\nvalue = 0", &["x"], &["x"]);
    let out = op.forward(&[&ints(&[1, 2, 3, 4])]).unwrap().remove(0);
    assert_identical(&out, &ints(&[1, 2, 3, 4, 0, 0, 0]));
}

#[test]
fn pad_sequence_pads_each_input_key() {
    let op = op(
        "PadSequence",
        "max_len = 4\nvalue = -1",
        &["x", "y"],
        &["x", "y"],
    );
    let out = op.forward(&[&ints(&[2, 2]), &ints(&[0, 1, 2])]).unwrap();
    assert_identical(&out[0], &ints(&[2, 2, -1, -1]));
    assert_identical(&out[1], &ints(&[0, 1, 2, -1]));
}

#[test]
fn pad_sequence_truncates_long_sequences() {
    let op = op("PadSequence", "max_len = 3", &["x"], &["x"]);
    let out = op.forward(&[&ints(&[1, 2, 3, 4])]).unwrap().remove(0);
    assert_identical(&out, &ints(&[1, 2, 3]));
}

#[test]
fn pad_sequence_prepends_when_append_is_false() {
    let op = op(
        "PadSequence",
        "max_len = 7\nvalue = 0\nappend = false",
        &["x"],
        &["x"],
    );
    let out = op.forward(&[&ints(&[1, 2, 3, 4])]).unwrap().remove(0);
    assert_identical(&out, &ints(&[0, 0, 0, 1, 2, 3, 4]));
}

#[test]
fn pad_sequence_keeps_exact_lengths_and_allows_zero() {
    let op = op("PadSequence", "max_len = 4", &["x"], &["x"]);
    assert_identical(
        &op.forward(&[&ints(&[5, 6, 7, 8])]).unwrap()[0],
        &ints(&[5, 6, 7, 8]),
    );
    let zero = self::op("PadSequence", "max_len = 0", &["x"], &["x"]);
    assert_eq!(zero.forward(&[&ints(&[5, 6])]).unwrap()[0].size(), [0]);
    let empty = Tensor::zeros([0], (Kind::Int64, Device::Cpu));
    assert_identical(&op.forward(&[&empty]).unwrap()[0], &ints(&[0, 0, 0, 0]));
}

#[test]
fn pad_sequence_keeps_the_input_dtype() {
    let op = op("PadSequence", "max_len = 3\nvalue = 1", &["x"], &["x"]);
    for kind in [
        Kind::Uint8,
        Kind::Int8,
        Kind::Int16,
        Kind::Int,
        Kind::Int64,
        Kind::Half,
        Kind::BFloat16,
        Kind::Float,
        Kind::Double,
        Kind::Bool,
    ] {
        let x = Tensor::from_slice(&[0i64]).to_kind(kind);
        let out = op.forward(&[&x]).unwrap().remove(0);
        assert_close(&out, kind, &[3], &[0.0, 1.0, 1.0], 0.0);
    }
    let fractional = self::op("PadSequence", "max_len = 2\nvalue = -0.5", &["x"], &["x"]);
    let out = fractional
        .forward(&[&Tensor::from_slice(&[2.5f32])])
        .unwrap()
        .remove(0);
    assert_close(&out, Kind::Float, &[2], &[2.5, -0.5], 0.0);
}

#[test]
fn pad_sequence_rejects_values_the_dtype_cannot_hold() {
    let cases: [(&str, Kind); 5] = [
        ("value = -1", Kind::Uint8),
        ("value = 256", Kind::Uint8),
        ("value = 0.5", Kind::Int64),
        ("value = 2", Kind::Bool),
        ("value = 40000", Kind::Int16),
    ];
    for (value, kind) in cases {
        let op = op(
            "PadSequence",
            &format!("max_len = 3\n{value}"),
            &["x"],
            &["x"],
        );
        let short = Tensor::zeros([1], (kind, Device::Cpu));
        let err = op.forward(&[&short]).unwrap_err();
        assert!(
            err.message.contains("cannot pad"),
            "{value} {kind:?}: {err}"
        );
        // Also when the sample needs no padding, so the outcome does not depend on its length.
        let long = Tensor::zeros([5], (kind, Device::Cpu));
        assert!(op.forward(&[&long]).is_err(), "{value} {kind:?}");
    }
    let op = op(
        "PadSequence",
        "max_len = 3\nvalue = -9.2233720368547758e18",
        &["x"],
        &["x"],
    );
    let out = op.forward(&[&ints(&[1])]).unwrap().remove(0);
    assert_identical(&out, &ints(&[1, i64::MIN, i64::MIN]));
}

#[test]
fn pad_sequence_pads_multi_dimensional_sequences_along_the_first_axis() {
    let op = op(
        "PadSequence",
        "max_len = 3\nvalue = 9\nappend = false",
        &["x"],
        &["x"],
    );
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).reshape([2, 2]);
    let out = op.forward(&[&x]).unwrap().remove(0);
    assert_close(
        &out,
        Kind::Float,
        &[3, 2],
        &[9.0, 9.0, 1.0, 2.0, 3.0, 4.0],
        0.0,
    );
    let err = op.forward(&[&Tensor::from(1.0f32)]).unwrap_err();
    assert!(err.message.contains("needs sequences"), "{err}");
}

#[test]
fn pad_sequence_batch_equals_stacked_samples_but_is_not_batchable() {
    for config in [
        "max_len = 5\nvalue = -1",
        "max_len = 2",
        "max_len = 5\nappend = false",
    ] {
        let op = op("PadSequence", config, &["x", "y"], &["x", "y"]);
        let samples: Vec<Vec<Tensor>> = (0..3)
            .map(|i| {
                vec![
                    ints(&[i, i + 1, i + 2]),
                    Tensor::from_slice(&[0.5f32 * i as f32; 6]).reshape([3, 2]),
                ]
            })
            .collect();
        assert_batch_matches_samples(&op, &samples);
    }
    // Sequences are ragged until padded: the pipeline must run it per sample.
    assert!(!native("PadSequence", "max_len = 5", &["x"], &["x"])
        .unwrap()
        .batchable());
}

#[test]
fn pad_sequence_config_errors_name_the_field() {
    let cases = [
        ("max_len = -1", "max_len"),
        ("max_len = 3\nvalue = 'pad'", "value"),
        ("max_len = 3\nappend = 1", "append"),
        ("max_len = 3\nside = 'left'", "side"),
    ];
    for (config, field) in cases {
        let err = build_error("PadSequence", config, &["x"], &["x"]);
        assert_eq!(err.kind, ErrorKind::Config, "{config}");
        assert_eq!(err.field.as_str(), field, "{config}: {err}");
    }
    let err = build_error("PadSequence", "", &["x"], &["x"]);
    assert!(err.message.contains("missing field `max_len`"), "{err}");
}
