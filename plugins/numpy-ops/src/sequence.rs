//! Sequence transforms: `PadSequence`.

use fe_plugin_api::tch::{Kind, Scalar, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use serde::Deserialize;

use crate::common::{expect_pairs, is_float, map_each, real_kind};

/// `PadSequence` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct PadSequenceConfig {
    /// The length every sequence ends up with: shorter ones are padded, longer ones cut to
    /// their first `max_len` items. Required, at least 0.
    pub max_len: i64,
    /// The padding value, written in the input's own dtype; it must be representable there
    /// (an integer in range for integer inputs, 0 or 1 for bool). Default 0.
    #[serde(default)]
    pub value: f64,
    /// `true` pads after the sequence, `false` before it. Default `true`.
    #[serde(default = "yes")]
    pub append: bool,
}

fn yes() -> bool {
    true
}

/// FastEstimator's `PadSequence`: pads (or truncates) each sample along its first axis to
/// `max_len` items.
pub struct PadSequence {
    max_len: i64,
    value: f64,
    append: bool,
}

impl FromConfig for PadSequence {
    type Config = PadSequenceConfig;
    fn from_config(config: PadSequenceConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        expect_pairs(ctx, "PadSequence")?;
        if config.max_len < 0 {
            return Err(Error::config("max_len", "must be at least 0"));
        }
        Ok(PadSequence {
            max_len: config.max_len,
            value: config.value,
            append: config.append,
        })
    }
}

/// `value` as a scalar of `kind`, or an error when `kind` cannot hold it exactly.
fn fill_value(value: f64, kind: Kind) -> Result<Scalar> {
    if is_float(kind) {
        return Ok(Scalar::float(value));
    }
    // Integers the kind holds: [low, high).
    let (low, high) = match kind {
        Kind::Bool => (0.0, 2.0),
        Kind::Uint8 => (0.0, 256.0),
        Kind::Int8 => (-128.0, 128.0),
        Kind::Int16 => (-32_768.0, 32_768.0),
        Kind::Int => (-2_147_483_648.0, 2_147_483_648.0),
        Kind::Int64 => (i64::MIN as f64, -(i64::MIN as f64)),
        _ => {
            return Err(Error::msg(format!(
                "PadSequence does not support {kind:?} tensors"
            )))
        }
    };
    // NaN and infinities have a NaN fractional part, so they fail too.
    if value.fract() != 0.0 || value < low || value >= high {
        return Err(Error::msg(format!(
            "PadSequence cannot pad {kind:?} sequences with {value}: set `value` to a number \
             that type holds"
        )));
    }
    Ok(Scalar::int(value as i64))
}

impl PadSequence {
    fn pad(&self, x: &Tensor, batched: bool) -> Result<Tensor> {
        let kind = real_kind(x, "PadSequence")?;
        // Checked on every sample, not only those that need padding, so a bad `value` fails
        // the same way whatever the sequence lengths.
        let fill = fill_value(self.value, kind)?;
        let axis = usize::from(batched);
        let mut size = x.size();
        let Some(&len) = size.get(axis) else {
            return Err(Error::msg(format!(
                "PadSequence needs sequences (samples with at least one axis), got shape {:?}",
                &size[axis.min(size.len())..]
            )));
        };
        if len >= self.max_len {
            return Ok(x.f_narrow(axis as i64, 0, self.max_len)?);
        }
        size[axis] = self.max_len - len;
        let padding = Tensor::f_full(&size, fill, (kind, x.device()))?;
        let parts = if self.append {
            [x, &padding]
        } else {
            [&padding, x]
        };
        Ok(Tensor::f_cat(&parts, axis as i64)?)
    }
}

impl NumpyOp for PadSequence {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        map_each(inputs, |x| self.pad(x, false))
    }

    /// `false` although the op is deterministic and per sample: its inputs are ragged by
    /// nature, and a batch can only be formed after it has run. `forward_batch` still pads a
    /// batch of equal-length sequences (network post-processing).
    fn batchable(&self) -> bool {
        false
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        map_each(inputs, |x| self.pad(x, true))
    }
}

#[cfg(test)]
mod tests;
