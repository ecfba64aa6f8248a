//! Area under the ROC curve: binary, and one-vs-rest per class averaged over classes
//! (scikit-learn's `roc_auc_score`, `multi_class="ovr"`, `average="macro"`).
//!
//! The AUC needs the whole epoch's ranking, so the partial state holds every sample: its
//! label and its scores (Float64 tensors, memory O(samples × columns)). The reduction sorts
//! the union of all partial states before counting, and counts in integers (the
//! Mann–Whitney U statistic, ties counting one half), so the value is bit-for-bit the same
//! for any split of the batches, and equal to sklearn's trapezoidal ROC area up to rounding.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Metric, Result, State, Value};
use serde::Deserialize;

use crate::classes::{pair, true_classes};

/// How per-class AUCs combine.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum AucAverage {
    /// Unweighted mean over the classes whose AUC is defined (sklearn's default).
    #[default]
    Macro,
    /// Per-class tensor `[C]`.
    None,
}

/// Configuration of `ROCAUC`.
#[derive(Deserialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct RocAucConfig {
    /// `"macro"` (default) or `"none"` (per-class tensor); ignored for binary predictions.
    #[serde(default)]
    pub average: AucAverage,
}

/// ROC AUC. Inputs `[y_true, y_pred]`; outputs `[auc]` or `[auc, per_class]`.
///
/// Predictions with one value per sample (`[N]` or `[N, 1]`) are the score of class 1
/// (probabilities or logits: only their order matters). Predictions `[N, C]`, `C ≥ 2`, give one
/// AUC per class (class `c` against the rest, scored by column `c`), averaged over classes.
pub struct RocAuc {
    config: RocAucConfig,
    two_outputs: bool,
    labels: Vec<Tensor>,
    scores: Vec<Tensor>,
}

impl FromConfig for RocAuc {
    type Config = RocAucConfig;
    fn from_config(config: RocAucConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), None)?;
        let outputs = ctx.outputs.len();
        if !(1..=2).contains(&outputs) {
            return Err(Error::config(
                "outputs",
                format!("expected 1 or 2 key(s) (auc, per-class auc), got {outputs}"),
            ));
        }
        if outputs == 2 && config.average == AucAverage::None {
            return Err(Error::config(
                "average",
                "with two output keys the first is the macro average: leave average out",
            ));
        }
        Ok(Self {
            config,
            two_outputs: outputs == 2,
            labels: Vec::new(),
            scores: Vec::new(),
        })
    }
}

/// The batch's scores as `[n, columns]` Float64 on the CPU (one column for binary).
fn score_matrix(y_pred: &Tensor) -> Result<Tensor> {
    let size = y_pred.size();
    let columns = match size.as_slice() {
        [_] => 1,
        [_, c] => *c,
        _ => {
            return Err(Error::msg(format!(
                "predictions must be [N] or [N, C], got shape {size:?}"
            )))
        }
    };
    let scores = y_pred
        .f_reshape([-1, columns])?
        .f_to_kind(Kind::Double)?
        .f_to_device(Device::Cpu)?;
    if scores.f_isnan()?.f_any()?.f_int64_value(&[])? != 0 {
        return Err(Error::msg("predictions passed to ROCAUC contain NaN"));
    }
    Ok(scores)
}

/// Twice the Mann–Whitney U of `positive` samples against the rest when ranked by `score`,
/// and the numbers of positives and negatives: `AUC = 2U / (2·P·N)`. Ties between a positive
/// and a negative count one half (the trapezoid sklearn integrates).
fn doubled_u(mut ranked: Vec<(f64, bool)>) -> (u128, u64, u64) {
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut doubled, mut negatives_below, mut positives) = (0u128, 0u64, 0u64);
    let mut start = 0;
    while start < ranked.len() {
        let mut end = start;
        let (mut p, mut n) = (0u64, 0u64);
        while end < ranked.len() && ranked[end].0 == ranked[start].0 {
            if ranked[end].1 {
                p += 1;
            } else {
                n += 1;
            }
            end += 1;
        }
        doubled += 2 * u128::from(p) * u128::from(negatives_below) + u128::from(p) * u128::from(n);
        negatives_below += n;
        positives += p;
        start = end;
    }
    (doubled, positives, negatives_below)
}

