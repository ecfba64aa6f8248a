//! FastEstimator's `Precision`, `Recall` and `F1Score` traces (sklearn's `precision_score`,
//! `recall_score` and `f1_score`), computed from merged confusion counts.
//!
//! Per class `c`, with `tp` the hits, `predicted` the column sum and `actual` the row sum:
//!
//! | metric    | value                             | undefined when (→ `zero_division`) |
//! |-----------|-----------------------------------|------------------------------------|
//! | precision | `tp / predicted`                  | `predicted == 0`                   |
//! | recall    | `tp / actual`                     | `actual == 0`                      |
//! | F1        | `2·tp / (actual + predicted)`     | `actual + predicted == 0`          |
//!
//! Averages follow sklearn ≥ 1.3 with its default `labels` (the classes present in the labels
//! or the predictions): `macro` is the mean over present classes, `weighted` the mean weighted
//! by support, `micro` the ratio of the summed numerators and denominators; values set to NaN
//! by `zero_division = nan` are left out of averages.

use std::marker::PhantomData;

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, Metric, Result, State, Value};
use serde::Deserialize;

use crate::classes::{default_threshold, pair};
use crate::confusion::{check_num_classes, Confusion};

#[cfg(test)]
mod tests;

/// How per-class values are combined (sklearn's `average`).
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Average {
    /// FastEstimator's behaviour: `binary` when predictions hold one value per sample, else
    /// `none`.
    #[default]
    Auto,
    /// The value of class `pos_label` alone (two classes only).
    Binary,
    /// One value per class, as a tensor `[num_classes]`.
    None,
    /// Unweighted mean over the classes present in labels or predictions.
    Macro,
    /// Computed from the counts summed over all classes (equals accuracy for single-label
    /// multiclass data).
    Micro,
    /// Mean over present classes weighted by their number of true samples.
    Weighted,
}

/// Configuration of `Precision`, `Recall` and `F1Score`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ScoreConfig {
    /// `auto` (default), `binary`, `none`, `macro`, `micro` or `weighted`.
    #[serde(default)]
    pub average: Average,
    /// Number of classes; by default `C` for predictions `[N, C]` and 2 for one value per
    /// sample. Labels must lie in `0..num_classes`.
    #[serde(default)]
    pub num_classes: Option<usize>,
    /// The class reported by `average = "binary"` (default 1).
    #[serde(default = "one")]
    pub pos_label: usize,
    /// Predictions with one value per sample are class 1 when above this (default 0.5).
    #[serde(default = "default_threshold")]
    pub threshold: f64,
    /// The value of an undefined ratio (zero denominator): 0 (default, sklearn's `"warn"`),
    /// 1, or `nan` (then left out of averages).
    #[serde(default)]
    pub zero_division: f64,
}

fn one() -> usize {
    1
}

/// One of the three scores, as a function of a class's counts.
pub trait Score: Send + 'static {
    /// `(numerator, denominator)` for a class with `tp` hits, `predicted` predictions and
    /// `actual` true samples.
    fn ratio(tp: u64, predicted: u64, actual: u64) -> (u64, u64);
}

/// Precision: `tp / predicted`.
pub struct PrecisionScore;
/// Recall: `tp / actual`.
pub struct RecallScore;
/// F1: `2·tp / (actual + predicted)`.
pub struct F1Measure;

impl Score for PrecisionScore {
    fn ratio(tp: u64, predicted: u64, _actual: u64) -> (u64, u64) {
        (tp, predicted)
    }
}

impl Score for RecallScore {
    fn ratio(tp: u64, _predicted: u64, actual: u64) -> (u64, u64) {
        (tp, actual)
    }
}

impl Score for F1Measure {
    fn ratio(tp: u64, predicted: u64, actual: u64) -> (u64, u64) {
        (2 * tp, actual + predicted)
    }
}

/// A precision, recall or F1 metric. Inputs `[y_true, y_pred]`; outputs `[score]` or
/// `[score, per_class]` (see the crate README).
pub struct ClassScore<S: Score> {
    config: ScoreConfig,
    two_outputs: bool,
    counts: Confusion,
    _score: PhantomData<S>,
}

/// FastEstimator's `Precision`.
pub type Precision = ClassScore<PrecisionScore>;
/// FastEstimator's `Recall`.
pub type Recall = ClassScore<RecallScore>;
/// FastEstimator's `F1Score`.
pub type F1Score = ClassScore<F1Measure>;

