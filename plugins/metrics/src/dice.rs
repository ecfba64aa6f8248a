//! FastEstimator's `Dice` trace: the mean Dice score of segmentation masks.
//!
//! Masks are channel-first, as in FastEstimator's PyTorch backend: `[N, C, ...spatial]`, with
//! values in [0, 1]. For every sample and channel FastEstimator computes
//! `2·Σ(pred·true) / (Σ pred + Σ true + 1e-8)` after binarising the prediction, skips the
//! sample for that channel when both masks are empty (max of true + max of pred < 1e-4), then
//! reports each channel's mean over its samples and the mean of those over channels.
//!
//! The partial state is, per channel, the number of scored samples and the sum of their
//! scores in 64.64 fixed point (each score rounded to a multiple of 2⁻⁶⁴, far below `f64`
//! resolution near 1). Integer sums do not depend on the order of addition, so the result is
//! bit-for-bit the same for any split of the batches over workers.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Metric, Result, State, Value};
use serde::{Deserialize, Serialize};

use crate::classes::pair;

#[cfg(test)]
mod tests;

/// FastEstimator's epsilon in the denominator.
const EPSILON: f64 = 1e-8;
/// Both masks of a channel are empty when their maxima sum below this.
const EMPTY: f64 = 1e-4;
/// One in the fixed-point sums.
const ONE: f64 = 18_446_744_073_709_551_616.0; // 2^64

/// Binarisation of the predicted mask.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(untagged)]
pub enum Threshold {
    /// A pixel belongs to the mask when its prediction is above this value.
    Above(f64),
    /// `"none"`: use the predictions as they are (soft Dice).
    Off(Off),
}

/// The word `none`.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Off {
    /// No binarisation.
    None,
}

fn half() -> Threshold {
    Threshold::Above(0.5)
}

fn yes() -> bool {
    true
}

/// Configuration of `Dice`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct DiceConfig {
    /// Predictions above this count as mask (default 0.5; 0.0 with `mask_overlap = false`
    /// picks the highest channel per pixel). `"none"` skips binarisation.
    #[serde(default = "half")]
    pub threshold: Threshold,
    /// `true` (default): a pixel may belong to several channels. `false`: only the channel
    /// with the highest prediction keeps its value, the others become 0.
    #[serde(default = "yes")]
    pub mask_overlap: bool,
    /// Channels left out of the mean (and reported as NaN per channel).
    #[serde(default)]
    pub exclude_channels: Vec<usize>,
}

/// Per-channel fixed-point sums and counts of Dice scores.
#[derive(Serialize, Deserialize, Debug, Default, Clone, PartialEq)]
struct DiceSums {
    /// Sums of scores × 2⁶⁴, as decimal text (they exceed JSON's safe integers).
    sums: Vec<String>,
    /// Scored samples per channel.
    counts: Vec<u64>,
}

/// Mean Dice score. Inputs `[y_true, y_pred]`; outputs `[dice]` or `[dice, per_channel]`.
pub struct Dice {
    config: DiceConfig,
    two_outputs: bool,
    sums: Vec<u128>,
    counts: Vec<u64>,
}

impl FromConfig for Dice {
    type Config = DiceConfig;
    fn from_config(config: DiceConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), None)?;
        let outputs = ctx.outputs.len();
        if !(1..=2).contains(&outputs) {
            return Err(Error::config(
                "outputs",
                format!("expected 1 or 2 key(s) (dice, per-channel dice), got {outputs}"),
            ));
        }
        if let Threshold::Above(t) = config.threshold {
            if !t.is_finite() {
                return Err(Error::config(
                    "threshold",
                    "must be a finite number or \"none\"",
                ));
            }
        }
        Ok(Self {
            config,
            two_outputs: outputs == 2,
            sums: Vec::new(),
            counts: Vec::new(),
        })
    }
}

/// Fails unless every value of `mask` lies in [0, 1] (NaN fails too).
fn check_unit_range(mask: &Tensor, what: &str) -> Result<()> {
    if mask.numel() == 0 {
        return Ok(());
    }
    let low = mask.f_min()?.f_double_value(&[])?;
    let high = mask.f_max()?.f_double_value(&[])?;
    if !(low >= 0.0 && high <= 1.0) {
        return Err(Error::msg(format!(
            "{what} mask values passed to Dice should range from 0 to 1, found {}",
            if low >= 0.0 { high } else { low }
        )));
    }
    Ok(())
}

