//! FastEstimator's `L2Regularizaton` (its spelling; `L2Regularization` is accepted too): adds
//! `beta · Σ_p Σ p² / 2` over a model's trainable parameters to a loss.
//!
//! A built-in rather than a plugin op: plugin ops see only their input tensors, never a
//! model's parameters (the host owns them: optimizers, checkpoints, devices, all-reduce), and
//! widening the plugin ABI for one op would rebuild every plugin.

use serde::Deserialize;
use tch::Tensor;

use super::model::ModelSlot;

/// The names the op answers to: FastEstimator's (misspelt) class name, and the spelling a
/// user types.
pub const NAMES: [&str; 2] = ["L2Regularizaton", "L2Regularization"];

/// `[[network.ops]] op = "L2Regularization"`
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct L2Config {
    /// The model whose trainable parameters are penalised.
    pub model: String,
    /// The weight of the penalty (FastEstimator's default 0.01).
    #[serde(default = "default_beta")]
    pub beta: f64,
}

fn default_beta() -> f64 {
    0.01
}

/// Adds the model's L2 penalty to its input loss.
pub struct L2Op {
    /// Index of the model in the network.
    pub model: usize,
    /// The penalty's weight.
    pub beta: f64,
}

impl L2Op {
    /// `loss + beta · Σ sum(p²) / 2`, the penalty as FastEstimator's
    /// `backend.l2_regularization` computes it (the halved squared norm, TensorFlow's
    /// `l2_loss`). Differentiable in the parameters, so an UpdateOp on the result pulls the
    /// weights toward zero; the penalty is a scalar and broadcasts over a per-sample loss.
    pub fn forward(&self, model: &ModelSlot, inputs: &[&Tensor]) -> Result<Vec<Tensor>, String> {
        let [loss] = inputs else {
            return Err(format!(
                "expected one input (the loss), got {}",
                inputs.len()
            ));
        };
        let mut total: Option<Tensor> = None;
        for param in &model.params {
            let squares = param
                .f_square()
                .and_then(|s| s.f_sum(param.kind()))
                .map_err(crate::tch_message)?;
            total = Some(match total {
                Some(sum) => sum.f_add(&squares).map_err(crate::tch_message)?,
                None => squares,
            });
        }
        let Some(total) = total else {
            return Err(format!(
                "model `{}` has no trainable parameter to regularize",
                model.name
            ));
        };
        let penalty = total
            .f_mul_scalar(self.beta / 2.0)
            .map_err(crate::tch_message)?;
        Ok(vec![loss.f_add(&penalty).map_err(crate::tch_message)?])
    }
}
