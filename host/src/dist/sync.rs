//! The collectives training needs, shared by the parts of a run that take part in them (the
//! models' updates, the metric traces, the checkpoint writer). Every rank calls them at the same
//! points of the run in the same order — that is what keeps the ranks in step — so each method
//! here is called on every rank or on none.

use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fe_plugin_api::State;
use tch::{Kind, Tensor};

use super::check::{self, Collective, Fingerprint};
use super::states::{decode_state, encode_state};
use super::waits::{WaitSummary, WaitTimes};
use super::{Overlap, ProcessGroup, ReduceOp};
use crate::stop::Signal;

/// Gradients averaged over the ranks, with what the ranks agreed in the same all-reduce.
pub struct Averaged {
    /// The mean of every rank's gradients.
    pub grads: Vec<Tensor>,
    /// Mixed precision: whether the gradients overflowed on any rank (then every rank skips
    /// the step).
    pub overflow: bool,
}

/// How a run's gradient averages went: during the backward pass (overlapped with it, bucket by
/// bucket) or after it. An update that merges micro-steps (`merge_grad`), or whose model has
/// several updates in a step, is averaged after its backward pass; the `--summary` file reports
/// both counts so a run can see that its updates overlap.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct GradientAverages {
    /// Updates averaged during their backward pass.
    pub during_backward: u64,
    /// Updates averaged after it.
    pub after_backward: u64,
}

/// The running counts behind [`GradientAverages`] and the waits behind
/// [`SharedGroup::gradient_waits`], shared by every holder of the group.
#[derive(Default)]
struct AverageCounts {
    during_backward: AtomicU64,
    after_backward: AtomicU64,
    waits: Mutex<WaitTimes>,
}

/// `SharedGroup::carried`: no gradient all-reduce since the last take, or what the last one
/// agreed (no signal, SIGINT, SIGTERM).
const NOTHING_CARRIED: u8 = 0;

/// This rank's weight in the steps of one epoch whose shares differ between the ranks (see
/// [`StepWeight::set`]); 1 again once dropped. It holds the weight, not the group.
pub struct StepWeight {
    contribution: Arc<AtomicU64>,
    rank: usize,
    world: usize,
}

impl StepWeight {
    /// Weighs this rank's loss and gradients in the coming step by `weight`: its samples ×
    /// world / the step's samples over all ranks, so that the average of the weighted
    /// per-rank means is the mean over the samples the step really trained on; 0 for a rank
    /// with no data left, which still takes part in every collective (see
    /// `estimator::uneven`). 1 (every rank with a full share) changes nothing.
    pub fn set(&self, weight: f64) {
        self.contribution.store(weight.to_bits(), Ordering::Relaxed);
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many ranks train together.
    pub fn world(&self) -> usize {
        self.world
    }
}

impl Drop for StepWeight {
    fn drop(&mut self) {
        self.set(1.0);
    }
}

/// The process group and what the ranks keep about it. Not `Clone`: the start-up stages
/// hand it on to the [`super::Strategy`], its one holder for the rest of the run.
pub struct SharedGroup {
    group: Arc<Mutex<ProcessGroup>>,
    rank: usize,
    world: usize,
    /// The signal the latest gradient all-reduce agreed on, encoded (see [`NOTHING_CARRIED`]).
    carried: Arc<AtomicU8>,
    /// Updates averaged so far (see [`GradientAverages`]), and how long each waited for its
    /// averaged gradients after backward.
    averages: Arc<AverageCounts>,
    /// The weight of this rank's gradients in the current step's average, as `f64` bits (see
    /// [`StepWeight::set`]).
    contribution: Arc<AtomicU64>,
    /// Check mode: every collective is preceded by a comparison of fingerprints (see
    /// [`check`]).
    check: bool,
    /// The training step the run is at, for fingerprints and the skip hook.
    step: Arc<AtomicU64>,
    /// How many checked collectives this rank has issued.
    sequence: Arc<AtomicU64>,
    /// The test hook's step (see [`check::skip_from_env`]), until it skipped one.
    skip: Option<u64>,
    skipped: Arc<AtomicBool>,
}

impl SharedGroup {
    /// Shares `group`.
    pub fn new(group: ProcessGroup) -> Self {
        let (rank, world) = (group.rank(), group.world());
        Self {
            group: Arc::new(Mutex::new(group)),
            rank,
            world,
            carried: Arc::new(AtomicU8::new(NOTHING_CARRIED)),
            averages: Arc::default(),
            contribution: Arc::new(AtomicU64::new(1f64.to_bits())),
            check: false,
            step: Arc::default(),
            sequence: Arc::default(),
            skip: check::skip_from_env(rank),
            skipped: Arc::default(),
        }
    }

