//! FastEstimator's `Watch` and `FGSM` (fast gradient sign method, Goodfellow et al. 2015):
//! adversarial examples from the gradient of a loss with respect to the input.
//!
//! `Watch` makes a batch key a leaf that records gradients (FastEstimator's `Watch` adds it to
//! the GradientTape); ops after it build their graph from it. `FGSM` differentiates the loss
//! with respect to that key, keeping the graph so that `UpdateOp` can still differentiate the
//! same loss, and returns `clip(x + ε·sign(∇ₓ loss))`, detached.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NoConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

/// `Watch`: one output per input, the same values as a leaf that records gradients.
pub struct Watch;

impl FromConfig for Watch {
    type Config = NoConfig;
    fn from_config(_: NoConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        if ctx.inputs.is_empty() || ctx.inputs.len() != ctx.outputs.len() {
            return Err(Error::config(
                "outputs",
                format!(
                    "expected one output per input ({}), got {}",
                    ctx.inputs.len(),
                    ctx.outputs.len()
                ),
            ));
        }
        Ok(Watch)
    }
}

impl TensorOp for Watch {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        inputs
            .iter()
            .map(|t| Ok(t.f_detach()?.f_set_requires_grad(true)?))
            .collect()
    }
}

/// Configuration of `FGSM`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct FgsmConfig {
    /// Step size ε (FastEstimator's default 0.01).
    #[serde(default = "default_epsilon")]
    pub epsilon: f64,
    /// Lower clip of the result; default: the batch's minimum.
    #[serde(default)]
    pub clip_low: Option<f64>,
    /// Upper clip of the result; default: the batch's maximum.
    #[serde(default)]
    pub clip_high: Option<f64>,
}

fn default_epsilon() -> f64 {
    0.01
}

/// `FGSM`: inputs `[data, loss]` (data from a `Watch`), output the adversarial data.
pub struct Fgsm {
    config: FgsmConfig,
}

impl FromConfig for Fgsm {
    type Config = FgsmConfig;
    fn from_config(config: FgsmConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(1))?;
        if !(config.epsilon.is_finite() && config.epsilon >= 0.0) {
            return Err(Error::config("epsilon", "must be a finite number ≥ 0"));
        }
        if let (Some(low), Some(high)) = (config.clip_low, config.clip_high) {
            if low > high {
                return Err(Error::config("clip_low", "must not exceed clip_high"));
            }
        }
        Ok(Self { config })
    }
}

impl TensorOp for Fgsm {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let [data, loss] = inputs else {
            return Err(Error::msg("expected inputs [data, loss]"));
        };
        if !data.requires_grad() {
            return Err(Error::msg(
                "the data does not record gradients: put a Watch on its key before the ops \
                 that compute the loss",
            ));
        }
        if !loss.requires_grad() {
            return Err(Error::msg(
                "the loss carries no gradient graph: this mode runs without gradients (give \
                 the mode an UpdateOp or GradientOp, or run FGSM in train only)",
            ));
        }
        let target = if loss.numel() == 1 {
            loss.shallow_clone()
        } else {
            loss.f_sum(loss.kind())?
        };
        let owned = [data.shallow_clone()];
        let grad = Tensor::f_run_backward(&[target], &owned, true, false)?.remove(0);
        let data = data.f_detach()?;
        let stepped = data.f_add(&grad.f_sign()?.f_mul_scalar(self.config.epsilon)?)?;
        let low = match self.config.clip_low {
            Some(v) => v,
            None => data.f_min()?.f_double_value(&[])?,
        };
        let high = match self.config.clip_high {
            Some(v) => v,
            None => data.f_max()?.f_double_value(&[])?,
        };
        Ok(vec![stepped.f_clamp(low, high)?])
    }
}

#[cfg(test)]
mod tests;
