//! Losses for fe-host with FastEstimator's semantics (the PyTorch branch of each FastEstimator
//! loss): `CrossEntropy`, `MixLoss`, `MeanSquaredError`, `L1Loss`, `Hinge`, `FocalLoss` and `DiceLoss`;
//! and `SuperLoss` around any of them (a per-sample loss in, a curriculum-weighted loss out).
//!
//! Every loss reads `[y_pred, y_true]` (FastEstimator's order), writes one key, and defaults to
//! every mode but `infer` (there are no labels at inference); `MixLoss` also reads the mixing
//! weight λ and runs while training only. See the crate's README for the
//! manifest syntax of each.

use std::collections::BTreeMap;

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{inventory, Error, Field, Registration, Result};

mod cross_entropy;
mod dice;
mod focal;
mod hinge;
mod l1;
mod mix_loss;
mod mse;
mod super_loss;

pub use cross_entropy::{CrossEntropy, CrossEntropyConfig, Form};
pub use dice::{DiceLoss, DiceLossConfig};
pub use focal::{FocalLoss, FocalLossConfig, Reduce};
pub use hinge::{Hinge, HingeConfig};
pub use l1::{L1Loss, L1LossConfig, L1Type};
pub use mix_loss::MixLoss;
pub use mse::{MeanSquaredError, MseConfig};
pub use super_loss::{lambert_w, SuperLoss, SuperLossConfig, Threshold};

/// The configuration `CrossEntropy` and `MixLoss` share ([`CrossEntropyConfig`]).
const CROSS_ENTROPY_FIELDS: &[Field] = &[
    Field::optional(
        "from_logits",
        "bool",
        "false",
        "Predictions are logits: a softmax (sigmoid for binary) is applied first",
    ),
    Field::optional(
        "form",
        "\"binary\" | \"categorical\" | \"sparse\"",
        "from the shapes",
        "Which cross-entropy; absent: chosen per call from the shapes, as FastEstimator does",
    ),
    Field::optional(
        "class_weights",
        "table { class = weight }",
        "none",
        "Weight of each true class; unlisted classes weigh 1",
    ),
    Field::optional(
        "average_loss",
        "bool",
        "true",
        "Mean over the batch; false: one loss per sample",
    ),
];

inventory::submit! {
    Registration::tensor_op::<CrossEntropy>(
        "CrossEntropy",
        "Cross-entropy of predictions against sparse, one-hot or binary labels (from probabilities or logits)",
    )
    .default_mode("!infer")
    .fields(CROSS_ENTROPY_FIELDS)
}

inventory::submit! {
    Registration::tensor_op::<MixLoss>(
        "MixLoss",
        "MixUp/CutMix loss: λ·CE(y_pred, y) + (1-λ)·CE(y_pred, roll(y)), inputs [y_pred, y, lambda]",
    )
    .default_mode("train")
    .fields(CROSS_ENTROPY_FIELDS)
}