    /// Turns check mode on when any rank asks for it (`asked`): a rank checking alone would
    /// send fingerprints where the others send data. Called once, before the group is shared.
    pub fn agree_on_check(&mut self, asked: bool) -> Result<(), String> {
        let flag = Tensor::from_slice(&[f64::from(u8::from(asked))]);
        self.lock()
            .all_reduce(std::slice::from_ref(&flag), ReduceOp::Max)?;
        let agreed = Vec::<f64>::try_from(&flag).map_err(crate::tch_message)?;
        self.check = agreed.first().is_some_and(|&any| any > 0.0);
        Ok(())
    }

    /// Tells the other ranks, should this rank leave them, that it failed by itself with
    /// `message` (see [`ProcessGroup::post_failure`]).
    pub fn post_failure(&self, message: &str) {
        self.lock().post_failure(message);
    }

    /// Says this rank ended well, for a store host that lingers after its own failure (see
    /// [`ProcessGroup::have_verdict`]).
    pub fn ended_well(&self) {
        self.lock().have_verdict();
    }

    /// How many collectives check mode compared on every rank (`None`: it is off).
    pub fn checked_collectives(&self) -> Option<u64> {
        self.check.then(|| self.sequence.load(Ordering::Relaxed))
    }

    /// Records the training step the run is at (every rank at the same points), which check
    /// mode's fingerprints carry.
    pub fn at_step(&self, step: u64) {
        self.step.store(step, Ordering::Relaxed);
    }

    /// What every collective goes through first. In check mode the ranks all-gather
    /// `fingerprint()` and fail together if any differs; `Ok(false)`: the test hook skips this
    /// collective on this rank (only those `skippable`).
    fn before(
        &self,
        group: &mut ProcessGroup,
        skippable: bool,
        fingerprint: impl FnOnce() -> Fingerprint,
    ) -> Result<bool, String> {
        let step = self.step.load(Ordering::Relaxed);
        if skippable
            && self.skip.is_some_and(|at| step >= at)
            && !self.skipped.swap(true, Ordering::Relaxed)
        {
            return Ok(false);
        }
        if !self.check {
            return Ok(true);
        }
        let mut fingerprint = fingerprint();
        fingerprint.step = step;
        fingerprint.sequence = self.sequence.fetch_add(1, Ordering::Relaxed);
        let gathered = group
            .all_gather(&Tensor::from_slice(&fingerprint.encode()))?
            .f_flatten(0, -1)
            .map_err(crate::tch_message)?;
        let bytes = Vec::<u8>::try_from(&gathered).map_err(crate::tch_message)?;
        let prints = bytes
            .chunks(check::SIZE)
            .map(Fingerprint::decode)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                format!(
                    "rank {} of {}: collective mismatch: a rank sent something other than a fingerprint (does every rank run check mode?)",
                    self.rank, self.world
                )
            })?;
        check::compare(self.rank, self.world, &prints)?;
        Ok(true)
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many ranks train together.
    pub fn world(&self) -> usize {
        self.world
    }

