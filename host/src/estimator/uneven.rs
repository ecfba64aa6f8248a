//! Data parallel over epochs whose length the data decides: filters without replacement
//! (FastEstimator's `replacement = false`) keep a different number of samples on each rank,
//! so one rank runs out of batches while others still train — and every training step is a
//! collective. As PyTorch's `Join` context does, the ranks agree before each step of such an
//! epoch on who still has data; a rank that has none takes part in the step anyway, running
//! its last batch again with its loss weighed 0 (the step's collectives are then the same on
//! every rank by construction, whatever the network does), and the epoch ends when no rank
//! has data. Each rank's loss is weighed by the samples it contributed, so a step's gradient
//! is the mean over the samples it really trained on.
//!
//! A rank with no data left pays a forward and a backward for nothing, only at an epoch's
//! end; batch norm statistics that pass changes are put back, and its traces see nothing.

use crate::batch::Batch;
use crate::dist::sync::StepWeight;
use crate::dist::Strategy;
use crate::error::{Error, Result};
use crate::pipeline::EpochLoader;

/// What this rank does in the next step of an epoch joined up across the ranks.
pub(super) enum Turn {
    /// Train on its own batch.
    Own(Batch),
    /// Take part with no data of its own: run this batch again, contributing nothing.
    Shadow(Batch),
    /// No rank has data left: the epoch is over everywhere.
    End,
}

/// The state of one joined epoch on this rank.
pub(super) struct Joined {
    /// This rank's weight in each step; back to 1 when the epoch's `Joined` is dropped.
    weight: StepWeight,
    /// A copy of the last batch this rank trained on, for the steps it takes part in without
    /// data.
    last: Option<Batch>,
    exhausted: bool,
}

impl Joined {
    /// Starts a joined epoch: `Some` when `loader`'s length depends on this rank's data and the
    /// run is data parallel.
    pub(super) fn start(strategy: &Strategy, loader: &EpochLoader) -> Option<Self> {
        if !loader.length_depends_on_data() {
            return None;
        }
        Some(Self {
            weight: strategy.step_weight()?,
            last: None,
            exhausted: false,
        })
    }

    /// This rank's next batch and what the ranks agreed to do with it. `fallback` gives a
    /// batch to take part with when this rank had none at all this epoch (every sample of
    /// its share filtered out, or a resume past its end).
    pub(super) fn next(
        &mut self,
        strategy: &Strategy,
        loader: &mut EpochLoader,
        fallback: impl FnOnce() -> Result<Option<Batch>>,
    ) -> Result<Turn> {
        let batch = if self.exhausted {
            None
        } else {
            match loader.next() {
                Some(batch) => Some(batch?),
                None => {
                    self.exhausted = true;
                    None
                }
            }
        };
        let samples = batch.as_ref().map_or(0, |b| b.size.max(0));
        let agreed = strategy.sum(&[f64::from(u8::from(batch.is_some())), samples as f64])?;
        let (ranks_with_data, step_samples) = (agreed[0], agreed[1]);
        if ranks_with_data == 0.0 {
            return Ok(Turn::End);
        }
        (self.weight).set(weight(samples, step_samples, self.weight.world()));
        Ok(match batch {
            Some(batch) => {
                self.last = Some(batch.shallow_clone());
                Turn::Own(batch)
            }
            None => {
                let again = match &self.last {
                    Some(last) => last.shallow_clone(),
                    None => match fallback()? {
                        Some(batch) => {
                            self.last = Some(batch.shallow_clone());
                            batch
                        }
                        None => {
                            return Err(Error::Run(format!(
                                "rank {} of {}: no sample of this epoch's share survives the filters, so this rank has no batch to take part in the other ranks' steps with",
                                self.weight.rank(),
                                self.weight.world()
                            )))
                        }
                    },
                };
                Turn::Shadow(again)
            }
        })
    }
}

/// The weight of a rank's mean loss: its share of the step's samples times the world size
/// (the average over the ranks divides by it), exactly 1 when every rank holds as many.
fn weight(samples: i64, step_samples: f64, world: usize) -> f64 {
    if step_samples <= 0.0 {
        return 0.0;
    }
    let even = step_samples / world as f64;
    if samples as f64 == even {
        1.0
    } else {
        samples as f64 * world as f64 / step_samples
    }
}

#[cfg(test)]
mod tests {
    use super::weight;

    #[test]
    fn full_shares_weigh_one_and_weights_average_to_one() {
        assert_eq!(weight(16, 32.0, 2), 1.0);
        assert_eq!(weight(0, 16.0, 2), 0.0);
        assert_eq!(weight(16, 16.0, 2), 2.0);
        let (a, b) = (weight(10, 16.0, 2), weight(6, 16.0, 2));
        assert!(((a + b) / 2.0 - 1.0).abs() < 1e-12);
        assert_eq!(weight(0, 0.0, 2), 0.0);
    }
}
