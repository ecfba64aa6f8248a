use fe_plugin_api::tch::{Kind, Tensor};

use crate::test_util::{assert_batch_matches_samples, assert_close, build_error, native, op};

#[test]
fn onehot_with_smoothing_matches_fastestimator() {
    let op = op(
        "Onehot",
        "num_classes = 4\nlabel_smoothing = 0.2",
        &["y"],
        &["y"],
    );
    let out = op.forward(&[&Tensor::from(2i64)]).unwrap().remove(0);
    assert_close(&out, Kind::Float, &[4], &[0.05, 0.05, 0.85, 0.05], 1e-6);
}

#[test]
fn onehot_rejects_out_of_range_labels() {
    let op = op("Onehot", "num_classes = 3", &["y"], &["y"]);
    let err = op.forward(&[&Tensor::from(3i64)]).unwrap_err();
    assert!(err.message.contains("outside 0..3"), "{err}");
    let err = op.forward(&[&Tensor::from(-1i64)]).unwrap_err();
    assert!(err.message.contains("label -1 is outside 0..3"), "{err}");
}

#[test]
fn onehot_batch_equals_stacked_samples() {
    let op = op("Onehot", "num_classes = 3", &["y"], &["y"]);
    let scalars: Vec<Vec<Tensor>> = [2i64, 0, 1]
        .iter()
        .map(|&l| vec![Tensor::from(l)])
        .collect();
    assert_batch_matches_samples(&op, &scalars);
    let uint8: Vec<Vec<Tensor>> = [1u8, 2].iter().map(|&l| vec![Tensor::from(l)]).collect();
    assert_batch_matches_samples(&op, &uint8);
    assert!(native("Onehot", "num_classes = 2", &["y"], &["y"])
        .unwrap()
        .batchable());
}

#[test]
fn onehot_config_errors_name_the_field() {
    let cases = [
        ("num_classes = 0", "num_classes"),
        ("num_classes = 3\nlabel_smoothing = 1.0", "label_smoothing"),
        ("num_classes = 3\nsmoothing = 0.1", "smoothing"),
    ];
    for (config, field) in cases {
        assert_eq!(
            build_error("Onehot", config, &["y"], &["y"]).field.as_str(),
            field,
            "{config}"
        );
    }
    assert_eq!(
        build_error("Onehot", "num_classes = 3", &["y", "z"], &["y"])
            .field
            .as_str(),
        "inputs"
    );
}