impl Dice {
    /// Dice score of every (sample, channel), NaN where both masks are empty; `[N, C]`.
    fn batch_scores(&self, y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
        if y_true.size() != y_pred.size() || y_pred.dim() < 2 {
            return Err(Error::msg(format!(
                "Dice needs masks of equal shape [N, C, ...], got {:?} and {:?}",
                y_true.size(),
                y_pred.size()
            )));
        }
        if y_pred.numel() == 0 {
            let size = y_pred.size();
            return Ok(Tensor::f_zeros(
                [size[0], size[1]],
                (Kind::Double, Device::Cpu),
            )?);
        }
        check_unit_range(y_pred, "Predicted")?;
        check_unit_range(y_true, "Ground truth")?;
        let mut pred = y_pred.f_to_kind(Kind::Double)?;
        let truth = y_true.f_to_kind(Kind::Double)?.f_to_device(pred.device())?;
        if !self.config.mask_overlap {
            let pick = pred.f_amax([1], true)?;
            pred = pred.f_where_scalarother(&pred.f_ge_tensor(&pick)?, 0.0)?;
        }
        if let Threshold::Above(t) = self.config.threshold {
            pred = pred.f_gt(t)?.f_to_kind(Kind::Double)?;
        }
        let size = pred.size();
        let (n, c) = (size[0], size[1]);
        let pred = pred.f_reshape([n, c, -1])?;
        let truth = truth.f_reshape([n, c, -1])?;
        let overlap = pred
            .f_mul(&truth)?
            .f_sum_dim_intlist(2i64, false, Kind::Double)?;
        let area = pred
            .f_sum_dim_intlist(2i64, false, Kind::Double)?
            .f_add(&truth.f_sum_dim_intlist(2i64, false, Kind::Double)?)?;
        let dice = overlap
            .f_mul_scalar(2.0)?
            .f_div(&area.f_add_scalar(EPSILON)?)?;
        let present = pred
            .f_amax([2], false)?
            .f_add(&truth.f_amax([2], false)?)?
            .f_ge(EMPTY)?;
        Ok(dice.f_where_scalarother(&present, f64::NAN)?)
    }

    fn check_channels(&self, channels: usize) -> Result<()> {
        match self
            .config
            .exclude_channels
            .iter()
            .find(|&&c| c >= channels)
        {
            Some(c) => Err(Error::msg(format!(
                "exclude_channels names channel {c} but the masks have {channels} channel(s)"
            ))),
            None => Ok(()),
        }
    }
}

/// `score` (in [0, 1]) × 2⁶⁴, rounded.
fn fixed(score: f64) -> u128 {
    (score.clamp(0.0, 1.0) * ONE).round() as u128
}

impl Metric for Dice {
    fn reset(&mut self) {
        self.sums.clear();
        self.counts.clear();
    }

    fn accumulate(&mut self, inputs: &[&Tensor]) -> Result<()> {
        let (y_true, y_pred) = pair(inputs)?;
        let scores = self.batch_scores(y_true, y_pred)?;
        let channels = scores.size()[1] as usize;
        self.check_channels(channels)?;
        if self.counts.is_empty() {
            self.sums = vec![0; channels];
            self.counts = vec![0; channels];
        } else if self.counts.len() != channels {
            return Err(Error::msg(format!(
                "masks changed from {} to {channels} channel(s)",
                self.counts.len()
            )));
        }
        let flat = scores.f_reshape([-1])?.f_to_device(Device::Cpu)?;
        let flat = Vec::<f64>::try_from(&flat)?;
        for (index, score) in flat.into_iter().enumerate() {
            if !score.is_nan() {
                self.sums[index % channels] += fixed(score);
                self.counts[index % channels] += 1;
            }
        }
        Ok(())
    }

    fn partial(&self) -> Result<State> {
        State::from_json(&DiceSums {
            sums: self.sums.iter().map(u128::to_string).collect(),
            counts: self.counts.clone(),
        })
    }

    fn reduce(&self, partials: &[State]) -> Result<Vec<Value>> {
        let (mut sums, mut counts) = (Vec::<u128>::new(), Vec::<u64>::new());
        for partial in partials {
            let part: DiceSums = partial.json()?;
            if part.counts.is_empty() {
                continue;
            }
            if part.sums.len() != part.counts.len()
                || (!counts.is_empty() && counts.len() != part.counts.len())
            {
                return Err(Error::msg("workers disagree on the number of channels"));
            }
            if counts.is_empty() {
                sums = vec![0; part.counts.len()];
                counts = vec![0; part.counts.len()];
            }
            for (index, (sum, count)) in part.sums.iter().zip(part.counts).enumerate() {
                sums[index] += sum
                    .parse::<u128>()
                    .map_err(|e| Error::msg(format!("malformed Dice partial state: {e}")))?;
                counts[index] += count;
            }
        }
        if !counts.is_empty() {
            self.check_channels(counts.len())?;
        }
        let per_channel: Vec<f64> = (0..counts.len())
            .map(|c| {
                if counts[c] == 0 || self.config.exclude_channels.contains(&c) {
                    f64::NAN
                } else {
                    sums[c] as f64 / ONE / counts[c] as f64
                }
            })
            .collect();
        let kept: Vec<f64> = per_channel
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .collect();
        let dice = if kept.is_empty() {
            f64::NAN
        } else {
            kept.iter().sum::<f64>() / kept.len() as f64
        };
        let mut values = vec![Value::Float(dice)];
        if self.two_outputs {
            values.push(Value::from(Tensor::from_slice(&per_channel)));
        }
        Ok(values)
    }
}
