//! How a data-parallel rank starts, in the only order that works, as types: each stage is
//! made only by the one before it, and a data-parallel [`Strategy`] only by the last.
//!
//! 1. [`shard`]: the pipeline takes this rank's share. Before the rendezvous, so that a batch
//!    size the world cannot divide ends every rank alike instead of leaving the others
//!    waiting on a store that is gone.
//! 2. [`Sharded::join`]: the process group, and whether check mode is on.
//! 3. [`Joined::checked`]: the checks every rank makes together (same manifest, same data).
//! 4. [`Restoring`]: rank 0 picks the checkpoint (see `cli::resume::agree`), every rank
//!    restores exactly it; [`Restoring::restored`] hears every rank's outcome.
//! 5. [`Restored::into_strategy`]: the replicas take rank 0's weights — after the restore,
//!    which would otherwise undo the broadcast — and the models are hooked for averaging.

use super::strategy::Strategy;
use super::{Membership, ProcessGroup, SharedGroup};
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::network::Network;
use crate::pipeline::Pipeline;

/// Stage 1 done: the pipeline reads this rank's share.
pub struct Sharded<'m> {
    membership: &'m Membership,
}

/// Shards `pipeline` for `membership`'s rank and shares this machine's cores among its
/// ranks' pipeline workers.
pub fn shard<'m>(
    pipeline: &mut Pipeline,
    membership: &'m Membership,
    manifest: &Manifest,
) -> Result<Sharded<'m>> {
    pipeline.shard(membership.rank, membership.world, manifest)?;
    pipeline.share_cores(membership.local_world, manifest);
    Ok(Sharded { membership })
}

impl Sharded<'_> {
    /// Joins the process group, waiting at most `run.process_group_timeout` for the other
    /// ranks (the same timeout bounds every collective of the run), and agrees on check mode.
    pub fn join(self, manifest: &Manifest, device: tch::Device) -> Result<Joined> {
        let cuda = match device {
            tch::Device::Cuda(index) => Some(index),
            _ => None,
        };
        let group = ProcessGroup::join(self.membership, manifest.run.process_group_timeout, cuda)
            .map_err(Error::Run)?;
        let mut group = SharedGroup::new(group);
        let check = manifest.run.check_collectives || super::check::asked_in_env();
        group.agree_on_check(check).map_err(Error::Run)?;
        Ok(Joined { group })
    }
}

/// Stage 2 done: the ranks are in one group.
pub struct Joined {
    group: SharedGroup,
}

impl Joined {
    /// Runs `checks` (collectives every rank runs alike, each refusing what would make the
    /// ranks train apart), then moves on to the restore.
    pub fn checked(self, checks: impl FnOnce(&SharedGroup) -> Result<()>) -> Result<Restoring> {
        checks(&self.group)?;
        Ok(Restoring { group: self.group })
    }
}

/// Stage 3 done: the ranks agree they run the same thing; each may now restore.
pub struct Restoring {
    group: SharedGroup,
}

impl Restoring {
    /// The group, for choosing the checkpoint together.
    pub fn group(&self) -> &SharedGroup {
        &self.group
    }

    /// Every rank's outcome of its restore (or fresh start), heard by all before any trains:
    /// a rank whose restore failed says its own error, as one process would; the others,
    /// which restored, name it rather than wait for weights it will never send.
    pub fn restored(self, outcome: Result<()>) -> Result<Restored> {
        let verdict = outcome.as_ref().err().map(ToString::to_string);
        let bytes = serde_json::to_vec(&verdict)
            .map_err(|e| Error::Internal(format!("cannot encode a restore verdict: {e}")))?;
        let all = self.group.all_gather_bytes(&bytes).map_err(Error::Run)?;
        outcome?;
        for (rank, bytes) in all.iter().enumerate() {
            let verdict: Option<String> = serde_json::from_slice(bytes).map_err(|e| {
                Error::Run(format!(
                    "rank {rank} sent an unreadable restore verdict: {e}"
                ))
            })?;
            if let Some(error) = verdict {
                return Err(Error::Run(format!(
                    "rank {} of {}: stopped because rank {rank} failed ({error})",
                    self.group.rank(),
                    self.group.world()
                )));
            }
        }
        Ok(Restored { group: self.group })
    }
}

/// Stage 4 done: every rank restored the same state, or starts fresh.
pub struct Restored {
    group: SharedGroup,
}

impl Restored {
    /// Gives every model of `network` rank 0's variables and hooks it for averaging its
    /// gradients over the ranks: from here on the ranks train as one.
    pub fn into_strategy(self, network: &mut Network) -> Result<Strategy> {
        let strategy = Strategy::data_parallel(self.group);
        network
            .join(&strategy)
            .map_err(|error| strategy.own_failure(error))?;
        Ok(strategy)
    }
}
