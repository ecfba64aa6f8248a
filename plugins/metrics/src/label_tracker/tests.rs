use fe_plugin_api::tch::Tensor;
use fe_plugin_api::testing;

use super::stats;
use crate::test_support::{assert_close, same_for_any_split, tensor_f64};

/// Losses of nine samples in three batches, labels 0, 1, 2 (one one-hot batch).
fn batches() -> Vec<Vec<Tensor>> {
    vec![
        vec![
            Tensor::from_slice(&[0.5f32, 1.5, 2.0]),
            Tensor::from_slice(&[0i64, 1, 2]),
        ],
        vec![
            Tensor::from_slice(&[0.25f32, 3.0]),
            Tensor::from_slice(&[0.0f32, 1.0, 1.0, 0.0]).reshape([2, 2]),
        ],
        vec![
            Tensor::from_slice(&[1.0f32, 4.0, 0.75, 2.5]),
            Tensor::from_slice(&[0i64, 2, 1, 2]),
        ],
    ]
}

#[test]
fn means_per_label_are_the_same_for_any_split() {
    let mut tracker = testing::trace("LabelTracker", "", &["ce", "y"], &["ce_by_y"]).unwrap();
    let values = same_for_any_split(&mut tracker, &batches());
    let (shape, means) = tensor_f64(&values[0]);
    assert_eq!(shape, vec![3]);
    // The one-hot batch's labels are [1, 0].
    assert_close(
        &means,
        &[
            (0.5 + 3.0 + 1.0) / 3.0,
            (1.5 + 0.25 + 0.75) / 3.0,
            (2.0 + 4.0 + 2.5) / 3.0,
        ],
    );
}

#[test]
fn a_mapping_keeps_only_its_labels_in_ascending_label_order() {
    let config = "label_mapping = { cat = 2, dog = 0 }\nbounds = [\"std\", \"range\"]";
    let mut tracker = testing::trace("LabelTracker", config, &["ce", "y"], &["out"]).unwrap();
    let values = same_for_any_split(&mut tracker, &batches());
    let (_, means) = tensor_f64(&values[0]);
    assert_close(&means, &[(0.5 + 3.0 + 1.0) / 3.0, (2.0 + 4.0 + 2.5) / 3.0]);
}

#[test]
fn bad_configurations_are_refused_saying_why() {
    let err = testing::trace("LabelTracker", "bounds = \"iqr\"", &["ce", "y"], &["o"])
        .err()
        .unwrap();
    assert!(err.to_string().contains("unknown bound `iqr`"), "{err}");
    let err = testing::trace(
        "LabelTracker",
        "label_mapping = { a = 1, b = 1 }",
        &["ce", "y"],
        &["o"],
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("both map to label 1"), "{err}");
}

#[test]
fn stats_are_numpy_mean_population_std_min_max() {
    let s = stats(vec![4.0, 1.0, 3.0, 2.0]);
    assert_close(
        &[s.mean, s.std, s.min, s.max],
        &[2.5, 1.25f64.sqrt(), 1.0, 4.0],
    );
}
