use fe_plugin_api::tch::Tensor;
use fe_plugin_api::testing;

use crate::test_support::{batches, same_for_any_split, scalar};

fn ece(config: &str, batches: &[Vec<Tensor>]) -> f64 {
    let mut metric =
        testing::trace("ExpectedCalibrationError", config, &["y", "p"], &["ece"]).unwrap();
    scalar(&same_for_any_split(&mut metric, batches)[0])
}

/// Probabilities of class 1 that Float32 holds exactly, in batches of 4 and 2.
fn binary() -> Vec<Vec<Tensor>> {
    let labels = [1i64, 0, 1, 0, 1, 1];
    let probability = [0.75f32, 0.25, 1.0, 0.5, 0.125, 0.875];
    [(0, 4), (4, 6)]
        .iter()
        .map(|&(a, b)| {
            vec![
                Tensor::from_slice(&labels[a..b]),
                Tensor::from_slice(&probability[a..b]).reshape([(b - a) as i64, 1]),
            ]
        })
        .collect()
}

#[test]
fn binary_bins_are_half_open_and_one_has_its_own_bin() {
    // Two bins: [0, .5) holds .25 (label 0) and .125 (1): acc 1/2, conf 3/16, gap 5/16;
    // [.5, 1) holds .75 (1), .5 (0), .875 (1): acc 2/3, conf 17/24, gap 1/24; 1.0 (label 1)
    // is alone in the last bin with gap 0.
    let l1 = (2.0 * 5.0 / 16.0 + 3.0 / 24.0) / 6.0;
    assert!((ece("n_bins = 2", &binary()) - l1).abs() < 1e-15);
    assert!((l1 - 0.125).abs() < 1e-15);
    let l2 = ((2.0 * (5.0f64 / 16.0).powi(2) + 3.0 * (1.0f64 / 24.0).powi(2)) / 6.0).sqrt();
    assert!((ece("n_bins = 2\nnorm = \"l2\"", &binary()) - l2).abs() < 1e-15);
    assert_eq!(ece("n_bins = 2\nnorm = \"max\"", &binary()), 5.0 / 16.0);
}

#[test]
fn multiclass_uses_the_top_probability_and_whether_the_argmax_is_right() {
    // Every sample's top probability is 0.6 (one bin); 7 of 10 argmaxes are right.
    let got = ece("", &batches());
    assert!((got - (0.7 - f64::from(0.6f32))).abs() < 1e-15, "{got}");
}

#[test]
fn probabilities_outside_the_unit_interval_are_refused() {
    let mut metric = testing::trace("ExpectedCalibrationError", "", &["y", "p"], &["ece"]).unwrap();
    let logits = vec![vec![
        Tensor::from_slice(&[1i64, 0]),
        Tensor::from_slice(&[2.5f32, -1.0]),
    ]];
    let error = metric.metric_epoch(&logits, &[vec![0]]).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("probabilities in [0, 1], found -1"),
        "{error}"
    );
    assert!(scalar(&metric.metric_epoch(&[], &[vec![]]).unwrap()[0]).is_nan());
    assert!(testing::trace(
        "ExpectedCalibrationError",
        "n_bins = 0",
        &["y", "p"],
        &["e"]
    )
    .is_err());
}
