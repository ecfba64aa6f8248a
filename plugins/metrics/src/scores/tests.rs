use fe_plugin_api::tch::Tensor;
use fe_plugin_api::testing;
use fe_plugin_api::Value;

use crate::test_support::{
    assert_close, batches, binary_batches, same_for_any_split, scalar, scores, tensor_f64,
};

/// Runs `metric` with `config` over `batches` on 1, 2 and 3 workers (asserting identical
/// results) and returns its values.
fn run(metric: &str, config: &str, batches: &[Vec<Tensor>]) -> Vec<Value> {
    let mut trace = testing::trace(metric, config, &["y", "p"], &["out"]).unwrap();
    same_for_any_split(&mut trace, batches)
}

fn one(metric: &str, config: &str, batches: &[Vec<Tensor>]) -> f64 {
    scalar(&run(metric, config, batches)[0])
}

fn per_class(metric: &str, config: &str, batches: &[Vec<Tensor>]) -> Vec<f64> {
    let (shape, cells) = tensor_f64(&run(metric, config, batches)[0]);
    assert_eq!(shape, [cells.len() as i64]);
    cells
}

// Multiclass data (test_support::batches):
//   tp = [3, 2, 2], predicted (column sums) = [4, 3, 3], actual (row sums) = [4, 4, 2].

#[test]
fn multiclass_per_class_is_the_default() {
    assert_close(
        &per_class("Precision", "", &batches()),
        &[3.0 / 4.0, 2.0 / 3.0, 2.0 / 3.0],
    );
    assert_close(
        &per_class("Recall", "", &batches()),
        &[3.0 / 4.0, 2.0 / 4.0, 2.0 / 2.0],
    );
    // F1 = 2tp / (actual + predicted) = [6/8, 4/7, 4/5].
    assert_close(
        &per_class("F1Score", "", &batches()),
        &[6.0 / 8.0, 4.0 / 7.0, 4.0 / 5.0],
    );
    let explicit = per_class("F1Score", "average = \"none\"", &batches());
    assert_close(&explicit, &[6.0 / 8.0, 4.0 / 7.0, 4.0 / 5.0]);
}

#[test]
fn multiclass_averages() {
    let b = batches();
    let macro_ = "average = \"macro\"";
    // macro: plain means of the per-class values above.
    assert!((one("Precision", macro_, &b) - 25.0 / 36.0).abs() < 1e-12);
    assert!((one("Recall", macro_, &b) - 0.75).abs() < 1e-12);
    assert!((one("F1Score", macro_, &b) - 99.0 / 140.0).abs() < 1e-12);
    // micro: summed counts, 7 correct of 10, for all three.
    for metric in ["Precision", "Recall", "F1Score"] {
        assert!(
            (one(metric, "average = \"micro\"", &b) - 0.7).abs() < 1e-12,
            "{metric}"
        );
    }
    // weighted by actual [4, 4, 2]: precision (4·3/4 + 4·2/3 + 2·2/3)/10 = 0.7,
    // recall = accuracy = 0.7, F1 (4·3/4 + 4·4/7 + 2·4/5)/10 = 241/350.
    let weighted = "average = \"weighted\"";
    assert!((one("Precision", weighted, &b) - 0.7).abs() < 1e-12);
    assert!((one("Recall", weighted, &b) - 0.7).abs() < 1e-12);
    assert!((one("F1Score", weighted, &b) - 241.0 / 350.0).abs() < 1e-12);
}

#[test]
fn two_outputs_give_the_average_and_the_per_class_values() {
    let mut trace = testing::trace(
        "F1Score",
        "average = \"macro\"",
        &["y", "p"],
        &["f1", "f1_per_class"],
    )
    .unwrap();
    let values = same_for_any_split(&mut trace, &batches());
    assert_eq!(values.len(), 2);
    assert!((scalar(&values[0]) - 99.0 / 140.0).abs() < 1e-12);
    assert_close(
        &tensor_f64(&values[1]).1,
        &[6.0 / 8.0, 4.0 / 7.0, 4.0 / 5.0],
    );
}

// Binary data (test_support::binary_batches): tp 3, fp 1, fn 2, tn 2.

