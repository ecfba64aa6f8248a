//! A run as one rank of a data-parallel group: what changes when the estimator joins one.
//!
//! Everything else in the fit loop runs unchanged on every rank, in step: the same epochs,
//! the same number of training steps (each a collective in the models' updates), the same
//! hooks. Only what is said here differs per rank: the share of each epoch's data a rank
//! reads, the random state it draws from, and who writes files (rank 0).

use tch::Tensor;

use super::Estimator;
use crate::dist::startup::{Joined, Restored, Restoring};
use crate::dist::{SharedGroup, Strategy};
use crate::error::{Error, Result};
use crate::manifest::Manifest;

impl Estimator {
    /// Makes this run a rank of `joined`'s data-parallel run without a restore (evaluation):
    /// [`Estimator::join_before_restore`], an empty restore, [`Estimator::take_rank_zero_weights`].
    pub fn join(&mut self, joined: Joined, manifest: &Manifest) -> Result<()> {
        let restoring = self.join_before_restore(joined, manifest)?;
        self.take_rank_zero_weights(restoring.restored(Ok(()))?)
    }

    /// Everything of joining but the weights: the checks that the ranks run the same manifest
    /// on the same data, the run id, and each rank's own random stream. Before the restore,
    /// so that a checkpoint's per-rank random state wins over the seeding.
    pub fn join_before_restore(
        &mut self,
        joined: Joined,
        manifest: &Manifest,
    ) -> Result<Restoring> {
        // Every rank reads the same manifest, so every rank refuses alike, before any waits.
        if let Some(op) = self
            .network
            .ops
            .iter()
            .find_map(|op| op.updates_decided_by_data())
        {
            return Err(manifest.error_at(
                &op.path,
                format!(
                    "{}: a `Repeat` with `while` around an update runs as many updates as each rank's own batch decides, so the ranks of a data-parallel run would stop issuing the same gradient all-reduces; repeat a fixed number of times (`repeat = N`) or train in one process",
                    op.label
                ),
            ));
        }
        let restoring = joined.checked(|group| {
            same_run_on_every_rank(
                group,
                manifest.run.epochs,
                &self.checkpointing.manifest_text,
            )?;
            same_data_on_every_rank(group, &self.pipeline, manifest)?;
            // One run, one id: the checkpoints rank 0 writes carry it, and a resume checks it.
            let ids = group
                .all_gather_bytes(self.checkpointing.run_id.as_bytes())
                .map_err(Error::Run)?;
            if let Some(first) = ids.first() {
                self.checkpointing.run_id = String::from_utf8_lossy(first).into_owned();
            }
            Ok(())
        })?;
        let rank = restoring.group().rank();
        for trace in &mut self.traces {
            trace.join(rank);
        }
        // Each rank draws its own random numbers (dropout masks differ per rank, as under
        // DDP), reproducibly: rank r's stream is seeded from the run seed and r.
        if rank != 0 {
            tch::manual_seed(crate::rng::mix(manifest.run.seed, rank as u64) as i64);
        }
        Ok(restoring)
    }

    /// The last start-up stage: every model takes rank 0's variables and from now on
    /// averages its gradients over the ranks. After any restore (which `restored` proves), so
    /// that whatever a rank restored, the replicas start from one set of weights.
    pub fn take_rank_zero_weights(&mut self, restored: Restored) -> Result<()> {
        self.strategy = restored.into_strategy(&mut self.network)?;
        Ok(())
    }
}

