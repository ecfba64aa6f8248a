//! Label encoding: `Onehot`.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use serde::Deserialize;

use crate::common::one_to_one;

/// `Onehot` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct OnehotConfig {
    /// Number of classes.
    pub num_classes: i64,
    /// Moves this much probability mass uniformly onto all classes.
    #[serde(default)]
    pub label_smoothing: f64,
}

/// Integer label → float32 one-hot vector of length `num_classes`.
pub struct Onehot {
    num_classes: i64,
    label_smoothing: f64,
}

impl FromConfig for Onehot {
    type Config = OnehotConfig;
    fn from_config(config: OnehotConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(1), Some(1))?;
        if config.num_classes < 1 {
            return Err(Error::config("num_classes", "must be at least 1"));
        }
        if !(0.0..1.0).contains(&config.label_smoothing) {
            return Err(Error::config("label_smoothing", "must be in [0, 1)"));
        }
        Ok(Onehot {
            num_classes: config.num_classes,
            label_smoothing: config.label_smoothing,
        })
    }
}

impl Onehot {
    fn encode(&self, labels: &Tensor) -> Result<Tensor> {
        let labels = labels.f_to_kind(Kind::Int64)?;
        let (low, high) = (
            labels.f_min()?.f_int64_value(&[])?,
            labels.f_max()?.f_int64_value(&[])?,
        );
        if low < 0 || high >= self.num_classes {
            return Err(Error::msg(format!(
                "label {} is outside 0..{}",
                if low < 0 { low } else { high },
                self.num_classes
            )));
        }
        let hot = labels.f_one_hot(self.num_classes)?.f_to_kind(Kind::Float)?;
        if self.label_smoothing == 0.0 {
            return Ok(hot);
        }
        let smooth = self.label_smoothing;
        Ok(hot
            .f_mul_scalar(1.0 - smooth)?
            .f_add_scalar(smooth / self.num_classes as f64)?)
    }
}

impl NumpyOp for Onehot {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let label = one_to_one(inputs)?.f_reshape([-1])?;
        if label.numel() != 1 {
            return Err(Error::msg(format!(
                "expected one label per sample, got {}",
                label.numel()
            )));
        }
        Ok(vec![self.encode(&label)?.f_squeeze_dim(0)?])
    }

    fn batchable(&self) -> bool {
        true
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let labels = one_to_one(inputs)?.f_reshape([-1])?;
        Ok(vec![self.encode(&labels)?])
    }
}

#[cfg(test)]
mod tests;