#[test]
fn binary_is_the_default_for_one_value_per_sample() {
    let b = binary_batches();
    assert!((one("Precision", "", &b) - 3.0 / 4.0).abs() < 1e-12);
    assert!((one("Recall", "", &b) - 3.0 / 5.0).abs() < 1e-12);
    assert!((one("F1Score", "", &b) - 6.0 / 9.0).abs() < 1e-12);
    // pos_label 0: tp 2 (= tn), predicted 4 (tn + fn), actual 3 (tn + fp).
    let zero = "average = \"binary\"\npos_label = 0";
    assert!((one("Precision", zero, &b) - 2.0 / 4.0).abs() < 1e-12);
    assert!((one("Recall", zero, &b) - 2.0 / 3.0).abs() < 1e-12);
    assert!((one("F1Score", zero, &b) - 4.0 / 7.0).abs() < 1e-12);
    // Per class: [class 0, class 1].
    assert_close(
        &per_class("Precision", "average = \"none\"", &b),
        &[0.5, 0.75],
    );
}

#[test]
fn binary_threshold() {
    // threshold 0.65: predictions [1,0,0 | 1,0,0 | 1,0]: tp 3, fp 0, fn 2, tn 3.
    let b = binary_batches();
    assert_eq!(one("Precision", "threshold = 0.65", &b), 1.0);
    assert!((one("Recall", "threshold = 0.65", &b) - 0.6).abs() < 1e-12);
    // An integer threshold: nothing is above 1, so tp 0 of actual 5.
    assert_eq!(one("Recall", "threshold = 1", &b), 0.0);
}

#[test]
fn fastestimator_reference_values() {
    // FastEstimator's tests: labels [[1,2],[3,4]] argmax to [1, 1]; predictions
    // [[1,5,3],[2,1,0]] are [1, 0]. Class 0: tp 0, predicted 1, actual 0; class 1: tp 1,
    // predicted 1, actual 2; class 2 absent. FastEstimator (sklearn, present classes only)
    // reports precision [0, 1] and F1 [0, 0.67]; here class 2 is listed with zero_division.
    let b = vec![vec![
        Tensor::from_slice(&[1i64, 2, 3, 4]).reshape([2, 2]),
        Tensor::from_slice(&[1.0f32, 5.0, 3.0, 2.0, 1.0, 0.0]).reshape([2, 3]),
    ]];
    assert_close(&per_class("Precision", "", &b), &[0.0, 1.0, 0.0]);
    assert_close(&per_class("F1Score", "", &b), &[0.0, 2.0 / 3.0, 0.0]);
    // Binary: label 1, probability 0.9 → all scores 1.
    let binary = vec![vec![
        Tensor::from_slice(&[1i64]),
        Tensor::from_slice(&[0.9f32]),
    ]];
    assert_eq!(one("Precision", "", &binary), 1.0);
    assert_eq!(one("F1Score", "", &binary), 1.0);
}

/// Four score columns; labels [0,0,1,1,2], predictions [0,1,1,1,0]; class 3 never occurs.
///   tp = [1, 2, 0, 0], predicted = [2, 3, 0, 0], actual = [2, 2, 1, 0].
fn absent_class() -> Vec<Vec<Tensor>> {
    vec![
        vec![Tensor::from_slice(&[0i64, 0]), scores(&[0, 1], 4)],
        vec![Tensor::from_slice(&[1i64, 1]), scores(&[1, 1], 4)],
        vec![Tensor::from_slice(&[2i64]), scores(&[0], 4)],
    ]
}

#[test]
fn absent_class_uses_zero_division() {
    let b = absent_class();
    let nan = f64::NAN;
    // Precision: class 2 has no predictions, class 3 nothing: both undefined.
    assert_close(&per_class("Precision", "", &b), &[0.5, 2.0 / 3.0, 0.0, 0.0]);
    let zd1 = "average = \"none\"\nzero_division = 1";
    assert_close(
        &per_class("Precision", zd1, &b),
        &[0.5, 2.0 / 3.0, 1.0, 1.0],
    );
    let zd_nan = "average = \"none\"\nzero_division = nan";
    assert_close(
        &per_class("Precision", zd_nan, &b),
        &[0.5, 2.0 / 3.0, nan, nan],
    );
    // Recall: class 2 is defined (0 of 1), class 3 is not.
    assert_close(&per_class("Recall", "", &b), &[0.5, 1.0, 0.0, 0.0]);
    assert_close(&per_class("Recall", zd_nan, &b), &[0.5, 1.0, 0.0, nan]);
    // F1 = 2tp / (actual + predicted): [2/4, 4/5, 0/1, 0/0].
    assert_close(&per_class("F1Score", zd_nan, &b), &[0.5, 0.8, 0.0, nan]);
}