/// Refuses ranks started with different manifests, overrides or `--epochs` (a launch script
/// that passes a flag to one rank only): they would train different models under one name, or
/// wait forever for steps the others never take. Every rank sees every rank's manifest, so
/// all of them reach the same verdict and stop together, naming the first rank that differs
/// from rank 0 and how.
fn same_run_on_every_rank(group: &SharedGroup, epochs: u32, manifest_text: &str) -> Result<()> {
    let mine = format!("{epochs}\n{manifest_text}");
    let all = group
        .all_gather_bytes(mine.as_bytes())
        .map_err(Error::Run)?;
    let split = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes).into_owned();
        match text.split_once('\n') {
            Some((epochs, manifest)) => (epochs.to_owned(), manifest.to_owned()),
            None => (text, String::new()),
        }
    };
    let Some((first_epochs, first)) = all.first().map(|bytes| split(bytes)) else {
        return Ok(());
    };
    for (rank, bytes) in all.iter().enumerate().skip(1) {
        let (epochs, text) = split(bytes);
        let differences = crate::checkpoint::compat::manifest_differences(&first, &text, None)
            .map_err(Error::Usage)?;
        let mut named = differences.incompatible;
        named.extend(differences.compatible);
        if epochs != first_epochs {
            named.push(format!("epochs: {first_epochs} -> {epochs}"));
        }
        if !named.is_empty() {
            return Err(Error::Usage(format!(
                "rank {rank} was started with another manifest than rank 0 (every rank must run the same manifest, overrides and --epochs): {}",
                named.join("; ")
            )));
        }
    }
    Ok(())
}

/// Refuses ranks whose datasets hold different numbers of samples: the same manifest reading
/// other files (a directory that is not really shared, a copy out of date on one machine).
/// Their shards would differ in length, so their collectives would stop matching mid-epoch, and
/// metrics would mix two evaluation sets.
fn same_data_on_every_rank(
    group: &SharedGroup,
    pipeline: &crate::pipeline::Pipeline,
    manifest: &Manifest,
) -> Result<()> {
    let sizes: Vec<u64> = pipeline.datasets.iter().map(|d| d.source.len()).collect();
    let mine: Vec<u8> = sizes.iter().flat_map(|n| n.to_le_bytes()).collect();
    let all = group.all_gather_bytes(&mine).map_err(Error::Run)?;
    let Some(first) = all.first() else {
        return Ok(());
    };
    let Some((rank, theirs)) = all.iter().enumerate().find(|(_, bytes)| *bytes != first) else {
        return Ok(());
    };
    let counts = |bytes: &[u8]| -> Vec<u64> {
        bytes
            .chunks_exact(8)
            .map(|chunk| u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])))
            .collect()
    };
    let (zero, other) = (counts(first), counts(theirs));
    let differing: Vec<String> = pipeline
        .datasets
        .iter()
        .zip(zero.iter().zip(&other))
        .filter(|(_, (a, b))| a != b)
        .map(|(dataset, (a, b))| {
            let name = match dataset.ds_id.as_str() {
                "" => dataset.mode.to_string(),
                ds_id => format!("{} (ds_id {ds_id})", dataset.mode),
            };
            format!("{name}: {a} samples on rank 0, {b} on rank {rank}")
        })
        .collect();
    Err(Error::Data {
        path: manifest.file.clone(),
        message: format!(
            "rank {rank} reads other data than rank 0 through the same manifest (every rank must see the same files; is the data directory shared, and the same version everywhere?): {}",
            differing.join("; ")
        ),
    })
}

/// The CPU random state of every rank, for a checkpoint: `cpu` is rank 0's (what a single
/// process resumes from) and `rank<r>/cpu` each rank's. Called on every rank (a collective).
pub(super) fn gather_generators(
    strategy: &Strategy,
    own: &Tensor,
    own_cuda: Option<&Tensor>,
) -> Result<Vec<(String, Tensor)>> {
    let gather = |state: &Tensor| {
        let bytes = Vec::<u8>::try_from(state).map_err(|e| Error::Run(crate::tch_message(e)))?;
        strategy.all_gather_bytes(&bytes)
    };
    let all = gather(own)?;
    let mut out = Vec::with_capacity(2 * all.len() + 1);
    for (rank, state) in all.iter().enumerate() {
        let tensor = Tensor::from_slice(state);
        if rank == 0 {
            out.push(("cpu".to_owned(), tensor.shallow_clone()));
        }
        out.push((format!("rank{rank}/cpu"), tensor));
    }
    // Every rank of a run is on the same kind of device, so all of them take part or none.
    if let Some(cuda) = own_cuda {
        for (rank, state) in gather(cuda)?.iter().enumerate() {
            out.push((format!("rank{rank}/cuda"), Tensor::from_slice(state)));
        }
    }
    Ok(out)
}

