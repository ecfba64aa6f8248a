//! Expected calibration error (Guo et al. 2017), binned exactly as torchmetrics'
//! `binary_calibration_error` / `multiclass_calibration_error` bin it.
//!
//! Confidences (Float32) are placed with `torch.bucketize(confidence, linspace(0, 1, n_bins + 1),
//! right=True) - 1`, the same libtorch kernels torchmetrics calls: bin `i` holds
//! `[b_i, b_{i+1})` and a confidence of exactly 1 has a bin of its own (`n_bins + 1` bins in
//! all). Per bin, `acc` is the fraction correct and `conf` the mean confidence;
//! `l1 = Σ |acc − conf| · n_bin / n`, `l2 = sqrt(Σ (acc − conf)² · n_bin / n)`,
//! `max = max |acc − conf|` over bins with samples.
//!
//! The partial state is per bin: samples, correct samples and the sum of confidences in 64.64
//! fixed point (as `Dice`), so the value is bit-for-bit the same for any split of the batches.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Metric, Result, State, Value};
use serde::{Deserialize, Serialize};

use crate::classes::{pair, true_classes};

/// One in the fixed-point sums.
const ONE: f64 = 18_446_744_073_709_551_616.0; // 2^64

/// How the per-bin gaps combine (torchmetrics' `norm`).
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Norm {
    /// Expected calibration error: gaps weighted by the bins' shares of samples.
    #[default]
    L1,
    /// Root of the share-weighted squared gaps.
    L2,
    /// Maximum calibration error: the largest gap.
    Max,
}

fn fifteen() -> usize {
    15
}

/// Configuration of `ExpectedCalibrationError`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct CalibrationConfig {
    /// Number of equal-width bins over [0, 1] (default 15, torchmetrics' default).
    #[serde(default = "fifteen")]
    pub n_bins: usize,
    /// `"l1"` (default, ECE), `"l2"` or `"max"` (MCE).
    #[serde(default)]
    pub norm: Norm,
}

/// Per-bin counts and fixed-point confidence sums.
#[derive(Serialize, Deserialize, Debug, Default)]
struct Bins {
    counts: Vec<u64>,
    correct: Vec<u64>,
    /// Sums of confidences × 2⁶⁴, as decimal text (they exceed JSON's safe integers).
    sums: Vec<String>,
}

/// Calibration error of probabilities. Inputs `[y_true, y_pred]`, output `[error]`, a float.
///
/// Predictions `[N, C]` (`C ≥ 2`): the confidence is the top probability and a sample is
/// correct when its argmax is the label (multiclass). Predictions `[N]` or `[N, 1]`: the
/// confidence is the probability of class 1 and "correct" is the label being 1 (torchmetrics'
/// binary form). Probabilities must lie in [0, 1].
pub struct CalibrationError {
    config: CalibrationConfig,
    boundaries: Tensor,
    counts: Vec<u64>,
    correct: Vec<u64>,
    sums: Vec<u128>,
}

impl FromConfig for CalibrationError {
    type Config = CalibrationConfig;
    fn from_config(config: CalibrationConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(1))?;
        if config.n_bins == 0 || config.n_bins > 1_000_000 {
            return Err(Error::config("n_bins", "must be between 1 and 1000000"));
        }
        let bins = config.n_bins + 1;
        let boundaries = Tensor::f_linspace(0.0, 1.0, bins as i64, (Kind::Float, Device::Cpu))?;
        Ok(Self {
            config,
            boundaries,
            counts: vec![0; bins],
            correct: vec![0; bins],
            sums: vec![0; bins],
        })
    }
}

