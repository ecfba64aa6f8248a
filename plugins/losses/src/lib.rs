//! Losses for fe-host: `CrossEntropy` and `MeanSquaredError`, with FastEstimator's semantics.
//! Both default to every mode but `infer` (there are no labels at inference).

use fe_plugin_api::{inventory, Registration};

mod cross_entropy;
mod mse;

pub use cross_entropy::{CrossEntropy, CrossEntropyConfig, Form};
pub use mse::{MeanSquaredError, MseConfig};

inventory::submit! {
    Registration::tensor_op::<CrossEntropy>(
        "CrossEntropy",
        "Cross-entropy of predictions against sparse, one-hot or binary labels (from probabilities or logits)",
    )
    .default_mode("!infer")
}

inventory::submit! {
    Registration::tensor_op::<MeanSquaredError>(
        "MeanSquaredError",
        "Mean squared error between predictions and targets",
    )
    .default_mode("!infer")
}

fe_plugin_api::export_plugin!();

/// Per-sample losses, or their mean when `average` is set (FastEstimator's `average_loss`).
fn reduce(
    per_sample: fe_plugin_api::tch::Tensor,
    average: bool,
) -> fe_plugin_api::Result<fe_plugin_api::tch::Tensor> {
    if average {
        Ok(per_sample.f_mean(per_sample.kind())?)
    } else {
        Ok(per_sample)
    }
}
