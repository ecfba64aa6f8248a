//! The data pipeline: datasets per mode and ds_id, per-sample NumpyOps on worker threads,
//! filtering, seeded shuffling, batching.

pub mod build;
pub mod cache;
mod collate;
pub mod datasets;
mod empty_epochs;
pub mod formats;
pub mod idx;
pub mod loader;
pub mod ops;
pub mod order;
mod pool;
pub mod profile;
pub mod source;
pub mod split;
mod stream;
mod work;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::sync::Arc;

use fe_plugin_api::Mode;
use tch::Device;

pub use loader::{EpochLoader, EpochWork};
pub use ops::{BatchSpec, Flow, OpKind, PipelineOp};
pub use source::{IdxConfig, IdxSource, PluginSource, Source};
pub use work::{Finished, Outcome};

use crate::batch::{KeyId, Keys};
use crate::error::{Error, Result};
use crate::key_path::KeyPath;
use crate::manifest::Manifest;
use crate::plugins::Registry;
use crate::schedule::{InForce, Scheduled};
use order::{Passes, Positions, Shard};

/// One dataset of one mode (a scheduled entry gives one per value).
pub struct Dataset {
    /// Mode it feeds.
    pub mode: Mode,
    /// Its id.
    pub ds_id: String,
    /// Epochs it is in force.
    pub epochs: InForce,
    /// The samples.
    pub source: Arc<dyn Source>,
    /// Key ids of the source's keys.
    pub keys: Vec<KeyId>,
}

/// The pipeline of a run.
pub struct Pipeline {
    /// Datasets, in mode then ds_id order (scheduled ones once per value).
    pub datasets: Vec<Dataset>,
    /// Ops (all of them; filtered per epoch).
    pub ops: Vec<Arc<PipelineOp>>,
    /// Samples per batch, by epoch (a `Batch` op may override it).
    pub batch_size: Scheduled<u32>,
    /// Shuffle training data.
    pub shuffle: bool,
    /// Drop incomplete last batches (a `Batch` op may override it).
    pub drop_last: bool,
    /// Worker threads.
    pub workers: usize,
    /// Batches prepared ahead, per worker.
    pub prefetch: usize,
    /// Run seed.
    pub seed: u64,
    /// `[pipeline] pin_memory`: `None` pins on CUDA.
    pub pin_memory: Option<bool>,
    /// The device batches are pinned for (set by [`Pipeline::set_device`]).
    pub pin: Option<Device>,
    /// Pad ragged text keys with zero bytes instead of failing (for showing batches).
    pub pad_text: bool,
    /// In a data-parallel run: this rank's share of every epoch (`None`: the whole stream).
    pub shard: Option<Shard>,
    /// `[pipeline] cache`: where the leading deterministic ops' outputs are kept.
    pub cache: Option<cache::Cache>,
}

/// Refuses a `pipeline.batch_size` (any epoch's) that does not divide among `world` ranks, at
/// its key: what a launcher checks once before it starts the ranks (a `Batch` op's size is
/// checked by [`Pipeline::shard`], which needs the built ops).
pub fn check_batch_divides(manifest: &Manifest, world: usize) -> Result<()> {
    for (size, epochs) in manifest.pipeline.batch_size.variants() {
        let size = *size as usize;
        if size % world != 0 {
            let first = (1..=manifest.run.epochs.max(1))
                .find(|&e| epochs.at(e))
                .unwrap_or(1);
            return Err(manifest.error_at(
                &crate::manifest::KeyPath::root("pipeline").key("batch_size"),
                indivisible(size, world, &format!("epoch {first}")),
            ));
        }
    }
    Ok(())
}

fn indivisible(size: usize, world: usize, what: &str) -> String {
    format!(
        "batch size {size} ({what}) does not divide among {world} ranks: each rank would read {:.2} samples a step; use a multiple of {world}",
        size as f64 / world as f64
    )
}