/// The saved CUDA random state rank `rank` continues on its GPU, with its name: its own
/// (`rank<r>/cuda`, data parallel), else for rank 0 the one a single process saved
/// (`cuda:<index>`); a rank the checkpoint did not have keeps its seeded stream, as on the CPU.
pub(super) fn this_ranks_cuda_generator(
    saved: &[(String, Tensor)],
    rank: usize,
) -> Option<(&str, &Tensor)> {
    let own = format!("rank{rank}/cuda");
    let entry = match saved.iter().find(|(n, _)| *n == own) {
        Some(entry) => Some(entry),
        None if rank == 0 => saved.iter().find(|(n, _)| n.starts_with("cuda:")),
        None => None,
    };
    entry.map(|(n, t)| (n.as_str(), t))
}

/// Which saved CPU random state rank `rank` resumes from: its own when the checkpoint has one
/// (the same world size, or a larger one), rank 0's `cpu` for rank 0, and none for a rank the
/// checkpoint did not have (it keeps the stream it was seeded with: not exact, documented).
pub(super) fn this_ranks_generator(saved: &[(String, Tensor)], rank: usize) -> Option<&Tensor> {
    let own = format!("rank{rank}/cpu");
    let find = |name: &str| saved.iter().find(|(n, _)| n == name).map(|(_, t)| t);
    find(&own).or_else(|| (rank == 0).then(|| find("cpu")).flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rank_resumes_its_own_random_state() {
        let state = |v: u8| Tensor::from_slice(&[v]);
        let two_ranks = vec![
            ("cpu".to_owned(), state(0)),
            ("rank0/cpu".to_owned(), state(0)),
            ("rank1/cpu".to_owned(), state(1)),
        ];
        let value = |t: Option<&Tensor>| t.map(|t| t.int64_value(&[0]));
        assert_eq!(value(this_ranks_generator(&two_ranks, 1)), Some(1));
        assert_eq!(value(this_ranks_generator(&two_ranks, 0)), Some(0));
        assert_eq!(value(this_ranks_generator(&two_ranks, 2)), None);
        let one_process = vec![("cpu".to_owned(), state(7))];
        assert_eq!(value(this_ranks_generator(&one_process, 0)), Some(7));
        assert_eq!(value(this_ranks_generator(&one_process, 1)), None);
    }

    #[test]
    fn each_rank_resumes_its_own_gpus_random_state() {
        let state = |v: u8| Tensor::from_slice(&[v]);
        let two_ranks = vec![
            ("cpu".to_owned(), state(0)),
            ("rank0/cuda".to_owned(), state(10)),
            ("rank1/cuda".to_owned(), state(11)),
            ("cuda:0".to_owned(), state(10)),
        ];
        let found = |saved, rank| {
            this_ranks_cuda_generator(saved, rank).map(|(n, t)| (n.to_owned(), t.int64_value(&[0])))
        };
        assert_eq!(found(&two_ranks, 1), Some(("rank1/cuda".to_owned(), 11)));
        assert_eq!(found(&two_ranks, 0), Some(("rank0/cuda".to_owned(), 10)));
        assert_eq!(found(&two_ranks, 2), None);
        // A single process's state, written on cuda:3: rank 0 continues it on its own GPU.
        let one_process = vec![
            ("cpu".to_owned(), state(0)),
            ("cuda:3".to_owned(), state(7)),
        ];
        assert_eq!(found(&one_process, 0), Some(("cuda:3".to_owned(), 7)));
        assert_eq!(found(&one_process, 1), None);
    }
}