impl<S: Score> FromConfig for ClassScore<S> {
    type Config = ScoreConfig;
    fn from_config(config: ScoreConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), None)?;
        let outputs = ctx.outputs.len();
        if !(1..=2).contains(&outputs) {
            return Err(Error::config(
                "outputs",
                format!("expected 1 or 2 key(s) (score, per-class scores), got {outputs}"),
            ));
        }
        if outputs == 2 && matches!(config.average, Average::Auto | Average::None) {
            return Err(Error::config(
                "average",
                "two outputs (score, per-class scores) need average = binary, macro, micro \
                 or weighted",
            ));
        }
        let zd = config.zero_division;
        if !(zd == 0.0 || zd == 1.0 || zd.is_nan()) {
            return Err(Error::config(
                "zero_division",
                format!("must be 0, 1 or nan, got {zd}"),
            ));
        }
        check_num_classes(config.num_classes)?;
        if config.average == Average::Binary {
            check_binary(config.num_classes.unwrap_or(2), config.pos_label, true)?;
        }
        Ok(Self {
            counts: Confusion::new(config.num_classes),
            config,
            two_outputs: outputs == 2,
            _score: PhantomData,
        })
    }
}

fn check_binary(classes: usize, pos_label: usize, at_config: bool) -> Result<()> {
    let problem = if classes != 2 {
        format!("average = binary needs 2 classes, there are {classes}")
    } else if pos_label >= 2 {
        format!("pos_label {pos_label} is not a class of 0..2")
    } else {
        return Ok(());
    };
    Err(if at_config {
        Error::config("average", problem)
    } else {
        Error::msg(problem)
    })
}

impl<S: Score> ClassScore<S> {
    fn value(&self, (numerator, denominator): (u64, u64)) -> f64 {
        if denominator == 0 {
            self.config.zero_division
        } else {
            numerator as f64 / denominator as f64
        }
    }

    /// The score of every class, and the averaged score.
    fn scores(&self, counts: &Confusion) -> Result<(Vec<f64>, Option<f64>)> {
        let k = counts.k();
        let ratios: Vec<(u64, u64)> = (0..k)
            .map(|c| S::ratio(counts.hits(c), counts.predicted(c), counts.actual(c)))
            .collect();
        let average = self.resolved_average(counts);
        if counts.total() == 0 {
            let nan = (average != Average::None).then_some(f64::NAN);
            return Ok((vec![f64::NAN; k], nan));
        }
        let per_class: Vec<f64> = ratios.iter().map(|&r| self.value(r)).collect();
        let present: Vec<usize> = (0..k)
            .filter(|&c| counts.actual(c) + counts.predicted(c) > 0)
            .collect();
        let average = match average {
            Average::None | Average::Auto => None,
            Average::Binary => {
                check_binary(k, self.config.pos_label, false)?;
                Some(per_class[self.config.pos_label])
            }
            Average::Macro => Some(nan_average(present.iter().map(|&c| (per_class[c], 1.0)))),
            Average::Weighted => Some(nan_average(
                present
                    .iter()
                    .map(|&c| (per_class[c], counts.actual(c) as f64)),
            )),
            Average::Micro => {
                let (num, den) = present
                    .iter()
                    .fold((0, 0), |(n, d), &c| (n + ratios[c].0, d + ratios[c].1));
                Some(self.value((num, den)))
            }
        };
        Ok((per_class, average))
    }

    fn resolved_average(&self, counts: &Confusion) -> Average {
        match self.config.average {
            Average::Auto if counts.single_column == Some(true) => Average::Binary,
            Average::Auto => Average::None,
            other => other,
        }
    }
}

/// sklearn's `_nanaverage`: the weighted mean of the non-NaN values; the plain mean when their
/// weights sum to 0; NaN when there are none.
fn nan_average(values: impl Iterator<Item = (f64, f64)>) -> f64 {
    let kept: Vec<(f64, f64)> = values.filter(|(v, _)| !v.is_nan()).collect();
    if kept.is_empty() {
        return f64::NAN;
    }
    let weight: f64 = kept.iter().map(|(_, w)| w).sum();
    if weight == 0.0 {
        kept.iter().map(|(v, _)| v).sum::<f64>() / kept.len() as f64
    } else {
        kept.iter().map(|(v, w)| v * w).sum::<f64>() / weight
    }
}

impl<S: Score> Metric for ClassScore<S> {
    fn reset(&mut self) {
        self.counts = Confusion::new(self.config.num_classes);
    }

    fn accumulate(&mut self, inputs: &[&Tensor]) -> Result<()> {
        let (y_true, y_pred) = pair(inputs)?;
        self.counts
            .accumulate(y_true, y_pred, self.config.threshold)
    }

    fn partial(&self) -> Result<State> {
        self.counts.state()
    }

    fn reduce(&self, partials: &[State]) -> Result<Vec<Value>> {
        let counts = Confusion::merge(partials, self.config.num_classes)?;
        let (per_class, average) = self.scores(&counts)?;
        let per_class = Value::from(Tensor::from_slice(&per_class));
        Ok(match average {
            None => vec![per_class],
            Some(score) if self.two_outputs => vec![Value::Float(score), per_class],
            Some(score) => vec![Value::Float(score)],
        })
    }
}
