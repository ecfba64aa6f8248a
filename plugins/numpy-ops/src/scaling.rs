//! Value transforms: `Minmax`, `Normalize`, `ToFloat`, `Binarize`. All are elementwise (or
//! per sample, for `Minmax`), deterministic and batchable, and produce float32.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, NoConfig, NumpyOp, Result, StepContext};
use serde::Deserialize;

use crate::common::{
    expect_pairs, is_float, is_integer, map_each, one_to_one, real_kind, OneOrMany,
};

/// FastEstimator's epsilon guarding against constant samples.
const EPSILON: f64 = 1e-7;

/// `(x - min) / max(max - min, 1e-7)` per sample, as float32.
pub struct Minmax;

impl FromConfig for Minmax {
    type Config = NoConfig;
    fn from_config(_: NoConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(1), Some(1))?;
        Ok(Minmax)
    }
}

impl NumpyOp for Minmax {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let x = one_to_one(inputs)?;
        real_kind(x, "Minmax")?;
        let x = x.f_to_kind(Kind::Float)?;
        let (min, max) = (x.f_min()?, x.f_max()?);
        let range = max.f_sub(&min)?.f_clamp_min(EPSILON)?;
        Ok(vec![x.f_sub(&min)?.f_div(&range)?])
    }

    fn batchable(&self) -> bool {
        true
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let x = one_to_one(inputs)?;
        real_kind(x, "Minmax")?;
        let x = x.f_to_kind(Kind::Float)?;
        if x.dim() == 0 {
            return Err(Error::msg(
                "a batch needs a batch dimension, got a 0-d tensor",
            ));
        }
        let shape = x.size();
        // A batch of scalars has no dimension to flatten: each sample is its own row.
        let flat = if x.dim() == 1 {
            x.f_unsqueeze(1)?
        } else {
            x.f_flatten(1, -1)?
        };
        let min = flat.f_amin(1, true)?;
        let range = flat.f_amax(1, true)?.f_sub(&min)?.f_clamp_min(EPSILON)?;
        Ok(vec![flat.f_sub(&min)?.f_div(&range)?.f_reshape(shape)?])
    }
}

/// `Normalize` configuration. Defaults are the ImageNet statistics FastEstimator uses.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct NormalizeConfig {
    /// Mean to subtract, in units of `max_pixel_value`: one number for every channel, or one
    /// per channel (the last axis). Default `[0.485, 0.456, 0.406]`.
    #[serde(default = "imagenet_mean")]
    pub mean: OneOrMany<f64>,
    /// Standard deviation to divide by, in units of `max_pixel_value`: one number, or one per
    /// channel. Every entry must be positive. Default `[0.229, 0.224, 0.225]`.
    #[serde(default = "imagenet_std")]
    pub std: OneOrMany<f64>,
    /// The largest possible pixel value; `mean` and `std` are multiplied by it. Default 255.
    #[serde(default = "max_pixel")]
    pub max_pixel_value: f64,
}

fn imagenet_mean() -> OneOrMany<f64> {
    OneOrMany(vec![0.485, 0.456, 0.406])
}

fn imagenet_std() -> OneOrMany<f64> {
    OneOrMany(vec![0.229, 0.224, 0.225])
}

fn max_pixel() -> f64 {
    255.0
}

/// FastEstimator's (Albumentations') `Normalize`:
/// `(float32(x) - mean * max_pixel_value) / (std * max_pixel_value)`, with `mean` and `std`
/// per channel along the last axis (HWC images).
pub struct Normalize {
    /// `mean * max_pixel_value` per channel (one entry: all channels).
    shift: Vec<f32>,
    /// `1 / (std * max_pixel_value)` per channel (one entry: all channels).
    scale: Vec<f32>,
}

impl FromConfig for Normalize {
    type Config = NormalizeConfig;
    fn from_config(config: NormalizeConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        expect_pairs(ctx, "Normalize")?;
        let max = config.max_pixel_value;
        if !(max.is_finite() && max > 0.0) {
            return Err(Error::config(
                "max_pixel_value",
                "must be a positive number",
            ));
        }
        let (mean, std) = (config.mean.0, config.std.0);
        if mean.is_empty() {
            return Err(Error::config("mean", "needs at least one value"));
        }
        if std.is_empty() {
            return Err(Error::config("std", "needs at least one value"));
        }
        if mean.len() > 1 && std.len() > 1 && mean.len() != std.len() {
            return Err(Error::config(
                "std",
                format!(
                    "has {} values but `mean` has {}: give one per channel, or a single number",
                    std.len(),
                    mean.len()
                ),
            ));
        }
        if let Some(bad) = mean.iter().find(|m| !m.is_finite()) {
            return Err(Error::config(
                "mean",
                format!("{bad} is not a finite number"),
            ));
        }
        if let Some(bad) = std.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(Error::config(
                "std",
                format!("{bad} is not a positive number"),
            ));
        }
        // Albumentations computes both in float32: mean * max, then the reciprocal of std * max.
        let max = max as f32;
        Ok(Normalize {
            shift: mean.iter().map(|m| *m as f32 * max).collect(),
            scale: std.iter().map(|s| 1.0 / (*s as f32 * max)).collect(),
        })
    }
}

