//! How this run's processes train together — the one owner of the process group, rank and
//! world (Lightning's `Strategy`): the estimator holds it and every collective goes through it.
//! A single process uses the same interface; each method then does what a group of one would
//! (a gather returns its own value, a broadcast changes nothing), so the training step has no
//! "is there a group?" branch of its own.
//!
//! A data-parallel strategy is only made at the end of the start-up sequence
//! [`super::startup`] enforces (shard → join → restore → take rank 0's weights), so that no
//! code can train on a group whose replicas were never made equal.

use fe_plugin_api::State;
use tch::Tensor;

use super::sync::{Averaged, SharedGroup, StepWeight};
use super::waits::WaitSummary;
use super::{Cluster, Overlap};
use crate::error::Error;
use crate::stop::Signal;

/// One process, or one rank of a data-parallel group.
pub struct Strategy {
    group: Option<SharedGroup>,
}

impl Strategy {
    /// A run of one process.
    pub fn single() -> Self {
        Self { group: None }
    }

    /// Rank `group.rank()` of a data-parallel run (see [`super::startup`]).
    pub(super) fn data_parallel(group: SharedGroup) -> Self {
        Self { group: Some(group) }
    }

    /// This process's rank (0 when it trains alone).
    pub fn rank(&self) -> usize {
        self.group.as_ref().map_or(0, SharedGroup::rank)
    }

    /// How many processes train together (1 when alone).
    pub fn world(&self) -> usize {
        self.group.as_ref().map_or(1, SharedGroup::world)
    }

    /// Whether other processes train with this one.
    pub fn is_data_parallel(&self) -> bool {
        self.group.is_some()
    }

    /// Whether this process writes the run's outputs (logs, plots, saved models,
    /// checkpoints): rank 0 does, the others train in step with it and write nothing.
    pub fn writes_outputs(&self) -> bool {
        self.rank() == 0
    }

    /// The launcher that placed the ranks (`None` alone).
    pub fn cluster(&self) -> Option<Cluster> {
        self.group.as_ref().map(SharedGroup::cluster)
    }

    /// Records the training step the run is at, which check mode's fingerprints carry.
    pub fn at_step(&self, step: u64) {
        if let Some(group) = &self.group {
            group.at_step(step);
        }
    }

    /// The weight of this rank's loss and gradients in the current step's average (see
    /// [`StepWeight::set`]; always 1 alone).
    pub fn contribution(&self) -> f64 {
        self.group.as_ref().map_or(1.0, SharedGroup::contribution)
    }

    /// A handle on this rank's weight for an epoch whose shares differ between the ranks
    /// (see `estimator::uneven`); `None` alone, where every step weighs 1.
    pub fn step_weight(&self) -> Option<StepWeight> {
        self.group.as_ref().map(SharedGroup::step_weight)
    }

    /// `grads` averaged over the ranks, with the overflow any rank saw (alone: as they are).
    #[track_caller]
    pub fn average_gradients(
        &self,
        params: &[Tensor],
        grads: &[Tensor],
        overflow: bool,
    ) -> Result<Averaged, String> {
        match &self.group {
            Some(group) => group.average_gradients(params, grads, overflow),
            None => Ok(Averaged {
                grads: grads.iter().map(Tensor::shallow_clone).collect(),
                overflow,
            }),
        }
    }

    /// Hooks a model's trainable `params` for averaging during its backward pass (`None`
    /// alone: there is nothing to average).
    pub fn hook(&self, params: &[Tensor]) -> Result<Option<Overlap>, String> {
        self.group
            .as_ref()
            .map(|group| group.overlap(params))
            .transpose()
    }

    /// Runs `backward` while the gradients of the parameters `hooked` holds are averaged over
    /// the ranks (see [`SharedGroup::average_during_backward`]); `None` when there is no
    /// group, and then `backward` did not run.
    #[track_caller]
    pub fn average_during_backward<T>(
        &self,
        hooked: &mut Overlap,
        backward: impl FnOnce() -> Result<T, String>,
    ) -> Option<Result<Vec<Tensor>, String>> {
        let group = self.group.as_ref()?;
        Some(group.average_during_backward(hooked, backward))
    }

    /// The signal the ranks agreed on in the latest gradient all-reduce (see
    /// [`SharedGroup::take_carried_signal`]); `None` alone, or when nothing was averaged.
    pub fn take_carried_signal(&self) -> Option<Option<Signal>> {
        self.group.as_ref()?.take_carried_signal()
    }

    /// Whether `flag` holds on any rank.
    #[track_caller]
    pub fn any(&self, flag: bool) -> Result<bool, Error> {
        match &self.group {
            Some(group) => group.any(flag).map_err(Error::Run),
            None => Ok(flag),
        }
    }

    /// The elementwise maximum of `values` over the ranks.
    #[track_caller]
    pub fn max(&self, values: &[f64]) -> Result<Vec<f64>, Error> {
        match &self.group {
            Some(group) => group.max(values).map_err(Error::Run),
            None => Ok(values.to_vec()),
        }
    }

    /// The elementwise sum of `values` over the ranks.
    #[track_caller]
    pub fn sum(&self, values: &[f64]) -> Result<Vec<f64>, Error> {
        match &self.group {
            Some(group) => group.sum(values).map_err(Error::Run),
            None => Ok(values.to_vec()),
        }
    }