/// Confidences (Float32) and correctness (0/1) of one batch, on the CPU.
fn confidences(y_true: &Tensor, y_pred: &Tensor) -> Result<(Tensor, Tensor)> {
    let size = y_pred.size();
    let y_pred = y_pred.f_to_device(Device::Cpu)?.f_to_kind(Kind::Float)?;
    if y_pred.numel() > 0 {
        let (low, high) = (
            y_pred.f_min()?.f_double_value(&[])?,
            y_pred.f_max()?.f_double_value(&[])?,
        );
        if !(low >= 0.0 && high <= 1.0) {
            return Err(Error::msg(format!(
                "ExpectedCalibrationError needs probabilities in [0, 1], found {} \
                 (apply a Sigmoid or Softmax first)",
                if low >= 0.0 { high } else { low }
            )));
        }
    }
    match size.as_slice() {
        [_, c] if *c > 1 => {
            let (top, predicted) = y_pred.f_max_dim(1, false)?;
            let truth = true_classes(y_true, predicted.numel(), Device::Cpu)?;
            Ok((top, predicted.f_eq_tensor(&truth)?))
        }
        [_] | [_, 1] => {
            let p = y_pred.f_reshape([-1])?;
            let truth = true_classes(y_true, p.numel(), Device::Cpu)?;
            Ok((p, truth.f_eq(1)?))
        }
        _ => Err(Error::msg(format!(
            "predictions must be [N], [N, 1] or [N, C], got shape {size:?}"
        ))),
    }
}

impl CalibrationError {
    /// The error from per-bin totals.
    fn error(&self, counts: &[u64], correct: &[u64], sums: &[u128]) -> f64 {
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return f64::NAN;
        }
        let gaps = (0..counts.len()).filter(|&b| counts[b] > 0).map(|b| {
            let n = counts[b] as f64;
            let gap = (correct[b] as f64 / n - sums[b] as f64 / ONE / n).abs();
            (gap, n / total as f64)
        });
        match self.config.norm {
            Norm::L1 => gaps.map(|(gap, share)| gap * share).sum(),
            Norm::L2 => gaps
                .map(|(gap, share)| gap * gap * share)
                .sum::<f64>()
                .sqrt(),
            Norm::Max => gaps.map(|(gap, _)| gap).fold(0.0, f64::max),
        }
    }
}

impl Metric for CalibrationError {
    fn reset(&mut self) {
        let bins = self.counts.len();
        self.counts = vec![0; bins];
        self.correct = vec![0; bins];
        self.sums = vec![0; bins];
    }

    fn accumulate(&mut self, inputs: &[&Tensor]) -> Result<()> {
        let (y_true, y_pred) = pair(inputs)?;
        let (confidence, correct) = confidences(y_true, y_pred)?;
        let bins = confidence
            .f_bucketize(&self.boundaries, false, true)?
            .f_sub_scalar(1)?;
        let bins = Vec::<i64>::try_from(&bins)?;
        let confidence = Vec::<f32>::try_from(&confidence)?;
        let correct = Vec::<bool>::try_from(&correct)?;
        for ((bin, conf), right) in bins.into_iter().zip(confidence).zip(correct) {
            let bin = bin as usize;
            self.counts[bin] += 1;
            self.correct[bin] += u64::from(right);
            self.sums[bin] += (f64::from(conf) * ONE).round() as u128;
        }
        Ok(())
    }

    fn partial(&self) -> Result<State> {
        State::from_json(&Bins {
            counts: self.counts.clone(),
            correct: self.correct.clone(),
            sums: self.sums.iter().map(u128::to_string).collect(),
        })
    }

    fn reduce(&self, partials: &[State]) -> Result<Vec<Value>> {
        let bins = self.counts.len();
        let (mut counts, mut correct, mut sums) =
            (vec![0u64; bins], vec![0u64; bins], vec![0u128; bins]);
        for partial in partials {
            let part: Bins = partial.json()?;
            if part.counts.len() != bins || part.correct.len() != bins || part.sums.len() != bins {
                return Err(Error::msg(format!(
                    "a partial state has {} bins, expected {bins}",
                    part.counts.len()
                )));
            }
            for b in 0..bins {
                counts[b] += part.counts[b];
                correct[b] += part.correct[b];
                sums[b] += part.sums[b]
                    .parse::<u128>()
                    .map_err(|e| Error::msg(format!("malformed calibration partial state: {e}")))?;
            }
        }
        Ok(vec![Value::Float(self.error(&counts, &correct, &sums))])
    }
}

#[cfg(test)]
mod tests;