inventory::submit! {
    Registration::tensor_op::<MeanSquaredError>(
        "MeanSquaredError",
        "Mean squared error between predictions and targets",
    )
    .default_mode("!infer")
    .fields(&[
        Field::optional("average_loss", "bool", "true", "Mean over the batch; false: one loss per sample"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<L1Loss>(
        "L1Loss",
        "Mean absolute error, smooth L1 or Huber loss between predictions and targets",
    )
    .default_mode("!infer")
    .fields(&[
        Field::optional("loss_type", "\"L1\" | \"Smooth\" | \"Huber\"", "\"L1\"", "Which loss"),
        Field::optional("beta", "float", "1.0", "Where Smooth and Huber switch from squared to linear (> 0)"),
        Field::optional("average_loss", "bool", "true", "Mean over the batch; false: one loss per sample"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<Hinge>(
        "Hinge",
        "Hinge loss max(0, 1 - y_true * y_pred) against -1/+1 labels",
    )
    .default_mode("!infer")
    .fields(&[
        Field::optional("average_loss", "bool", "true", "Mean over the batch; false: one loss per sample"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<FocalLoss>(
        "FocalLoss",
        "Sigmoid focal loss (RetinaNet) against 0/1 labels, from probabilities or logits",
    )
    .default_mode("!infer")
    .fields(&[
        Field::optional("gamma", "float", "2.0", "Exponent of the modulating factor (1 - p_t)^gamma; >= 0"),
        Field::optional("alpha", "float", "0.25", "Weight of the positive class in [0, 1]; -1 disables the weighting"),
        Field::optional("from_logits", "bool", "false", "Predictions are logits (a sigmoid is applied)"),
        Field::optional("normalize", "bool", "true", "Divide each sample's loss by its number of positive labels"),
        Field::optional("shape_reduction", "\"sum\" | \"mean\" | \"none\"", "\"sum\"", "Reduction over every dimension but the batch"),
        Field::optional("sample_reduction", "\"mean\" | \"sum\" | \"none\"", "\"mean\"", "Reduction over the batch"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<DiceLoss>(
        "DiceLoss",
        "Negative (soft) Dice score between channels-first masks",
    )
    .default_mode("!infer")
    .fields(&[
        Field::optional("soft_dice", "bool", "false", "Square predictions and labels in the denominator (V-Net's soft Dice)"),
        Field::optional("average_loss", "bool", "true", "Mean over the batch; false: one value per sample"),
        Field::optional("channel_average", "bool", "true", "Mean over the channels; false: one value per channel"),
        Field::optional("channel_weights", "table { channel = weight }", "none", "Weight of each channel's score; unlisted channels weigh 1"),
        Field::optional("epsilon", "float", "1e-6", "Added to the denominator against division by zero (>= 0)"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<SuperLoss>(
        "SuperLoss",
        "Curriculum loss (Castells et al. 2020) around a per-sample loss: (l-tau)*sigma + lam*ln(sigma)^2, sigma by Lambert W",
    )
    .default_mode("!infer")
    .fields(&[
        Field::optional("threshold", "\"exp\" | float", "\"exp\"", "tau: a moving average of the batch-mean loss per mode (0.1 per step), or a constant such as ln(classes)"),
        Field::optional("regularization", "float", "1.0", "lambda > 0; larger values approach the plain loss"),
        Field::optional("average_loss", "bool", "true", "Mean over the batch; false: one loss per sample"),
    ])
}

fe_plugin_api::export_plugin!();

/// Per-sample losses, or their mean when `average` is set (FastEstimator's `average_loss`).
fn reduce(per_sample: Tensor, average: bool) -> Result<Tensor> {
    if average {
        Ok(per_sample.f_mean(per_sample.kind())?)
    } else {
        Ok(per_sample)
    }
}

/// The two inputs of a loss, `[y_pred, y_true]`.
fn pair<'a>(inputs: &[&'a Tensor]) -> Result<(&'a Tensor, &'a Tensor)> {
    match inputs {
        [y_pred, y_true] => Ok((y_pred, y_true)),
        _ => Err(Error::msg(format!(
            "expected inputs [y_pred, y_true], got {} tensors",
            inputs.len()
        ))),
    }
}

/// How far outside [0, 1] a probability may stray (rounding in half precision) before it is
/// taken for a logit.
const PROBABILITY_SLACK: f64 = 1e-3;

/// A loss reading probabilities checks them where a wrong setting shows at once: on every
/// warm-up call, and on its first call when the run has no warm-up. Afterwards it trusts the
/// model, so the per-step path has no extra device sync. Logits fed to it would otherwise be
/// clamped (or rejected by libtorch for the binary form) and train on garbage without a word.
struct ProbabilityCheck {
    done: bool,
}

impl ProbabilityCheck {
    fn new() -> Self {
        Self { done: false }
    }

    /// Refuses a floating `y_pred` with a value outside [0, 1] (± the slack). `activation`
    /// names what `from_logits = true` applies.
    fn check(&mut self, y_pred: &Tensor, warmup: bool, activation: &str) -> Result<()> {
        if self.done && !warmup {
            return Ok(());
        }
        self.done = true;
        if y_pred.numel() == 0 || !y_pred.is_floating_point() {
            return Ok(());
        }
        let _guard = fe_plugin_api::tch::no_grad_guard();
        let low = y_pred.f_min()?.f_double_value(&[])?;
        let high = y_pred.f_max()?.f_double_value(&[])?;
        if low < -PROBABILITY_SLACK || high > 1.0 + PROBABILITY_SLACK {
            return Err(Error::msg(format!(
                "y_pred holds values from {low:.4} to {high:.4}, outside [0, 1], so they are not the probabilities this loss reads without `from_logits`: for a model returning logits set `from_logits = true` (it applies {activation}), or end the model with {activation}"
            )));
        }
        Ok(())
    }
}

/// `y_true` in `y_pred`'s kind and shape. A target with the same number of elements but another
/// shape (e.g. `[B]` against `[B, 1]`) is reshaped, as FastEstimator's `view(y_pred.size())`
/// does; any other shape is an error naming both, instead of a silent broadcast.
fn align_target(y_pred: &Tensor, y_true: &Tensor) -> Result<Tensor> {
    let y = y_true.f_to_kind(y_pred.kind())?;
    let (pred_shape, true_shape) = (y_pred.size(), y.size());
    if pred_shape == true_shape {
        Ok(y)
    } else if y.numel() == y_pred.numel() {
        Ok(y.f_reshape(&pred_shape)?)
    } else {
        Err(Error::msg(format!(
            "y_true has shape {true_shape:?}, which does not match y_pred's shape {pred_shape:?}"
        )))
    }
}

/// FastEstimator's `reduce_mean(loss, axis=-1)`: the mean over the last axis, giving one value
/// per sample for `[B, C]` inputs. Rank-1 inputs (`[B]`) are already one value per sample and
/// are returned as they are (FastEstimator's PyTorch branch would average them into a scalar
/// even with `average_loss = false`; its TensorFlow branch keeps them per sample).
fn mean_last_axis(loss: Tensor) -> Result<Tensor> {
    if loss.dim() >= 2 {
        Ok(loss.f_mean_dim(-1, false, loss.kind())?)
    } else {
        Ok(loss)
    }
}

/// Parses a TOML table of `class index = weight` (keys are strings in TOML) into pairs sorted by
/// index. `field` names the config field in errors.
fn index_weights(field: &str, map: BTreeMap<String, f64>) -> Result<Vec<(i64, f64)>> {
    let mut pairs = Vec::with_capacity(map.len());
    for (key, weight) in map {
        let index: i64 = key.trim().parse().map_err(|_| {
            Error::config(
                format!("{field}.{key}"),
                "keys must be integer indices, e.g. `{ 0 = 1.0, 3 = 2.5 }`",
            )
        })?;
        if !weight.is_finite() {
            return Err(Error::config(
                format!("{field}.{key}"),
                format!("weight must be a finite number, got {weight}"),
            ));
        }
        pairs.push((index, weight));
    }
    pairs.sort_by_key(|&(index, _)| index);
    if let Some(pair) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(Error::config(
            field,
            format!("index {} is given more than once", pair[0].0),
        ));
    }
    Ok(pairs)
}

fn yes() -> bool {
    true
}

#[cfg(test)]
mod readme {
    use fe_plugin_api::testing;

    /// `inputs = ["a", "b"]` or `inputs = "a"` as a list of keys.
    fn keys(value: &str) -> Vec<String> {
        value
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .split(',')
            .map(|key| key.trim().trim_matches('"').to_owned())
            .filter(|key| !key.is_empty())
            .collect()
    }

    /// Every `[[network.ops]]` example in the README builds with its keys and config.
    #[test]
    fn every_manifest_example_builds() {
        let text = include_str!("../README.md");
        let mut built = Vec::new();
        for block in text.split("```toml").skip(1) {
            let block = block.split("```").next().unwrap();
            let (mut name, mut inputs, mut outputs) = (String::new(), Vec::new(), Vec::new());
            let mut config = String::new();
            for line in block.lines().map(str::trim) {
                if line.is_empty() || line == "[[network.ops]]" {
                    continue;
                }
                let (key, value) = line.split_once('=').unwrap();
                match key.trim() {
                    "op" => name = value.trim().trim_matches('"').to_owned(),
                    "inputs" => inputs = keys(value),
                    "outputs" => outputs = keys(value),
                    "mode" => {}
                    _ => config.push_str(&format!("{line}\n")),
                }
            }
            let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
            let outputs: Vec<&str> = outputs.iter().map(String::as_str).collect();
            if let Err(err) = testing::tensor_op(&name, &config, &inputs, &outputs) {
                panic!("README example for {name} does not build: {err:?}");
            }
            built.push(name);
        }
        assert_eq!(built.len(), 8, "{built:?}");
    }
}
