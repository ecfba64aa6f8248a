use fe_plugin_api::tch::Tensor;
use fe_plugin_api::testing;
use fe_plugin_api::Value;

use crate::test_support::{assert_close, same_for_any_split, scalar, tensor_f64};

const E: f64 = 1e-8;

/// A `[1, 2, 1, 4]` sample from channel 0 and channel 1 values.
fn sample(ch0: [f32; 4], ch1: [f32; 4]) -> Tensor {
    let cells: Vec<f32> = ch0.iter().chain(&ch1).copied().collect();
    Tensor::from_slice(&cells).reshape([1, 2, 1, 4])
}

/// Three one-sample batches `[true, pred]`. With predictions binarised at > 0.5:
///
/// ```text
/// A ch0 true 1100 pred 1010: overlap 1, areas 2+2 → 2/(4+ε)
///   ch1 true 0000 pred 0000: both empty → skipped
/// B ch0 true 1110 pred 1110: overlap 3, areas 3+3 → 6/(6+ε)
///   ch1 true 0110 pred 1100: overlap 1, areas 2+2 → 2/(4+ε)
/// C ch0 true 0000 pred 1000: overlap 0, areas 1+0 → 0
///   ch1 true 1100 pred 1000: overlap 1, areas 1+2 → 2/(3+ε)
/// ```
///
/// Channel 0: mean of 3 scores ≈ 1/2; channel 1: mean of 2 ≈ 7/12; Dice ≈ 13/24.
fn masks() -> Vec<Vec<Tensor>> {
    vec![
        vec![
            sample([1., 1., 0., 0.], [0., 0., 0., 0.]),
            sample([0.9, 0.4, 0.6, 0.1], [0.1, 0.2, 0.0, 0.3]),
        ],
        vec![
            sample([1., 1., 1., 0.], [0., 1., 1., 0.]),
            sample([0.8, 0.9, 0.7, 0.2], [0.6, 0.7, 0.1, 0.0]),
        ],
        vec![
            sample([0., 0., 0., 0.], [1., 1., 0., 0.]),
            sample([0.7, 0., 0., 0.], [0.9, 0., 0., 0.]),
        ],
    ]
}

fn channel_means() -> [f64; 2] {
    [
        (2.0 / (4.0 + E) + 6.0 / (6.0 + E) + 0.0) / 3.0,
        (2.0 / (4.0 + E) + 2.0 / (3.0 + E)) / 2.0,
    ]
}

fn run(config: &str, batches: &[Vec<Tensor>]) -> (f64, Vec<f64>) {
    let mut trace = testing::trace("Dice", config, &["y", "p"], &["dice", "per_channel"]).unwrap();
    let values = same_for_any_split(&mut trace, batches);
    (scalar(&values[0]), tensor_f64(&values[1]).1)
}

#[test]
fn mean_over_samples_then_channels_for_any_split() {
    let [ch0, ch1] = channel_means();
    let (dice, per_channel) = run("", &masks());
    assert_close(&per_channel, &[ch0, ch1]);
    assert!((dice - (ch0 + ch1) / 2.0).abs() < 1e-12, "{dice}");
    assert!((dice - 13.0 / 24.0).abs() < 1e-7, "{dice}");
    // The same samples stacked into one batch give the same bits.
    let stacked = vec![(0..2)
        .map(|i| {
            Tensor::cat(
                &masks()
                    .iter()
                    .map(|b| b[i].shallow_clone())
                    .collect::<Vec<_>>(),
                0,
            )
        })
        .collect::<Vec<_>>()];
    assert_eq!(run("", &stacked).0.to_bits(), dice.to_bits());
    // An empty batch changes nothing.
    let mut with_empty = masks();
    with_empty.insert(1, masks()[0].iter().map(|t| t.narrow(0, 0, 0)).collect());
    assert_eq!(run("", &with_empty).0.to_bits(), dice.to_bits());
    // One output: just the mean.
    let mut single = testing::trace("Dice", "", &["y", "p"], &["dice"]).unwrap();
    let values = single.metric_epoch(&masks(), &[vec![0, 1, 2]]).unwrap();
    assert_eq!(values.len(), 1);
    assert_eq!(scalar(&values[0]).to_bits(), dice.to_bits());
}