impl Pipeline {
    /// Builds datasets and ops from the manifest. Batches are not pinned until
    /// [`Pipeline::set_device`] names a CUDA device.
    pub fn build(manifest: &Manifest, registry: &Registry, keys: &mut Keys) -> Result<Self> {
        let datasets = datasets::open_all(manifest, registry)?
            .into_iter()
            .map(|(mode, ds_id, epochs, source)| Dataset {
                mode,
                ds_id,
                epochs,
                keys: keys.intern_all(source.keys()),
                source,
            })
            .collect();
        let builder = build::OpBuilder { manifest, registry };
        let mut ops = Vec::new();
        for (spec, epochs) in manifest.pipeline.ops.iter().flat_map(Scheduled::variants) {
            ops.push(Arc::new(builder.op(spec, epochs, keys)?));
        }
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let pipeline = Self {
            datasets,
            ops,
            batch_size: manifest.pipeline.batch_size.clone(),
            shuffle: manifest.pipeline.shuffle,
            drop_last: manifest.pipeline.drop_last,
            workers: manifest.pipeline.workers.unwrap_or(cores),
            prefetch: manifest.pipeline.prefetch,
            seed: manifest.run.seed,
            pin_memory: manifest.pipeline.pin_memory,
            pin: None,
            pad_text: false,
            shard: None,
            cache: manifest
                .pipeline
                .cache
                .clone()
                .and_then(|dir| cache::Cache::new(manifest, dir)),
        };
        pipeline.check_batch_ops(manifest)?;
        Ok(pipeline)
    }

    /// Tells the pipeline where batches go: on a CUDA device (and unless `pin_memory =
    /// false`), batches are collated into page-locked memory so the copy to the device runs
    /// asynchronously.
    pub fn set_device(&mut self, device: Device) {
        self.pin = (device.is_cuda() && self.pin_memory.unwrap_or(true)).then_some(device);
    }

