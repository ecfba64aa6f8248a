//! Confusion counts: the additive partial state shared by every classification metric here.
//!
//! Each worker counts `(true class, predicted class)` pairs; [`Confusion::merge`] adds the
//! counts of all workers. Integer addition is exact and order-free, so every metric computed
//! from the merged counts is identical for any split of the batches.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{Error, Result, State};
use serde::{Deserialize, Serialize};

use crate::classes::classes;

/// Checks a configured `num_classes`.
pub(crate) fn check_num_classes(num_classes: Option<usize>) -> Result<()> {
    match num_classes {
        Some(k) if k < 2 => Err(Error::config(
            "num_classes",
            format!("needs at least 2 classes, got {k}"),
        )),
        _ => Ok(()),
    }
}

/// Counts of `(true class, predicted class)` pairs.
#[derive(Serialize, Deserialize, Debug, Default, Clone, PartialEq)]
pub(crate) struct Confusion {
    /// Number of classes once known: configured, or implied by the first batch.
    pub classes: Option<usize>,
    /// Once a batch was seen: `true` when predictions held one value per sample.
    pub single_column: Option<bool>,
    /// Row-major `classes × classes` counts: `counts[t * classes + p]` samples of class `t`
    /// were predicted as `p`.
    pub counts: Vec<u64>,
}

impl Confusion {
    /// Empty counts, for `classes` classes when known.
    pub fn new(classes: Option<usize>) -> Self {
        Self {
            classes,
            single_column: None,
            counts: vec![0; classes.map_or(0, |k| k * k)],
        }
    }

    /// Counts one batch `[y_true, y_pred]`.
    pub fn accumulate(&mut self, y_true: &Tensor, y_pred: &Tensor, threshold: f64) -> Result<()> {
        let batch = classes(y_true, y_pred, threshold)?;
        match self.single_column {
            Some(seen) if seen != batch.single_column => {
                return Err(Error::msg(
                    "predictions switched between one value per sample and one score per class",
                ))
            }
            _ => self.single_column = Some(batch.single_column),
        }
        let k = match self.classes {
            Some(k) => k,
            None => {
                *self = Self {
                    single_column: self.single_column,
                    ..Self::new(Some(batch.implied_classes))
                };
                batch.implied_classes
            }
        };
        if !batch.single_column && batch.implied_classes != k {
            return Err(Error::msg(format!(
                "predictions have {} scores per sample but there are {k} classes",
                batch.implied_classes
            )));
        }
        if batch.truth.numel() == 0 {
            return Ok(());
        }
        let lowest = batch.truth.f_min()?.f_int64_value(&[])?;
        let highest = batch.truth.f_max()?.f_int64_value(&[])?;
        if lowest < 0 || highest >= k as i64 {
            let bad = if lowest < 0 { lowest } else { highest };
            return Err(Error::msg(format!(
                "label {bad} is outside the classes 0..{k}"
            )));
        }
        let k = k as i64;
        let cells = batch
            .truth
            .f_mul_scalar(k)?
            .f_add(&batch.predicted)?
            .f_bincount(None::<Tensor>, k * k)?
            .f_to_device(Device::Cpu)?
            .f_to_kind(Kind::Int64)?;
        let cells = Vec::<i64>::try_from(&cells)?;
        for (count, add) in self.counts.iter_mut().zip(cells) {
            *count += add as u64;
        }
        Ok(())
    }

    /// The counts as a partial state.
    pub fn state(&self) -> Result<State> {
        State::from_json(self)
    }

    /// Adds the partial states of every worker, starting from `classes` (the configured
    /// number, if any). Workers that saw no batch and knew no class count are skipped.
    pub fn merge(partials: &[State], classes: Option<usize>) -> Result<Self> {
        let mut total = Self::new(classes);
        for partial in partials {
            let other: Confusion = partial.json()?;
            total.add(&other)?;
        }
        Ok(total)
    }

    fn add(&mut self, other: &Confusion) -> Result<()> {
        let Some(k) = other.classes else {
            return Ok(());
        };
        if other.counts.len() != k * k {
            return Err(Error::msg("malformed confusion counts in a partial state"));
        }
        match self.classes {
            None => self.counts = vec![0; k * k],
            Some(mine) if mine != k => {
                return Err(Error::msg(format!(
                    "workers disagree on the number of classes ({mine} and {k})"
                )))
            }
            Some(_) => {}
        }
        self.classes = Some(k);
        match (self.single_column, other.single_column) {
            (Some(a), Some(b)) if a != b => {
                return Err(Error::msg(
                    "workers disagree on the prediction shape (one value vs one score per class)",
                ))
            }
            (None, seen) => self.single_column = seen,
            _ => {}
        }
        for (count, add) in self.counts.iter_mut().zip(&other.counts) {
            *count += add;
        }
        Ok(())
    }

    /// The number of classes, 0 when unknown.
    pub fn k(&self) -> usize {
        self.classes.unwrap_or(0)
    }

    /// Samples of class `truth` predicted as `predicted`.
    pub fn get(&self, truth: usize, predicted: usize) -> u64 {
        self.counts[truth * self.k() + predicted]
    }

    /// Samples correctly predicted as `class`.
    pub fn hits(&self, class: usize) -> u64 {
        self.get(class, class)
    }

    /// Samples whose true class is `class` (the row sum, sklearn's support).
    pub fn actual(&self, class: usize) -> u64 {
        (0..self.k()).map(|p| self.get(class, p)).sum()
    }

    /// Samples predicted as `class` (the column sum).
    pub fn predicted(&self, class: usize) -> u64 {
        (0..self.k()).map(|t| self.get(t, class)).sum()
    }

    /// All samples counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}