#[test]
fn excluded_and_absent_channels() {
    let [ch0, _] = channel_means();
    let (dice, per_channel) = run("exclude_channels = [1]", &masks());
    assert_close(&per_channel, &[ch0, f64::NAN]);
    assert!((dice - ch0).abs() < 1e-12);
    // Channel 1 empty in every sample (true and predicted): no scores, left out of the mean.
    let absent: Vec<Vec<Tensor>> = masks()
        .into_iter()
        .map(|b| b.iter().map(first_channel_then_empty).collect())
        .collect();
    let (dice, per_channel) = run("", &absent);
    assert_close(&per_channel, &[ch0, f64::NAN]);
    assert!((dice - ch0).abs() < 1e-12);
}

/// Channel 0 of `mask`, followed by an all-zero channel 1.
fn first_channel_then_empty(mask: &Tensor) -> Tensor {
    let first = mask.narrow(1, 0, 1);
    let empty = first.zeros_like();
    Tensor::cat(&[first, empty], 1)
}

#[test]
fn mask_overlap_and_thresholds() {
    // One sample, two channels, two pixels (f64 so the soft values are exact inputs).
    let truth = Tensor::from_slice(&[1.0f64, 0.0, 0.0, 1.0]).reshape([1, 2, 2]);
    let pred = Tensor::from_slice(&[0.7f64, 0.4, 0.3, 0.6]).reshape([1, 2, 2]);
    let batch = vec![vec![truth, pred]];
    // Only the highest channel per pixel keeps its value: ch0 [.7, 0], ch1 [0, .6]; > 0 gives
    // the true masks exactly.
    let (dice, _) = run("mask_overlap = false\nthreshold = 0.0", &batch);
    assert!((dice - 2.0 / (2.0 + E)).abs() < 1e-12, "{dice}");
    let (integer, _) = run("mask_overlap = false\nthreshold = 0", &batch);
    assert_eq!(integer.to_bits(), dice.to_bits());
    // With overlap every pixel is > 0 in both channels: overlap 1, areas 2+1 each.
    let (dice, _) = run("threshold = 0.0", &batch);
    assert!((dice - 2.0 / (3.0 + E)).abs() < 1e-12, "{dice}");
    // Soft Dice: ch0 2·0.7/(1.1+1), ch1 2·0.6/(0.9+1).
    let (dice, per_channel) = run("threshold = \"none\"", &batch);
    let soft = [1.4 / (0.7 + 0.4 + 1.0 + E), 1.2 / (0.3 + 0.6 + 1.0 + E)];
    assert_close(&per_channel, &soft);
    assert!((dice - (soft[0] + soft[1]) / 2.0).abs() < 1e-12);
}

#[test]
fn errors_and_empty_epoch() {
    let mut trace = testing::trace("Dice", "", &["y", "p"], &["dice"]).unwrap();
    let out_of_range = vec![vec![
        sample([1., 0., 0., 0.], [0.; 4]),
        sample([1.5, 0., 0., 0.], [0.; 4]),
    ]];
    let err = trace.metric_epoch(&out_of_range, &[vec![0]]).unwrap_err();
    assert!(
        err.message.contains("should range from 0 to 1, found 1.5"),
        "{err}"
    );
    let mismatched = vec![vec![
        sample([1., 0., 0., 0.], [0.; 4]),
        Tensor::zeros(
            [1, 2, 4],
            (
                fe_plugin_api::tch::Kind::Float,
                fe_plugin_api::tch::Device::Cpu,
            ),
        ),
    ]];
    let err = trace.metric_epoch(&mismatched, &[vec![0]]).unwrap_err();
    assert!(err.message.contains("equal shape"), "{err}");
    let values = trace.metric_epoch(&[], &[vec![], vec![]]).unwrap();
    assert!(matches!(values[0], Value::Float(v) if v.is_nan()));

    let mut trace = testing::trace("Dice", "exclude_channels = [2]", &["y", "p"], &["d"]).unwrap();
    let err = trace.metric_epoch(&masks(), &[vec![0]]).unwrap_err();
    assert!(
        err.message.contains("channel 2 but the masks have 2"),
        "{err}"
    );

    let field = |config: &str| {
        testing::trace("Dice", config, &["y", "p"], &["d"])
            .unwrap_err()
            .field
            .to_string()
    };
    assert_eq!(field("threshold = \"half\""), "threshold");
    assert_eq!(field("include_std = true"), "include_std");
}