#[test]
fn absent_class_is_left_out_of_averages() {
    let b = absent_class();
    // Macro over the present classes 0, 1, 2 (sklearn's default labels).
    assert!((one("Precision", "average = \"macro\"", &b) - 7.0 / 18.0).abs() < 1e-12);
    let zd1 = "average = \"macro\"\nzero_division = 1";
    assert!((one("Precision", zd1, &b) - 13.0 / 18.0).abs() < 1e-12);
    // zero_division = nan: class 2's undefined precision is dropped too: (1/2 + 2/3) / 2.
    let zd_nan = "average = \"macro\"\nzero_division = nan";
    assert!((one("Precision", zd_nan, &b) - 7.0 / 12.0).abs() < 1e-12);
    assert!((one("Recall", "average = \"macro\"", &b) - 0.5).abs() < 1e-12);
    assert!((one("F1Score", "average = \"macro\"", &b) - 1.3 / 3.0).abs() < 1e-12);
    // Weighted by actual [2, 2, 1]: (2·1/2 + 2·2/3 + 1·0) / 5.
    assert!((one("Precision", "average = \"weighted\"", &b) - 7.0 / 15.0).abs() < 1e-12);
    assert!((one("F1Score", "average = \"micro\"", &b) - 3.0 / 5.0).abs() < 1e-12);
}

#[test]
fn binary_without_positives_is_undefined() {
    // Labels all 0, predictions all below 0.5: class 1 has tp 0, predicted 0, actual 0.
    let b = vec![vec![
        Tensor::from_slice(&[0i64, 0, 0]),
        Tensor::from_slice(&[0.1f32, 0.2, 0.3]).reshape([3, 1]),
    ]];
    for metric in ["Precision", "Recall", "F1Score"] {
        assert_eq!(one(metric, "", &b), 0.0, "{metric}");
        assert_eq!(one(metric, "zero_division = 1", &b), 1.0, "{metric}");
        assert!(one(metric, "zero_division = nan", &b).is_nan(), "{metric}");
    }
    // Class 0 is perfect: per class [1, undefined].
    assert_close(&per_class("F1Score", "average = \"none\"", &b), &[1.0, 0.0]);
}

#[test]
fn epoch_without_samples() {
    let mut trace = testing::trace("F1Score", "average = \"macro\"", &["y", "p"], &["f1"]).unwrap();
    let values = trace.metric_epoch(&[], &[vec![]]).unwrap();
    assert!(scalar(&values[0]).is_nan());
    let mut trace = testing::trace("Recall", "num_classes = 3", &["y", "p"], &["r"]).unwrap();
    let values = trace.metric_epoch(&[], &[vec![], vec![]]).unwrap();
    let (shape, cells) = tensor_f64(&values[0]);
    assert_eq!(shape, [3]);
    assert!(cells.iter().all(|v| v.is_nan()));
}

#[test]
fn configuration_errors_name_the_field() {
    let field = |config: &str, outputs: &[&str]| {
        testing::trace("F1Score", config, &["y", "p"], outputs)
            .unwrap_err()
            .field
            .to_string()
    };
    assert_eq!(field("zero_division = 0.5", &["f1"]), "zero_division");
    assert_eq!(
        field("average = \"binary\"\nnum_classes = 3", &["f1"]),
        "average"
    );
    assert_eq!(
        field("average = \"binary\"\npos_label = 2", &["f1"]),
        "average"
    );
    assert_eq!(field("average = \"mean\"", &["f1"]), "average");
    assert_eq!(field("", &["f1", "per_class"]), "average");
    assert_eq!(field("average = \"macro\"", &["a", "b", "c"]), "outputs");
    assert_eq!(field("beta = 2", &["f1"]), "beta");
    assert_eq!(field("num_classes = 1", &["f1"]), "num_classes");
}

#[test]
fn runtime_errors() {
    // average = binary on three classes.
    let mut trace =
        testing::trace("Precision", "average = \"binary\"", &["y", "p"], &["p"]).unwrap();
    let err = trace
        .metric_epoch(&batches(), &[vec![0, 1, 2]])
        .unwrap_err();
    assert!(
        err.message.contains("needs 2 classes, there are 3"),
        "{err}"
    );
    // num_classes disagrees with the score columns.
    let mut trace = testing::trace("Recall", "num_classes = 4", &["y", "p"], &["r"]).unwrap();
    let err = trace.metric_epoch(&batches(), &[vec![0]]).unwrap_err();
    assert!(
        err.message
            .contains("3 scores per sample but there are 4 classes"),
        "{err}"
    );
    // Labels do not match the predictions in number.
    let bad = vec![vec![Tensor::from_slice(&[0i64, 1, 2]), scores(&[0, 1], 3)]];
    let err = trace.metric_epoch(&bad, &[vec![0]]).unwrap_err();
    assert!(err.message.contains("3 labels"), "{err}");
}