    /// Overwrites `tensors` with rank 0's values.
    #[track_caller]
    pub fn broadcast_from_rank_zero(&self, tensors: &[Tensor]) -> Result<(), Error> {
        match &self.group {
            Some(group) => group.broadcast_from_rank_zero(tensors).map_err(Error::Run),
            None => Ok(()),
        }
    }

    /// Every rank's `bytes`, in rank order.
    #[track_caller]
    pub fn all_gather_bytes(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
        match &self.group {
            Some(group) => group.all_gather_bytes(bytes).map_err(Error::Run),
            None => Ok(vec![bytes.to_vec()]),
        }
    }

    /// Every rank's `state`, in rank order.
    #[track_caller]
    pub fn gather_states(&self, state: State) -> Result<Vec<State>, String> {
        match &self.group {
            Some(group) => group.all_gather_states(&state),
            None => Ok(vec![state]),
        }
    }

    /// The partial states a metric reduces: this process's (`partial`, `None` when it
    /// accumulated nothing) alone, or every rank's that is not empty.
    #[track_caller]
    pub fn gather_partials(&self, partial: Option<State>) -> Result<Vec<State>, String> {
        match &self.group {
            Some(group) => {
                let live = partial.unwrap_or_else(State::empty);
                let gathered = group.all_gather_states(&live)?;
                Ok(gathered.into_iter().filter(|s| !s.is_empty()).collect())
            }
            None => Ok(partial.into_iter().collect()),
        }
    }

    /// Waits for every rank.
    #[track_caller]
    pub fn barrier(&self) -> Result<(), Error> {
        match &self.group {
            Some(group) => group.barrier().map_err(Error::Run),
            None => Ok(()),
        }
    }

    /// A failure of this process, said as its own and left for the other ranks to name when
    /// it is its own; a failure of the ranks together (a lost rank, a collective mismatch) and
    /// a stop pass as they are. Alone, every error passes as it is.
    pub fn own_failure(&self, error: Error) -> Error {
        match &self.group {
            Some(group) => own_failure(group, error),
            None => error,
        }
    }

    /// Says this rank ended well, for a store host that lingers after its own failure.
    pub fn ended_well(&self) {
        if let Some(group) = &self.group {
            group.ended_well();
        }
    }

    /// What the `--summary` file says of the ranks (`None` alone).
    pub fn summary(&self) -> Option<serde_json::Value> {
        let group = self.group.as_ref()?;
        Some(serde_json::json!({
            "rank": group.rank(),
            "world": group.world(),
            "gradient_averages": group.gradient_averages(),
            "gradient_waits": group.gradient_waits(),
            "checked_collectives": group.checked_collectives(),
        }))
    }

    /// How long the updates waited for their averaged gradients once backward was done
    /// (`None` alone).
    pub fn gradient_waits(&self) -> Option<WaitSummary> {
        self.group.as_ref().map(SharedGroup::gradient_waits)
    }
}

/// See [`Strategy::own_failure`].
fn own_failure(group: &SharedGroup, error: Error) -> Error {
    match error {
        Error::Stopped { .. }
        | Error::SmokeStopped { .. }
        | Error::RankFailed { .. }
        | Error::OnRank { .. } => error,
        _ if super::is_collective_failure(&error.to_string()) => error,
        _ => {
            group.post_failure(&error.to_string());
            Error::OnRank {
                rank: group.rank(),
                world: group.world(),
                error: Box::new(error),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alone_every_collective_is_the_identity_of_a_group_of_one() {
        let alone = Strategy::single();
        assert_eq!((alone.rank(), alone.world()), (0, 1));
        assert!(alone.writes_outputs() && !alone.is_data_parallel());
        assert_eq!(alone.sum(&[1.5, 2.0]).ok(), Some(vec![1.5, 2.0]));
        assert_eq!(alone.max(&[3.0]).ok(), Some(vec![3.0]));
        assert_eq!(alone.any(true).ok(), Some(true));
        assert_eq!(
            alone.all_gather_bytes(b"mine").ok(),
            Some(vec![b"mine".to_vec()])
        );
        assert_eq!(alone.contribution(), 1.0);
        assert!(
            alone.step_weight().is_none(),
            "a process alone always counts fully"
        );
        assert!(alone.take_carried_signal().is_none());
        let grads = [Tensor::from_slice(&[1.0f32, 2.0])];
        let averaged = alone
            .average_gradients(&grads, &grads, true)
            .map_err(|e| e.to_string());
        let averaged = averaged.as_ref().ok();
        assert_eq!(averaged.map(|a| a.overflow), Some(true));
        assert_eq!(
            averaged.map(|a| Vec::<f32>::try_from(&a.grads[0]).ok()),
            Some(Some(vec![1.0, 2.0]))
        );
        assert!(alone.hook(&grads).ok().flatten().is_none());
        assert!(alone.summary().is_none());
        let error = alone.own_failure(Error::Run("boom".to_owned()));
        assert_eq!(error.to_string(), Error::Run("boom".to_owned()).to_string());
    }

    #[test]
    fn alone_a_metric_reduces_its_own_partial_even_an_empty_one() {
        let alone = Strategy::single();
        let partials = alone.gather_partials(Some(State::empty()));
        assert_eq!(partials.map(|p| p.len()).ok(), Some(1));
        let partials = alone.gather_partials(None);
        assert_eq!(partials.map(|p| p.len()).ok(), Some(0));
    }
}