    /// At most one `Batch` op may apply to a mode, dataset and epoch (FastEstimator's rule).
    fn check_batch_ops(&self, manifest: &Manifest) -> Result<()> {
        for epoch in manifest.signature_epochs() {
            for dataset in self.datasets.iter().filter(|d| d.epochs.at(epoch)) {
                let batch_ops: Vec<&Arc<PipelineOp>> = self
                    .active_ops(dataset.mode, epoch, &dataset.ds_id)
                    .into_iter()
                    .filter(|op| op.batch_spec().is_some())
                    .collect();
                if let [first, second, ..] = batch_ops.as_slice() {
                    let which = if dataset.ds_id.is_empty() {
                        format!("{} data", dataset.mode)
                    } else {
                        format!("{} dataset `{}`", dataset.mode, dataset.ds_id)
                    };
                    return Err(manifest.error_at(
                        &second.path,
                        format!(
                            "{} and {} both batch the {which} in epoch {epoch}; at most one Batch op may apply to a mode, ds_id and epoch",
                            first.label, second.label
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The dataset ids of `mode` with data in `epoch`, in order (empty when the mode has no
    /// data then).
    pub fn ds_ids(&self, mode: Mode, epoch: u32) -> Vec<String> {
        self.datasets
            .iter()
            .filter(|d| d.mode == mode && d.epochs.at(epoch))
            .map(|d| d.ds_id.clone())
            .collect()
    }

    /// Whether `mode` has data in any epoch of a run of `total_epochs`.
    pub fn has_mode(&self, mode: Mode, total_epochs: u32) -> bool {
        (1..=total_epochs.max(1)).any(|epoch| !self.ds_ids(mode, epoch).is_empty())
    }

    /// Samples per batch in `epoch` by `[pipeline] batch_size` (see [`Pipeline::batching`]
    /// for what a `Batch` op makes of it).
    pub fn batch_size_at(&self, epoch: u32) -> usize {
        // The manifest guarantees a batch size in every epoch.
        self.batch_size.at(epoch).copied().unwrap_or(1).max(1) as usize
    }

    /// How the data of `mode`/`epoch`/`ds_id` is batched: the `Batch` op in force there,
    /// over the `[pipeline]` settings.
    pub fn batching(&self, mode: Mode, epoch: u32, ds_id: &str) -> (usize, bool, Option<f64>) {
        let (batch_size, drop_last, pad_value) = self.whole_batching(mode, epoch, ds_id);
        let world = self.shard.map_or(1, |s| s.world.max(1));
        ((batch_size / world).max(1), drop_last, pad_value)
    }

    /// [`Pipeline::batching`] of the whole run: the global batch, which a data-parallel run
    /// divides among its ranks.
    pub fn whole_batching(
        &self,
        mode: Mode,
        epoch: u32,
        ds_id: &str,
    ) -> (usize, bool, Option<f64>) {
        let spec = self
            .active_ops(mode, epoch, ds_id)
            .iter()
            .find_map(|op| op.batch_spec())
            .unwrap_or_default();
        (
            spec.batch_size
                .unwrap_or_else(|| self.batch_size_at(epoch))
                .max(1),
            spec.drop_last.unwrap_or(self.drop_last),
            spec.pad_value,
        )
    }

    /// Makes this pipeline rank `rank` of `world`'s share of the run: `batch_size` stays the
    /// global batch (FastEstimator's, Determined's `global_batch_size`) and each rank reads
    /// `batch_size / world` samples a step. Refuses a batch size that does not divide, at the
    /// manifest key that sets it.
    pub fn shard(&mut self, rank: usize, world: usize, manifest: &Manifest) -> Result<()> {
        check_batch_divides(manifest, world)?;
        for op in &self.ops {
            if let Some(size) = op.batch_spec().and_then(|spec| spec.batch_size) {
                if size % world != 0 {
                    return Err(manifest.error_at(&op.path, indivisible(size, world, &op.label)));
                }
            }
        }
        self.shard = Some(Shard { rank, world });
        Ok(())
    }

    /// Shares this machine's cores among the `local_ranks` ranks running on it: unless the
    /// manifest sets `pipeline.workers`, each rank starts cores / ranks workers (at least one),
    /// as each gets cores / ranks libtorch threads. One per core in every rank would start
    /// ranks × cores threads, all contending for the same cores.
    pub fn share_cores(&mut self, local_ranks: usize, manifest: &Manifest) {
        if manifest.pipeline.workers.is_none() {
            self.workers = (self.workers / local_ranks.max(1)).max(1);
        }
    }

    fn dataset(&self, mode: Mode, epoch: u32, ds_id: &str) -> Option<&Dataset> {
        self.datasets
            .iter()
            .find(|d| d.mode == mode && d.ds_id == ds_id && d.epochs.at(epoch))
    }

    fn active_ops(&self, mode: Mode, epoch: u32, ds_id: &str) -> Vec<&Arc<PipelineOp>> {
        self.ops
            .iter()
            .filter(|op| op.modes.contains(mode) && op.ds_ids.matches(ds_id) && op.epochs.at(epoch))
            .collect()
    }

    /// The ops that run on data of `mode`/`epoch`/`ds_id`, in order.
    pub fn ops_at(&self, mode: Mode, epoch: u32, ds_id: &str) -> Vec<&PipelineOp> {
        self.active_ops(mode, epoch, ds_id)
            .into_iter()
            .map(|op| op.as_ref())
            .collect()
    }

    /// Keys a batch of `mode`/`epoch`/`ds_id` can hold: the dataset's and the ops' outputs,
    /// less what `Delete` removed.
    pub fn available_keys(&self, mode: Mode, epoch: u32, ds_id: &str) -> BTreeSet<KeyId> {
        let mut keys: BTreeSet<KeyId> = self
            .dataset(mode, epoch, ds_id)
            .map(|d| d.keys.iter().copied().collect())
            .unwrap_or_default();
        for op in self.active_ops(mode, epoch, ds_id) {
            keys.extend(op.outputs.iter().copied());
            for key in op.deletes() {
                keys.remove(&key);
            }
        }
        keys
    }

    /// The first op of `mode`/`epoch`/`ds_id` reading a key that neither the dataset nor an
    /// earlier op provides (or that a `Delete` removed), as `(op label, key id)`.
    pub fn first_missing_input(
        &self,
        mode: Mode,
        epoch: u32,
        ds_id: &str,
    ) -> Option<(String, KeyId, KeyPath)> {
        let mut have: BTreeSet<KeyId> = self
            .dataset(mode, epoch, ds_id)
            .map(|d| d.keys.iter().copied().collect())?;
        for op in self.active_ops(mode, epoch, ds_id) {
            if let Some(missing) = op.inputs.iter().find(|k| !have.contains(k)) {
                return Some((op.label.clone(), *missing, op.path.key("inputs")));
            }
            have.extend(op.outputs.iter().copied());
            for key in op.deletes() {
                have.remove(&key);
            }
        }
        None
    }

    /// `true` when a filter in force drops samples of `mode`/`epoch`/`ds_id` without
    /// replacement: the data then decides the epoch's length.
    pub fn shortens_epoch(&self, mode: Mode, epoch: u32, ds_id: &str) -> bool {
        self.active_ops(mode, epoch, ds_id)
            .iter()
            .any(|op| op.shortens_epochs())
    }

    /// Samples in the dataset of `mode`/`epoch`/`ds_id`.
    pub fn samples(&self, mode: Mode, epoch: u32, ds_id: &str) -> u64 {
        self.dataset(mode, epoch, ds_id)
            .map(|d| d.source.len())
            .unwrap_or(0)
    }

    /// Samples an epoch of `mode`/`ds_id` delivers (`steps` overrides): FastEstimator's
    /// `samples_to_yield`.
    fn to_yield(&self, mode: Mode, epoch: u32, ds_id: &str, steps: Option<u64>) -> u64 {
        let (batch_size, drop_last, _) = self.whole_batching(mode, epoch, ds_id);
        let batch_size = batch_size as u64;
        let whole = match steps {
            Some(steps) => steps * batch_size,
            None => {
                let n = self.samples(mode, epoch, ds_id);
                if drop_last {
                    n - n % batch_size
                } else {
                    n
                }
            }
        };
        // Training steps are collectives: every rank must run as many, so training shares are
        // equal (padded) — unless filters without replacement make the data decide the
        // length anyway: then the ranks join up at the epoch's end (`estimator::uneven`) and
        // exact shares see every sample once. Evaluation is not a collective: exact shares.
        let equal = mode == Mode::Train && !self.shortens_epoch(mode, epoch, ds_id);
        self.shard.map_or(whole, |shard| shard.share(whole, equal))
    }

    /// Wraps `positions` into this rank's share of them, in a data-parallel run.
    fn sharded(&self, positions: Positions) -> Positions {
        match self.shard {
            Some(shard) if shard.world > 1 => Positions::Sharded(Box::new(positions), shard),
            _ => positions,
        }
    }

    pub fn batches(&self, mode: Mode, epoch: u32, ds_id: &str, steps: Option<u64>) -> usize {
        if let Some(steps) = steps {
            return steps as usize;
        }
        let (batch_size, _, _) = self.batching(mode, epoch, ds_id);
        (self.to_yield(mode, epoch, ds_id, None) as usize).div_ceil(batch_size)
    }

    fn positions(&self, mode: Mode, epoch: u32, ds_id: &str) -> Passes {
        let n = self.samples(mode, epoch, ds_id);
        if self.shuffle && mode == Mode::Train {
            match self.dataset(mode, epoch, ds_id) {
                Some(d) => {
                    Passes::shuffled_as(Arc::clone(&d.source), self.seed, mode, ds_id, epoch)
                }
                None => Passes::shuffled(n, self.seed, mode, ds_id, epoch),
            }
        } else {
            Passes::in_order(n)
        }
    }

    /// Dataset indices of one epoch without filters. With `steps`, passes over the data
    /// repeat (each pass reshuffled) until `steps` batches are filled, as FastEstimator's
    /// loader does.
    pub fn order(&self, mode: Mode, epoch: u32, ds_id: &str, steps: Option<u64>) -> Vec<u64> {
        let to_yield = self.to_yield(mode, epoch, ds_id, steps);
        self.sharded(Positions::Passes(self.positions(mode, epoch, ds_id)))
            .indices(0, to_yield as usize)
    }

    /// Starts loading one epoch; `wanted` are the keys to collate.
    pub fn epoch(
        &self,
        mode: Mode,
        epoch: u32,
        ds_id: &str,
        wanted: &BTreeSet<KeyId>,
        steps: Option<u64>,
        keys: &Arc<Keys>,
    ) -> Result<EpochLoader> {
        self.epoch_from(mode, epoch, ds_id, wanted, steps, keys, 0)
    }

    /// Like [`Pipeline::epoch`], starting at batch `skip`: the batches are the same as the
    /// whole epoch's from there on (order, filtering and augmentation depend on the sample,
    /// not on where loading started), which is what resuming mid-epoch needs.
    #[allow(clippy::too_many_arguments)]
    pub fn epoch_from(
        &self,
        mode: Mode,
        epoch: u32,
        ds_id: &str,
        wanted: &BTreeSet<KeyId>,
        steps: Option<u64>,
        keys: &Arc<Keys>,
        skip: usize,
    ) -> Result<EpochLoader> {
        let positions = self.sharded(Positions::Passes(self.positions(mode, epoch, ds_id)));
        let to_yield = self.to_yield(mode, epoch, ds_id, steps);
        let batches = self.batches(mode, epoch, ds_id, steps);
        let mut work = self.work(
            mode, epoch, ds_id, wanted, positions, to_yield, batches, keys,
        )?;
        work.first_batch = skip;
        EpochLoader::start(work, self.workers, self.prefetch)
    }

    /// Starts loading the samples `order` of the dataset of `mode`/`ds_id` as up to `batches`
    /// batches.
    #[allow(clippy::too_many_arguments)]
    pub fn epoch_in_order(
        &self,
        mode: Mode,
        epoch: u32,
        ds_id: &str,
        wanted: &BTreeSet<KeyId>,
        order: Vec<u64>,
        batches: usize,
        keys: &Arc<Keys>,
    ) -> Result<EpochLoader> {
        let (batch_size, _, _) = self.batching(mode, epoch, ds_id);
        let to_yield = (order.len() as u64).min((batches * batch_size) as u64);
        let batches = batches.min((to_yield as usize).div_ceil(batch_size));
        let positions = Positions::List(Arc::new(order));
        let work = self.work(
            mode, epoch, ds_id, wanted, positions, to_yield, batches, keys,
        )?;
        EpochLoader::start(work, self.workers, self.prefetch)
    }

    /// Everything the workers need for an epoch of `mode`/`epoch`/`ds_id`.
    #[allow(clippy::too_many_arguments)]
    pub fn work(
        &self,
        mode: Mode,
        epoch: u32,
        ds_id: &str,
        wanted: &BTreeSet<KeyId>,
        positions: Positions,
        to_yield: u64,
        batches: usize,
        keys: &Arc<Keys>,
    ) -> Result<EpochWork> {
        let dataset = self.dataset(mode, epoch, ds_id).ok_or_else(|| {
            Error::Internal(format!("no {mode} dataset `{ds_id}` in epoch {epoch}"))
        })?;
        let active: Vec<Arc<PipelineOp>> = self
            .active_ops(mode, epoch, ds_id)
            .into_iter()
            .cloned()
            .collect();
        let at = active
            .iter()
            .position(|op| op.batch_spec().is_some())
            .unwrap_or(active.len());
        let batch_ops = active.get(at + 1..).map(<[_]>::to_vec).unwrap_or_default();
        let mut ops = active;
        ops.truncate(at);
        let (batch_size, drop_last, pad_value) = self.batching(mode, epoch, ds_id);
        let mut work = EpochWork {
            source: Arc::clone(&dataset.source),
            source_keys: dataset.keys.clone(),
            ops,
            batch_ops,
            wanted: wanted.iter().copied().collect(),
            positions,
            to_yield,
            batch_size,
            drop_last,
            pad_value,
            pad_text: self.pad_text,
            batches,
            first_batch: 0,
            first_op: 0,
            mode,
            epoch,
            ds_id: ds_id.to_owned(),
            seed: self.seed,
            width: keys.len(),
            keys: Arc::clone(keys),
            pin: self.pin,
        };
        if let Some(cache) = &self.cache {
            let index = self
                .datasets
                .iter()
                .position(|d| std::ptr::eq(d, dataset))
                .unwrap_or(0);
            cache.apply(&mut work, index, self.workers)?;
        }
        Ok(work)
    }
}
