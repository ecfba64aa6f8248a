//! `HorizontalFlip`: left-right mirroring.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::layout::{check_count, paired_keys, rng, Spatial};

/// `HorizontalFlip` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct HorizontalFlipConfig {
    /// Probability of flipping a sample, in [0, 1] (default 0.5). FastEstimator's bare
    /// `HorizontalFlip` always flips (`p = 1.0`); `Sometimes(HorizontalFlip(...))` is `p = 0.5`.
    #[serde(default = "half")]
    pub p: f64,
}

fn half() -> f64 {
    0.5
}

/// Mirrors every input left-right (the width axis) with probability `p`; one draw per call
/// decides for all inputs.
pub struct HorizontalFlip {
    keys: Vec<String>,
    p: f64,
}

impl FromConfig for HorizontalFlip {
    type Config = HorizontalFlipConfig;
    fn from_config(config: HorizontalFlipConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        if !(0.0..=1.0).contains(&config.p) {
            return Err(Error::config(
                "p",
                format!("must be in [0, 1], got {}", config.p),
            ));
        }
        Ok(HorizontalFlip {
            keys: paired_keys(ctx)?,
            p: config.p,
        })
    }
}

impl NumpyOp for HorizontalFlip {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        check_count(&self.keys, inputs)?;
        let flip = rng(ctx.seed).random::<f64>() < self.p;
        self.keys
            .iter()
            .zip(inputs)
            .map(|(key, x)| {
                let layout = Spatial::of(key, x, false)?;
                if flip {
                    Ok(x.f_flip([layout.w_axis()])?)
                } else {
                    Ok(x.shallow_clone())
                }
            })
            .collect()
    }
}
