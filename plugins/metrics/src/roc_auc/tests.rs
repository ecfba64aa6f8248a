use fe_plugin_api::tch::Tensor;
use fe_plugin_api::testing;

use crate::test_support::{
    assert_close, batches, binary_batches, same_for_any_split, scalar, tensor_f64,
};

fn roc(config: &str, outputs: &[&str], batches: &[Vec<Tensor>]) -> Vec<fe_plugin_api::Value> {
    let mut metric = testing::trace("ROCAUC", config, &["y", "p"], outputs).unwrap();
    same_for_any_split(&mut metric, batches)
}

#[test]
fn binary_auc_counts_positive_negative_pairs() {
    // Positives .9 .3 .7 .8 .1 against negatives .6 .2 .5: they outrank 3+1+3+3+0 = 10 of
    // the 15 pairs (sklearn: 0.6666666666666667).
    let got = scalar(&roc("", &["auc"], &binary_batches())[0]);
    assert_eq!(got, 10.0 / 15.0);
}

#[test]
fn a_tie_between_a_positive_and_a_negative_counts_one_half() {
    let batch = vec![vec![
        Tensor::from_slice(&[0i64, 1, 0, 1]),
        Tensor::from_slice(&[0.5f32, 0.5, 0.2, 0.8]),
    ]];
    // Positive .5: tie with .5 (½) and above .2 (1); positive .8 above both: 3.5 of 4.
    assert_eq!(scalar(&roc("", &["auc"], &batch)[0]), 0.875);
}

#[test]
fn multiclass_is_the_macro_mean_of_one_vs_rest_aucs() {
    // sklearn: roc_auc_score(..., multi_class="ovr", average=None) = [19/24, 2/3, 15/16],
    // macro 0.7986111111111112.
    let values = roc("", &["auc", "per_class"], &batches());
    let want = [19.0 / 24.0, 2.0 / 3.0, 15.0 / 16.0];
    assert_close(&[scalar(&values[0])], &[want.iter().sum::<f64>() / 3.0]);
    let (shape, cells) = tensor_f64(&values[1]);
    assert_eq!(shape, [3]);
    assert_close(&cells, &want);
    let only = roc("average = \"none\"", &["per_class"], &batches());
    assert_close(&tensor_f64(&only[0]).1, &want);
}

#[test]
fn a_class_without_positives_is_nan_and_left_out_of_the_mean() {
    // Class 2 never occurs: its AUC is undefined (sklearn refuses the whole call).
    let batch = vec![vec![
        Tensor::from_slice(&[0i64, 1, 0, 1]),
        Tensor::from_slice(&[
            0.7f32, 0.2, 0.1, 0.3, 0.6, 0.1, 0.2, 0.5, 0.3, 0.1, 0.5, 0.4,
        ])
        .reshape([4, 3]),
    ]];
    let values = roc("", &["auc", "per_class"], &batch);
    let (_, cells) = tensor_f64(&values[1]);
    // Class 0: positives .7 .2 against negatives .3 .1 → 2 + 1 = 3 of 4 pairs;
    // class 1: positives .6 .5 against negatives .2 .5 → 2 + 1½ = 3.5 of 4.
    assert_close(&cells, &[0.75, 0.875, f64::NAN]);
    assert_close(&[scalar(&values[0])], &[0.8125]);
}

#[test]
fn no_samples_is_nan_and_bad_inputs_are_named() {
    let mut metric = testing::trace("ROCAUC", "", &["y", "p"], &["auc"]).unwrap();
    assert!(scalar(&metric.metric_epoch(&[], &[vec![]]).unwrap()[0]).is_nan());
    let outside = vec![vec![
        Tensor::from_slice(&[0i64, 3]),
        Tensor::from_slice(&[0.5f32, 0.3, 0.2, 0.1, 0.1, 0.8]).reshape([2, 3]),
    ]];
    let error = metric.metric_epoch(&outside, &[vec![0]]).unwrap_err();
    assert!(error.to_string().contains("outside 0..3"), "{error}");
    let refused = testing::trace("ROCAUC", "average = \"none\"", &["y", "p"], &["a", "b"]);
    assert!(refused.is_err());
}
