//! Error-correcting output codes: FastEstimator's `Hadamard` (labels → code rows; a numpy-op
//! there, `fe.op.numpyop.univariate.Hadamard`, a TensorOp on the batch here) and `UnHadamard`
//! (`fe.op.tensorop.UnHadamard`: code outputs → class probabilities by inverse L1 distance).

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

#[cfg(test)]
mod tests;

/// `Hadamard` and `UnHadamard` configuration (FastEstimator's arguments).
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct HadamardConfig {
    /// How many classes there are.
    pub n_classes: i64,
    /// The code length: a power of 2, ≥ `n_classes`. Default the smallest such.
    #[serde(default)]
    pub code_length: Option<i64>,
}

/// The first `n_classes` rows of `scipy.linalg.hadamard(code_length)` with the first column
/// made alternating (-1 on even rows), as FastEstimator builds them; row-major `f32`.
fn code_rows(n_classes: i64, code_length: i64) -> Vec<f32> {
    let mut rows = Vec::with_capacity((n_classes * code_length) as usize);
    for i in 0..n_classes {
        for j in 0..code_length {
            // Sylvester's construction, which scipy uses: H[i, j] = (-1)^popcount(i & j).
            let sign = if (i & j).count_ones() % 2 == 0 {
                1.0
            } else {
                -1.0
            };
            rows.push(if j == 0 && i % 2 == 0 { -1.0 } else { sign });
        }
    }
    rows
}

/// Validates `n_classes` and `code_length` as FastEstimator does; returns the code length.
fn code_length(config: &HadamardConfig, min_classes: i64) -> Result<i64> {
    let n = config.n_classes;
    if n < min_classes {
        return Err(Error::config(
            "n_classes",
            format!("must be at least {min_classes}, got {n}"),
        ));
    }
    // FastEstimator's default: 1 << (n_classes - 1).bit_length().
    let length = config
        .code_length
        .unwrap_or(1 << (64 - (n - 1).leading_zeros()));
    if length <= 0 || length & (length - 1) != 0 {
        return Err(Error::config(
            "code_length",
            format!("must be a positive power of 2, but got {length}"),
        ));
    }
    if length < n {
        return Err(Error::config(
            "code_length",
            format!("must be >= n_classes, but got {length} and {n}"),
        ));
    }
    Ok(length)
}

/// `[n_classes, code_length]` float32 code rows.
fn code_table(n_classes: i64, code_length: i64) -> Result<Tensor> {
    Ok(Tensor::from_slice(&code_rows(n_classes, code_length))
        .f_reshape([n_classes, code_length])?)
}

/// Inputs: one or more batches of integer class labels, `[B]` or `[B, 1]` (floating labels
/// holding whole numbers are accepted, as FastEstimator casts them); outputs: as many float32
/// `[B, code_length]` batches, each label's code row.
pub struct Hadamard {
    rows: Tensor,
    n_classes: i64,
}

impl FromConfig for Hadamard {
    type Config = HadamardConfig;
    fn from_config(config: HadamardConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        super::expect_paired_keys(ctx)?;
        let length = code_length(&config, 1)?;
        Ok(Self {
            rows: code_table(config.n_classes, length)?,
            n_classes: config.n_classes,
        })
    }
}

impl Hadamard {
    fn encode(&self, labels: &Tensor) -> Result<Tensor> {
        let size = labels.size();
        // FastEstimator squeezes every size-1 dimension of its per-sample labels; on a batch
        // only the trailing one goes, so a batch of one keeps its batch dimension.
        let labels = match size.as_slice() {
            [_] => labels.shallow_clone(),
            [_, 1] => labels.f_squeeze_dim(1)?,
            _ => {
                return Err(Error::msg(format!(
                    "Hadamard needs a batch of class labels, [B] or [B, 1], got shape {size:?}"
                )))
            }
        };
        let labels = labels.f_to_kind(Kind::Int64)?;
        if labels.numel() > 0 {
            let (low, high) = (
                labels.f_min()?.int64_value(&[]),
                labels.f_max()?.int64_value(&[]),
            );
            if low < 0 || high >= self.n_classes {
                return Err(Error::msg(format!(
                    "Hadamard labels must lie in [0, {}), got values from {low} to {high}",
                    self.n_classes
                )));
            }
        }
        let rows = self.rows.f_to_device(labels.device())?;
        Ok(rows.f_index_select(0, &labels)?)
    }
}

impl TensorOp for Hadamard {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        inputs.iter().map(|labels| self.encode(labels)).collect()
    }
}

/// Inputs: one or more `[B, code_length]` code outputs (e.g. a tanh layer); outputs: as many
/// `[B, n_classes]` class probabilities. FastEstimator's formula: `d = Σ|x - row_c|` (L1
/// distance to each class's code row), `p_c ∝ 1 / max(d_c, eps)` with
/// `eps = (code_length + 1) · (1 - 0.99999) / (0.99999 · (n_classes - 1))`.
pub struct UnHadamard {
    rows: Tensor,
    eps: f32,
    code_length: i64,
}

/// The largest probability FastEstimator aims to give a perfect code match.
const MAX_PROB: f64 = 0.99999;

impl FromConfig for UnHadamard {
    type Config = HadamardConfig;
    fn from_config(config: HadamardConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        super::expect_paired_keys(ctx)?;
        // One class would divide by n_classes - 1 = 0 (a ZeroDivisionError in FastEstimator).
        let length = code_length(&config, 2)?;
        let eps =
            (length + 1) as f64 * ((1.0 - MAX_PROB) / (MAX_PROB * (config.n_classes - 1) as f64));
        Ok(Self {
            rows: code_table(config.n_classes, length)?,
            eps: eps as f32,
            code_length: length,
        })
    }
}

impl UnHadamard {
    fn decode(&self, codes: &Tensor) -> Result<Tensor> {
        let size = codes.size();
        if size.len() != 2 || size[1] != self.code_length {
            return Err(Error::msg(format!(
                "UnHadamard needs [B, {}] code outputs, got shape {size:?}",
                self.code_length
            )));
        }
        let codes = if codes.is_floating_point() {
            codes.shallow_clone()
        } else {
            codes.f_to_kind(Kind::Float)?
        };
        // The float32 table and eps promote with the input as in FastEstimator (double stays
        // double, half becomes float32).
        let rows = self.rows.f_to_device(codes.device())?;
        let distance = codes
            .f_unsqueeze(1)?
            .f_sub(&rows)?
            .f_abs()?
            .f_sum_dim_intlist(-1, false, None::<Kind>)?;
        let eps = Tensor::from(self.eps).f_to_device(codes.device())?;
        let inverse = distance.f_maximum(&eps)?.f_reciprocal()?;
        let total = inverse.f_sum_dim_intlist(-1, true, None::<Kind>)?;
        Ok(inverse.f_div(&total)?)
    }
}

impl TensorOp for UnHadamard {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        inputs.iter().map(|codes| self.decode(codes)).collect()
    }
}