/// AUC of class `positive` scored by `scores`; NaN without positives or negatives.
fn auc(labels: &[i64], scores: &[f64], positive: i64) -> f64 {
    let ranked = labels
        .iter()
        .zip(scores)
        .map(|(&label, &score)| (score, label == positive))
        .collect();
    let (doubled, positives, negatives) = doubled_u(ranked);
    if positives == 0 || negatives == 0 {
        return f64::NAN;
    }
    doubled as f64 / (2.0 * positives as f64 * negatives as f64)
}

/// Every sample's label, the scores row by row, and the number of score columns.
type Samples = (Vec<i64>, Vec<f64>, i64);

/// Concatenates the labels and score matrices of every partial state.
fn gather(partials: &[State]) -> Result<Option<Samples>> {
    let (mut labels, mut scores) = (Vec::new(), Vec::new());
    for partial in partials {
        if let (Some(l), Some(s)) = (partial.tensor("labels"), partial.tensor("scores")) {
            labels.push(l.shallow_clone());
            scores.push(s.shallow_clone());
        }
    }
    if labels.is_empty() {
        return Ok(None);
    }
    let columns = scores[0].size()[1];
    if scores.iter().any(|s| s.size()[1] != columns) {
        return Err(Error::msg(
            "ROCAUC: batches disagree on the number of score columns",
        ));
    }
    let labels = Vec::<i64>::try_from(&Tensor::f_cat(&labels, 0)?)?;
    let scores = Vec::<f64>::try_from(&Tensor::f_cat(&scores, 0)?.f_reshape([-1])?)?;
    Ok(Some((labels, scores, columns)))
}

impl Metric for RocAuc {
    fn reset(&mut self) {
        self.labels.clear();
        self.scores.clear();
    }

    fn accumulate(&mut self, inputs: &[&Tensor]) -> Result<()> {
        let (y_true, y_pred) = pair(inputs)?;
        let scores = score_matrix(y_pred)?;
        let (rows, columns) = (scores.size()[0], scores.size()[1]);
        let labels = true_classes(y_true, rows as usize, Device::Cpu)?;
        let classes = columns.max(2);
        let outside = labels.f_lt(0)?.f_logical_or(&labels.f_ge(classes)?)?;
        if outside.f_any()?.f_int64_value(&[])? != 0 {
            return Err(Error::msg(format!(
                "ROCAUC: a label lies outside 0..{classes} ({} score column(s))",
                columns
            )));
        }
        if let Some(first) = self.scores.first() {
            if first.size()[1] != columns {
                return Err(Error::msg(format!(
                    "ROCAUC: predictions changed from {} to {columns} column(s)",
                    first.size()[1]
                )));
            }
        }
        self.labels.push(labels);
        self.scores.push(scores);
        Ok(())
    }

    fn partial(&self) -> Result<State> {
        if self.labels.is_empty() {
            return Ok(State::empty());
        }
        Ok(State::empty()
            .with_tensor("labels", Tensor::f_cat(&self.labels, 0)?)
            .with_tensor("scores", Tensor::f_cat(&self.scores, 0)?))
    }

    fn reduce(&self, partials: &[State]) -> Result<Vec<Value>> {
        let Some((labels, scores, columns)) = gather(partials)? else {
            let mut values = vec![Value::Float(f64::NAN)];
            if self.two_outputs {
                values.push(Value::from(Tensor::from_slice(&[f64::NAN; 0])));
            }
            return Ok(values);
        };
        if columns == 1 {
            let value = auc(&labels, &scores, 1);
            let mut values = vec![Value::Float(value)];
            if self.two_outputs {
                values.push(Value::from(Tensor::from_slice(&[value])));
            }
            return Ok(values);
        }
        let width = columns as usize;
        let per_class: Vec<f64> = (0..width)
            .map(|class| {
                let column: Vec<f64> = scores.iter().skip(class).step_by(width).copied().collect();
                auc(&labels, &column, class as i64)
            })
            .collect();
        let defined: Vec<f64> = per_class.iter().copied().filter(|v| !v.is_nan()).collect();
        let macro_auc = if defined.is_empty() {
            f64::NAN
        } else {
            defined.iter().sum::<f64>() / defined.len() as f64
        };
        let per_class = Value::from(Tensor::from_slice(&per_class));
        Ok(match (self.config.average, self.two_outputs) {
            (AucAverage::None, _) => vec![per_class],
            (AucAverage::Macro, false) => vec![Value::Float(macro_auc)],
            (AucAverage::Macro, true) => vec![Value::Float(macro_auc), per_class],
        })
    }
}

#[cfg(test)]
mod tests;
