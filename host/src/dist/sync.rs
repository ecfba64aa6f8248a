//! The collectives training needs, shared by the parts of a run that take part in them (the
//! models' updates, the metric traces, the checkpoint writer). Every rank calls them at the same
//! points of the run in the same order — that is what keeps the ranks in step — so each method
//! here is called on every rank or on none.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fe_plugin_api::State;
use tch::{Kind, Tensor};

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

/// A process group that several parts of the run hold.
#[derive(Clone)]
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
    /// [`SharedGroup::set_contribution`]).
    contribution: Arc<AtomicU64>,
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
        }
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

    /// Weighs this rank's gradients in the averages of the coming step by `weight`: its
    /// samples × world / the step's samples over all ranks, so that the average of the
    /// weighted per-rank means is the mean over the samples the step really trained on; 0 for
    /// a rank with no data left, which still takes part in every collective (see
    /// `estimator::uneven`). 1 (every rank with a full share) changes nothing.
    pub fn set_contribution(&self, weight: f64) {
        self.contribution.store(weight.to_bits(), Ordering::Relaxed);
    }

    /// The weight [`SharedGroup::set_contribution`] set last (1 before any).
    pub fn contribution(&self) -> f64 {
        f64::from_bits(self.contribution.load(Ordering::Relaxed))
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
            let mut group = self.lock();
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
    pub fn average_during_backward<T>(
        &self,
        overlap: &mut Overlap,
        backward: impl FnOnce() -> Result<T, String>,
    ) -> Result<Vec<Tensor>, String> {
        let mut group = self.lock();
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
    pub fn any(&self, flag: bool) -> Result<bool, String> {
        Ok(self.max(&[f64::from(u8::from(flag))])?[0] > 0.0)
    }

    /// The elementwise maximum of `values` over the ranks.
    pub fn max(&self, values: &[f64]) -> Result<Vec<f64>, String> {
        self.reduce(values, ReduceOp::Max)
    }

    /// The elementwise sum of `values` over the ranks.
    pub fn sum(&self, values: &[f64]) -> Result<Vec<f64>, String> {
        self.reduce(values, ReduceOp::Sum)
    }

    fn reduce(&self, values: &[f64], op: ReduceOp) -> Result<Vec<f64>, String> {
        if values.is_empty() {
            return Ok(Vec::new());
        }
        let tensor = Tensor::from_slice(values);
        self.lock().all_reduce(std::slice::from_ref(&tensor), op)?;
        Vec::<f64>::try_from(&tensor).map_err(crate::tch_message)
    }

    /// Overwrites `tensors` on every rank with rank 0's values.
    pub fn broadcast_from_rank_zero(&self, tensors: &[Tensor]) -> Result<(), String> {
        let _guard = tch::no_grad_guard();
        self.lock().broadcast(tensors, 0)
    }

    /// Every rank's `bytes`, in rank order (lengths may differ).
    pub fn all_gather_bytes(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let mut group = self.lock();
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
    pub fn all_gather_states(&self, state: &State) -> Result<Vec<State>, String> {
        let gathered = self.all_gather_bytes(&encode_state(state)?)?;
        gathered.iter().map(|bytes| decode_state(bytes)).collect()
    }

    /// Waits for every rank; rank 0 names any that does not arrive in time.
    pub fn barrier(&self) -> Result<(), String> {
        self.lock().barrier(true)
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

/// A component state as bytes: the JSON's length (8 bytes, little-endian), the JSON, then its
/// tensors as safetensors.
pub fn encode_state(state: &State) -> Result<Vec<u8>, String> {
    let json = state.json_text().as_bytes();
    let tensors: Vec<(String, Tensor)> = state
        .tensors()
        .iter()
        .map(|(name, tensor)| Ok((name.clone(), tensor.f_to_device(tch::Device::Cpu)?)))
        .collect::<Result<_, tch::TchError>>()
        .map_err(crate::tch_message)?;
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json);
    if !tensors.is_empty() {
        out.extend(crate::system::tensors::serialize(&tensors)?);
    }
    Ok(out)
}

/// The inverse of [`encode_state`].
pub fn decode_state(bytes: &[u8]) -> Result<State, String> {
    let malformed = || "a gathered component state is malformed".to_owned();
    let (length, rest) = bytes.split_at_checked(8).ok_or_else(malformed)?;
    let length = u64::from_le_bytes(length.try_into().map_err(|_| malformed())?) as usize;
    let (json, tensors) = rest.split_at_checked(length).ok_or_else(malformed)?;
    let json = String::from_utf8(json.to_vec()).map_err(|_| malformed())?;
    let tensors = if tensors.is_empty() {
        Vec::new()
    } else {
        crate::system::tensors::deserialize(tensors)?
    };
    Ok(State::from_parts(json, tensors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_survives_encoding() {
        let state = State::from_parts(
            r#"{"correct":3}"#.to_owned(),
            vec![(
                "matrix".to_owned(),
                Tensor::from_slice(&[1i64, 2, 3, 4]).reshape([2, 2]),
            )],
        );
        let back = decode_state(&encode_state(&state).unwrap()).unwrap();
        assert_eq!(back.json_text(), r#"{"correct":3}"#);
        assert_eq!(back.tensors()[0].0, "matrix");
        assert_eq!(back.tensors()[0].1, state.tensors()[0].1);
        let empty = decode_state(&encode_state(&State::empty()).unwrap()).unwrap();
        assert!(empty.is_empty());
        assert!(decode_state(&[1, 2]).is_err());
    }
}
