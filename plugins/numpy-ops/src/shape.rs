//! Shape transforms: `ExpandDims`, `Reshape`, `ChannelTranspose`. They move or regroup
//! elements without changing them, work on every dtype, and are batchable.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use serde::Deserialize;

use crate::common::{expect_pairs, map_each, OneOrMany};

/// `ExpandDims` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ExpandDimsConfig {
    /// Where the new dimension goes (negative counts from the end), as in NumPy. Default -1.
    #[serde(default = "last_axis")]
    pub axis: i64,
}

fn last_axis() -> i64 {
    -1
}

/// Inserts a size-1 dimension at `axis` of each sample.
pub struct ExpandDims {
    axis: i64,
}

impl FromConfig for ExpandDims {
    type Config = ExpandDimsConfig;
    fn from_config(config: ExpandDimsConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        expect_pairs(ctx, "ExpandDims")?;
        Ok(ExpandDims { axis: config.axis })
    }
}

impl ExpandDims {
    fn expand(&self, inputs: &[&Tensor], batched: bool) -> Result<Vec<Tensor>> {
        // In a batch the sample's axis k is axis k+1; negative axes count from the end.
        let axis = if batched && self.axis >= 0 {
            self.axis + 1
        } else {
            self.axis
        };
        map_each(inputs, |x| Ok(x.f_unsqueeze(axis)?))
    }
}

impl NumpyOp for ExpandDims {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.expand(inputs, false)
    }

    fn batchable(&self) -> bool {
        true
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.expand(inputs, true)
    }
}

/// `Reshape` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ReshapeConfig {
    /// The shape of each output sample: one size or a list of sizes, as in NumPy. At most one
    /// entry may be -1, standing for whatever size makes the element count match; `[]` makes
    /// a single-element sample a scalar. Required.
    pub shape: OneOrMany<i64>,
}

/// FastEstimator's `Reshape`: `np.reshape(x, shape)` on each sample.
pub struct Reshape {
    shape: Vec<i64>,
}

impl FromConfig for Reshape {
    type Config = ReshapeConfig;
    fn from_config(config: ReshapeConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        expect_pairs(ctx, "Reshape")?;
        let shape = config.shape.0;
        if let Some(bad) = shape.iter().find(|&&d| d < -1) {
            return Err(Error::config(
                "shape",
                format!("{bad} is not a size (sizes are >= 0, or -1 for the inferred one)"),
            ));
        }
        if shape.iter().filter(|&&d| d == -1).count() > 1 {
            return Err(Error::config("shape", "at most one size may be -1"));
        }
        Ok(Reshape { shape })
    }
}

impl Reshape {
    /// The target shape for a sample of `sample` shape, with -1 resolved.
    fn resolve(&self, sample: &[i64]) -> Result<Vec<i64>> {
        let numel: i64 = sample.iter().product();
        let known = self
            .shape
            .iter()
            .filter(|&&d| d != -1)
            .try_fold(1i64, |acc, &d| acc.checked_mul(d));
        let fail = || {
            Error::msg(format!(
                "cannot reshape a sample of shape {sample:?} ({numel} elements) into {:?}",
                self.shape
            ))
        };
        let known = known.ok_or_else(fail)?;
        let mut shape = self.shape.clone();
        match shape.iter_mut().find(|d| **d == -1) {
            Some(inferred) => {
                if known == 0 || numel % known != 0 {
                    return Err(fail());
                }
                *inferred = numel / known;
            }
            None if known != numel => return Err(fail()),
            None => {}
        }
        Ok(shape)
    }

    fn reshape(&self, x: &Tensor, batched: bool) -> Result<Tensor> {
        let size = x.size();
        if !batched {
            return Ok(x.f_reshape(self.resolve(&size)?)?);
        }
        let Some((&batch, sample)) = size.split_first() else {
            return Err(Error::msg(
                "a batch needs a batch dimension, got a 0-d tensor",
            ));
        };
        let mut shape = vec![batch];
        shape.extend(self.resolve(sample)?);
        Ok(x.f_reshape(shape)?)
    }
}

impl NumpyOp for Reshape {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        map_each(inputs, |x| self.reshape(x, false))
    }

    fn batchable(&self) -> bool {
        true
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        map_each(inputs, |x| self.reshape(x, true))
    }
}

/// `ChannelTranspose` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ChannelTransposeConfig {
    /// The permutation, as in `np.transpose(x, axes)`: output axis `i` is input axis
    /// `axes[i]` (negative values count from the end). Must be a permutation of the sample's
    /// axes. Default `[2, 0, 1]`: HWC to CHW.
    #[serde(default = "hwc_to_chw")]
    pub axes: Vec<i64>,
}

fn hwc_to_chw() -> Vec<i64> {
    vec![2, 0, 1]
}

/// FastEstimator's `ChannelTranspose`: `np.transpose(x, axes)` on each sample. The output is
/// laid out contiguously in the new order.
pub struct ChannelTranspose {
    /// The permutation with negative axes resolved.
    axes: Vec<i64>,
}

impl FromConfig for ChannelTranspose {
    type Config = ChannelTransposeConfig;
    fn from_config(config: ChannelTransposeConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        expect_pairs(ctx, "ChannelTranspose")?;
        let rank = config.axes.len() as i64;
        let mut seen = vec![false; config.axes.len()];
        let mut axes = Vec::with_capacity(config.axes.len());
        for &axis in &config.axes {
            let resolved = if axis < 0 { axis + rank } else { axis };
            if !(0..rank).contains(&resolved) || seen[resolved as usize] {
                return Err(Error::config(
                    "axes",
                    format!(
                        "{:?} is not a permutation of 0..{rank}: each axis must appear once",
                        config.axes
                    ),
                ));
            }
            seen[resolved as usize] = true;
            axes.push(resolved);
        }
        Ok(ChannelTranspose { axes })
    }
}

impl ChannelTranspose {
    fn transpose(&self, x: &Tensor, batched: bool) -> Result<Tensor> {
        let lead = usize::from(batched);
        if x.dim() != self.axes.len() + lead {
            let size = x.size();
            let sample = &size[lead.min(size.len())..];
            return Err(Error::msg(format!(
                "ChannelTranspose with axes {:?} needs rank-{} samples, got shape {sample:?}",
                self.axes,
                self.axes.len()
            )));
        }
        let permutation: Vec<i64> = if batched {
            std::iter::once(0)
                .chain(self.axes.iter().map(|a| a + 1))
                .collect()
        } else {
            self.axes.clone()
        };
        Ok(x.f_permute(permutation)?.f_contiguous()?)
    }
}

impl NumpyOp for ChannelTranspose {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        map_each(inputs, |x| self.transpose(x, false))
    }

    fn batchable(&self) -> bool {
        true
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        map_each(inputs, |x| self.transpose(x, true))
    }
}

#[cfg(test)]
mod tests;