impl Normalize {
    fn channels(&self) -> usize {
        self.shift.len().max(self.scale.len())
    }

    fn normalize(&self, x: &Tensor, batched: bool) -> Result<Tensor> {
        real_kind(x, "Normalize")?;
        let channels = self.channels();
        if channels > 1 {
            let sample_rank = x.dim().saturating_sub(usize::from(batched));
            let last = x.size().last().copied();
            if sample_rank == 0 || last != Some(channels as i64) {
                let shape = x.size();
                let sample = if batched {
                    &shape[1.min(shape.len())..]
                } else {
                    &shape[..]
                };
                return Err(Error::msg(format!(
                    "Normalize has {channels} per-channel values but the sample has shape \
                     {sample:?}: the last axis must hold the {channels} channels"
                )));
            }
        }
        let device = x.device();
        let shift = Tensor::from_slice(&self.shift).f_to_device(device)?;
        let scale = Tensor::from_slice(&self.scale).f_to_device(device)?;
        Ok(x.f_to_kind(Kind::Float)?.f_sub(&shift)?.f_mul(&scale)?)
    }
}

impl NumpyOp for Normalize {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        map_each(inputs, |x| self.normalize(x, false))
    }

    fn batchable(&self) -> bool {
        true
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        map_each(inputs, |x| self.normalize(x, true))
    }
}

/// `ToFloat` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ToFloatConfig {
    /// The divisor (positive). When absent it follows from the input's dtype: 255 for uint8,
    /// 1 for floating-point inputs; other dtypes (int8/16/32/64, bool) need it given.
    #[serde(default)]
    pub max_value: Option<f64>,
}

/// FastEstimator's (Albumentations') `ToFloat`: `float32(x) / max_value`.
pub struct ToFloat {
    max_value: Option<f64>,
}

impl FromConfig for ToFloat {
    type Config = ToFloatConfig;
    fn from_config(config: ToFloatConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        expect_pairs(ctx, "ToFloat")?;
        if let Some(max) = config.max_value {
            if !(max.is_finite() && max > 0.0) {
                return Err(Error::config("max_value", "must be a positive number"));
            }
        }
        Ok(ToFloat {
            max_value: config.max_value,
        })
    }
}

impl ToFloat {
    fn convert(&self, x: &Tensor) -> Result<Tensor> {
        let kind = real_kind(x, "ToFloat")?;
        let max = match (self.max_value, kind) {
            (Some(max), _) => max,
            (None, Kind::Uint8) => 255.0,
            (None, kind) if is_float(kind) => 1.0,
            (None, kind) => {
                return Err(Error::msg(format!(
                    "ToFloat cannot infer the maximum value of {kind:?} tensors: set `max_value`"
                )))
            }
        };
        Ok(x.f_to_kind(Kind::Float)?.f_div_scalar(max)?)
    }
}

impl NumpyOp for ToFloat {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        map_each(inputs, |x| self.convert(x))
    }

    fn batchable(&self) -> bool {
        true
    }

    fn forward_batch(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.forward(inputs, ctx)
    }
}

/// `Binarize` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct BinarizeConfig {
    /// Elements `>= threshold` become 1.0, the others 0.0. Required.
    pub threshold: f64,
}

/// FastEstimator's `Binarize`: `float32(x >= threshold)`.
pub struct Binarize {
    threshold: f64,
}

impl FromConfig for Binarize {
    type Config = BinarizeConfig;
    fn from_config(config: BinarizeConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        expect_pairs(ctx, "Binarize")?;
        if config.threshold.is_nan() {
            return Err(Error::config("threshold", "must be a number, not NaN"));
        }
        Ok(Binarize {
            threshold: config.threshold,
        })
    }
}

impl Binarize {
    fn binarize(&self, x: &Tensor) -> Result<Tensor> {
        let kind = real_kind(x, "Binarize")?;
        // NumPy compares integers with a float threshold in float64; libtorch would use
        // float32, so widen integers first. Floats compare in their own precision, as in NumPy.
        let x = if is_integer(kind) || kind == Kind::Bool {
            x.f_to_kind(Kind::Double)?
        } else {
            x.shallow_clone()
        };
        Ok(x.f_ge(self.threshold)?.f_to_kind(Kind::Float)?)
    }
}

impl NumpyOp for Binarize {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        map_each(inputs, |x| self.binarize(x))
    }

    fn batchable(&self) -> bool {
        true
    }

    fn forward_batch(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.forward(inputs, ctx)
    }
}

#[cfg(test)]
mod tests;