    /// The launcher that started the ranks.
    pub fn cluster(&self) -> crate::dist::Cluster {
        // From the group, not a copy here: every trace holds a `SharedGroup`, and it stays small.
        self.lock().cluster()
    }

    /// The weight [`StepWeight::set`] set last (1 before any and outside uneven epochs).
    pub fn contribution(&self) -> f64 {
        f64::from_bits(self.contribution.load(Ordering::Relaxed))
    }

    /// A handle that sets this rank's weight for the steps of one epoch, and sets it back to 1
    /// when dropped, however the epoch ends.
    pub fn step_weight(&self) -> StepWeight {
        StepWeight {
            contribution: Arc::clone(&self.contribution),
            rank: self.rank,
            world: self.world,
        }
    }

    /// How many updates this rank's gradients were averaged for, during and after backward.
    pub fn gradient_averages(&self) -> GradientAverages {
        GradientAverages {
            during_backward: self.averages.during_backward.load(Ordering::Relaxed),
            after_backward: self.averages.after_backward.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ProcessGroup> {
        // A panic while holding the lock leaves the group usable: collectives keep no state
        // between calls on our side.
        self.group.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The mean of every rank's gradients, as DDP computes it: summed in buckets, divided by
    /// the world size. A parameter without a gradient on this rank (unused in its forward)
    /// counts as zeros, so that every rank sends the same buckets.
    ///
    /// The same all-reduce carries, in three more elements of the last bucket, this rank's
    /// `overflow` flag and the signal it received, if any: the ranks agree on both without a
    /// round trip of their own (on 2 busy cores each collective costs about a millisecond of
    /// waiting, as much as the transfer). The agreed signal waits for
    /// [`SharedGroup::take_carried_signal`].
    #[track_caller]
    pub fn average_gradients(
        &self,
        params: &[Tensor],
        grads: &[Tensor],
        overflow: bool,
    ) -> Result<Averaged, String> {
        let mut grads = grads
            .iter()
            .zip(params)
            .map(|(g, p)| {
                if g.defined() {
                    Ok(g.shallow_clone())
                } else {
                    p.f_zeros_like()
                }
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(crate::tch_message)?;
        let flags = proposals(overflow);
        // In the gradients' dtype, so the flags travel in the last gradient bucket; only
        // whether a sum is above zero is read, which any float dtype keeps.
        let (kind, device) = grads
            .last()
            .map_or((Kind::Float, tch::Device::Cpu), |g| (g.kind(), g.device()));
        let flags = Tensor::from_slice(&flags)
            .f_to_device(device)
            .and_then(|f| f.f_to_kind(kind))
            .map_err(crate::tch_message)?;
        grads.push(flags);
        {
            let site = Location::caller();
            let mut group = self.lock();
            self.before(&mut group, false, || {
                Fingerprint::new(Collective::GradientAverage, &grads, true, site)
            })?;
            let started = std::time::Instant::now();
            group.all_reduce(&grads, ReduceOp::Sum)?;
            self.waited(started.elapsed());
        }
        let flags = grads.pop().map(|f| {
            f.f_to_device(tch::Device::Cpu)
                .and_then(|f| f.f_to_kind(Kind::Float))
        });
        let flags = match flags {
            Some(Ok(flags)) => Vec::<f32>::try_from(&flags).map_err(crate::tch_message)?,
            Some(Err(e)) => return Err(crate::tch_message(e)),
            None => Vec::new(),
        };
        let [overflow, interrupt, terminate] = flags[..] else {
            return Err("the gradient all-reduce lost its flags".to_owned());
        };
        self.carry([overflow, interrupt, terminate]);
        self.averages.after_backward.fetch_add(1, Ordering::Relaxed);
        let world = self.world as f64;
        for grad in &mut grads {
            let _ = grad.f_div_scalar_(world).map_err(crate::tch_message)?;
        }
        Ok(Averaged {
            grads,
            overflow: overflow > 0.0,
        })
    }

    /// Hooks `params` (a model's trainable parameters) so that
    /// [`SharedGroup::average_during_backward`] can average their gradients while backward
    /// runs.
    pub fn overlap(&self, params: &[Tensor]) -> Result<Overlap, String> {
        Overlap::new(
            &self.lock(),
            params,
            super::overlap::FIRST_BUCKET_BYTES,
            super::overlap::BUCKET_BYTES,
        )
    }

    /// Runs `backward` (the backward pass of one update of the model `overlap` hooks) while
    /// its gradients are averaged over the ranks, bucket by bucket as they come, and returns
    /// the averages (one per parameter; zeros for any `backward` did not reach, as in
    /// [`SharedGroup::average_gradients`]). The last bucket carries the signals, as there.
    #[track_caller]
    pub fn average_during_backward<T>(
        &self,
        overlap: &mut Overlap,
        backward: impl FnOnce() -> Result<T, String>,
    ) -> Result<Vec<Tensor>, String> {
        let site = Location::caller();
        let mut group = self.lock();
        // Checked before backward starts: its buckets go out while it runs.
        self.before(&mut group, false, || {
            let (kind, sizes) = overlap.sizes();
            Fingerprint::of_sizes(
                Collective::OverlappedGradientAverage,
                kind,
                Some(sizes),
                site,
            )
        })?;
        let (grads, sums, waited) = overlap.around(&mut group, backward, proposals(false))?;
        self.waited(waited);
        self.carry(sums);
        self.averages
            .during_backward
            .fetch_add(1, Ordering::Relaxed);
        Ok(grads)
    }

    fn waited(&self, wait: std::time::Duration) {
        // A poisoned lock only means a panic elsewhere mid-record: the counts stay usable.
        self.averages
            .waits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .record(wait);
    }

    /// How long the updates so far waited for their averaged gradients once backward was
    /// done (the communication backward did not hide).
    pub fn gradient_waits(&self) -> WaitSummary {
        self.averages
            .waits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .summary()
    }

    /// Keeps the signal in the sums of [`proposals`] for [`SharedGroup::take_carried_signal`].
    fn carry(&self, [_, interrupt, terminate]: [f32; 3]) {
        let agreed = if terminate > 0.0 {
            Some(Signal::Terminate)
        } else if interrupt > 0.0 {
            Some(Signal::Interrupt)
        } else {
            None
        };
        self.carried.store(encode_signal(agreed), Ordering::Relaxed);
    }

    /// The signal the ranks agreed on in the latest gradient all-reduce since the last call
    /// (`Some(None)`: none was received), or `None` when no gradients were averaged since.
    /// Every rank runs the same collectives, so every rank gets the same answer.
    pub fn take_carried_signal(&self) -> Option<Option<Signal>> {
        match self.carried.swap(NOTHING_CARRIED, Ordering::Relaxed) {
            NOTHING_CARRIED => None,
            2 => Some(Some(Signal::Interrupt)),
            3 => Some(Some(Signal::Terminate)),
            _ => Some(None),
        }
    }

    /// Whether `flag` holds on any rank.
    #[track_caller]
    pub fn any(&self, flag: bool) -> Result<bool, String> {
        Ok(self.max(&[f64::from(u8::from(flag))])?[0] > 0.0)
    }

    /// The elementwise maximum of `values` over the ranks.
    #[track_caller]
    pub fn max(&self, values: &[f64]) -> Result<Vec<f64>, String> {
        self.reduce(values, ReduceOp::Max)
    }

    /// The elementwise sum of `values` over the ranks.
    #[track_caller]
    pub fn sum(&self, values: &[f64]) -> Result<Vec<f64>, String> {
        self.reduce(values, ReduceOp::Sum)
    }

    #[track_caller]
    fn reduce(&self, values: &[f64], op: ReduceOp) -> Result<Vec<f64>, String> {
        if values.is_empty() {
            return Ok(Vec::new());
        }
        let site = Location::caller();
        let tensor = Tensor::from_slice(values);
        let tensors = std::slice::from_ref(&tensor);
        let mut group = self.lock();
        let collective = match op {
            ReduceOp::Sum => Collective::Sum,
            ReduceOp::Max => Collective::Max,
        };
        if self.before(&mut group, true, || {
            Fingerprint::new(collective, tensors, true, site)
        })? {
            group.all_reduce(tensors, op)?;
        }
        Vec::<f64>::try_from(&tensor).map_err(crate::tch_message)
    }

    /// Overwrites `tensors` on every rank with rank 0's values.
    #[track_caller]
    pub fn broadcast_from_rank_zero(&self, tensors: &[Tensor]) -> Result<(), String> {
        let site = Location::caller();
        let _guard = tch::no_grad_guard();
        let mut group = self.lock();
        if !self.before(&mut group, true, || {
            Fingerprint::new(Collective::Broadcast, tensors, true, site)
        })? {
            return Ok(());
        }
        group.broadcast(tensors, 0)
    }

    /// Every rank's `bytes`, in rank order (lengths may differ).
    #[track_caller]
    pub fn all_gather_bytes(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let site = Location::caller();
        let mut group = self.lock();
        // The lengths may differ between ranks: only the dtype is compared.
        if !self.before(&mut group, true, || {
            Fingerprint::of_sizes(Collective::AllGather, Some(Kind::Uint8), None, site)
        })? {
            return Ok(vec![bytes.to_vec(); self.world]);
        }
        let length = Tensor::from_slice(&[bytes.len() as i64]);
        let lengths = Vec::<i64>::try_from(
            &group
                .all_gather(&length)?
                .f_flatten(0, -1)
                .map_err(crate::tch_message)?,
        )
        .map_err(crate::tch_message)?;
        let longest = lengths.iter().copied().max().unwrap_or(0).max(1);
        let padded = Tensor::zeros([longest], (Kind::Uint8, tch::Device::Cpu));
        if !bytes.is_empty() {
            padded
                .narrow(0, 0, bytes.len() as i64)
                .copy_(&Tensor::from_slice(bytes));
        }
        let gathered = group.all_gather(&padded)?;
        lengths
            .iter()
            .enumerate()
            .map(|(rank, &length)| {
                let row = gathered.f_get(rank as i64).map_err(crate::tch_message)?;
                let row = row.f_narrow(0, 0, length).map_err(crate::tch_message)?;
                Vec::<u8>::try_from(&row).map_err(crate::tch_message)
            })
            .collect()
    }

    /// Every rank's `state`, in rank order.
    #[track_caller]
    pub fn all_gather_states(&self, state: &State) -> Result<Vec<State>, String> {
        let gathered = self.all_gather_bytes(&encode_state(state)?)?;
        gathered.iter().map(|bytes| decode_state(bytes)).collect()
    }

    /// Waits for every rank; rank 0 names any that does not arrive in time.
    #[track_caller]
    pub fn barrier(&self) -> Result<(), String> {
        let site = Location::caller();
        let mut group = self.lock();
        if !self.before(&mut group, true, || {
            Fingerprint::of_sizes(Collective::Barrier, None, Some(&[]), site)
        })? {
            return Ok(());
        }
        group.barrier(true)
    }
}

/// What a rank adds to a gradient all-reduce besides its gradients: whether they overflowed,
/// and whether it received SIGINT, SIGTERM (1 or 0 each; only a sum above zero is read).
fn proposals(overflow: bool) -> [f32; 3] {
    let signal = crate::stop::received();
    [
        overflow,
        signal == Some(Signal::Interrupt),
        signal == Some(Signal::Terminate),
    ]
    .map(|flag| f32::from(u8::from(flag)))
}

fn encode_signal(signal: Option<Signal>) -> u8 {
    match signal {
        None => 1,
        Some(Signal::Interrupt) => 2,
        Some(Signal::Terminate) => 3,
    }
}
