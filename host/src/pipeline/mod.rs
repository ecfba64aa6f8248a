//! The data pipeline: datasets per mode and ds_id, per-sample NumpyOps on worker threads,
//! seeded shuffling, batching.

pub mod formats;
pub mod idx;
pub mod loader;
pub mod source;

use std::collections::BTreeSet;
use std::sync::Arc;

use fe_plugin_api::{ComponentKind, DeviceSpec, Mode};
use rand_chacha::rand_core::{RngCore, SeedableRng};

pub use loader::{EpochLoader, EpochWork};
pub use source::{IdxConfig, IdxSource, PluginSource, Source};

use crate::error::{Error, Result};
use crate::manifest::{DatasetConfig, Manifest};
use crate::network::{KeyId, Keys};
use crate::plugins::create::{creation_error, unknown_component, Creation};
use crate::plugins::handles::NumpyOpHandle;
use crate::plugins::Registry;
use crate::schedule::{DsFilter, InForce, ModeFilter, Scheduled};

/// A per-sample op of the pipeline.
pub struct PipelineOp {
    /// `Name (pipeline.ops[i])`.
    pub label: String,
    /// Keys read.
    pub inputs: Vec<KeyId>,
    /// Keys written.
    pub outputs: Vec<KeyId>,
    /// Modes it runs in.
    pub modes: ModeFilter,
    /// Dataset ids it runs for.
    pub ds_ids: DsFilter,
    /// Epochs it is in force (scheduled ops).
    pub epochs: InForce,
    /// The plugin op.
    pub handle: NumpyOpHandle,
}

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
    /// Per-sample ops (all of them; filtered per epoch).
    pub ops: Vec<Arc<PipelineOp>>,
    /// Samples per batch, by epoch.
    pub batch_size: Scheduled<u32>,
    /// Shuffle training data.
    pub shuffle: bool,
    /// Drop incomplete last batches.
    pub drop_last: bool,
    /// Worker threads.
    pub workers: usize,
    /// Batches prepared ahead, per worker.
    pub prefetch: usize,
    /// Run seed.
    pub seed: u64,
}

impl Pipeline {
    /// Builds datasets and ops from the manifest.
    pub fn build(manifest: &Manifest, registry: &Registry, keys: &mut Keys) -> Result<Self> {
        let mut datasets = Vec::new();
        for entry in &manifest.pipeline.data {
            for (config, epochs) in entry.datasets.variants() {
                let source = open_dataset(manifest, registry, config)?;
                if source.is_empty() {
                    return Err(manifest.error_at(
                        &config.path,
                        format!("the {} dataset has no samples", entry.mode),
                    ));
                }
                let key_ids = keys.intern_all(source.keys());
                datasets.push(Dataset {
                    mode: entry.mode,
                    ds_id: entry.ds_id.clone(),
                    epochs,
                    source,
                    keys: key_ids,
                });
            }
        }
        let mut ops = Vec::new();
        for (spec, epochs) in manifest.pipeline.ops.iter().flat_map(Scheduled::variants) {
            let Some(entry) = registry.get(ComponentKind::NumpyOp, &spec.name) else {
                return Err(unknown_component(
                    manifest,
                    registry,
                    &spec.path.key("op"),
                    ComponentKind::NumpyOp,
                    &spec.name,
                ));
            };
            let default_mode = entry.info.default_mode.to_string();
            let creation = Creation::new(
                &spec.path,
                &spec.inputs,
                &spec.outputs,
                DeviceSpec::CPU,
                manifest.run.seed,
            );
            let handle = match registry.create_numpy_op(
                &spec.name,
                &spec.config_text(),
                &creation.context(),
            ) {
                Some(Ok(object)) => NumpyOpHandle(object),
                Some(Err(error)) => return Err(creation_error(manifest, &spec.path, error)),
                None => {
                    return Err(manifest.error_at(
                        &spec.path.key("op"),
                        format!("`{}` cannot be used in the pipeline", spec.name),
                    ))
                }
            };
            let modes = match spec.mode {
                Some(modes) => modes,
                None => ModeFilter::parse_default(&default_mode)
                    .map_err(|e| manifest.error_at(&spec.path, e))?,
            };
            ops.push(Arc::new(PipelineOp {
                label: spec.label(),
                inputs: keys.intern_all(&spec.inputs),
                outputs: keys.intern_all(&spec.outputs),
                modes,
                ds_ids: spec.ds_id.clone(),
                epochs,
                handle,
            }));
        }
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        Ok(Self {
            datasets,
            ops,
            batch_size: manifest.pipeline.batch_size.clone(),
            shuffle: manifest.pipeline.shuffle,
            drop_last: manifest.pipeline.drop_last,
            workers: manifest.pipeline.workers.unwrap_or(cores),
            prefetch: manifest.pipeline.prefetch,
            seed: manifest.run.seed,
        })
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

    /// Samples per batch in `epoch`.
    pub fn batch_size_at(&self, epoch: u32) -> usize {
        // The manifest guarantees a batch size in every epoch.
        self.batch_size.at(epoch).copied().unwrap_or(1).max(1) as usize
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

    /// The ops that run on samples of `mode`/`epoch`/`ds_id`, in order.
    pub fn ops_at(&self, mode: Mode, epoch: u32, ds_id: &str) -> Vec<&PipelineOp> {
        self.active_ops(mode, epoch, ds_id)
            .into_iter()
            .map(|op| op.as_ref())
            .collect()
    }

    /// Keys a batch of `mode`/`epoch`/`ds_id` can hold: the dataset's and the ops' outputs.
    pub fn available_keys(&self, mode: Mode, epoch: u32, ds_id: &str) -> BTreeSet<KeyId> {
        let mut keys: BTreeSet<KeyId> = self
            .dataset(mode, epoch, ds_id)
            .map(|d| d.keys.iter().copied().collect())
            .unwrap_or_default();
        for op in self.active_ops(mode, epoch, ds_id) {
            keys.extend(op.outputs.iter().copied());
        }
        keys
    }

    /// The first op of `mode`/`epoch`/`ds_id` reading a key that neither the dataset nor an
    /// earlier op provides, as `(op label, key id)`.
    pub fn first_missing_input(
        &self,
        mode: Mode,
        epoch: u32,
        ds_id: &str,
    ) -> Option<(String, KeyId)> {
        let mut have: BTreeSet<KeyId> = self
            .dataset(mode, epoch, ds_id)
            .map(|d| d.keys.iter().copied().collect())?;
        for op in self.active_ops(mode, epoch, ds_id) {
            if let Some(missing) = op.inputs.iter().find(|k| !have.contains(k)) {
                return Some((op.label.clone(), *missing));
            }
            have.extend(op.outputs.iter().copied());
        }
        None
    }

    /// Samples in the dataset of `mode`/`epoch`/`ds_id`.
    pub fn samples(&self, mode: Mode, epoch: u32, ds_id: &str) -> u64 {
        self.dataset(mode, epoch, ds_id)
            .map(|d| d.source.len())
            .unwrap_or(0)
    }

    /// Batches in an epoch of `mode`/`ds_id` (`steps` overrides).
    pub fn batches(&self, mode: Mode, epoch: u32, ds_id: &str, steps: Option<u64>) -> usize {
        if let Some(steps) = steps {
            return steps as usize;
        }
        let n = self.samples(mode, epoch, ds_id) as usize;
        let batch_size = self.batch_size_at(epoch);
        if self.drop_last {
            n / batch_size
        } else {
            n.div_ceil(batch_size)
        }
    }

    /// Dataset indices of one epoch. With `steps`, passes over the data repeat (each pass
    /// reshuffled) until `steps` batches are filled, as FastEstimator's loader does.
    pub fn order(&self, mode: Mode, epoch: u32, ds_id: &str, steps: Option<u64>) -> Vec<u64> {
        let n = self.samples(mode, epoch, ds_id);
        let shuffle = self.shuffle && mode == Mode::Train;
        let batch_size = self.batch_size_at(epoch);
        let wanted = match steps {
            Some(steps) => steps as usize * batch_size,
            None => self.batches(mode, epoch, ds_id, None) * batch_size,
        };
        let mut order = Vec::with_capacity(wanted.min(n as usize * 2));
        let mut pass = 0u64;
        while order.len() < wanted && n > 0 {
            let mut indices: Vec<u64> = (0..n).collect();
            if shuffle {
                let seed = crate::rng::mix(
                    crate::rng::mix(self.seed, crate::rng::hash_str(ds_id) ^ mode as u64),
                    crate::rng::mix(epoch as u64, pass),
                );
                shuffle_in_place(&mut indices, seed);
            }
            let take = (wanted - order.len()).min(indices.len());
            order.extend_from_slice(&indices[..take]);
            pass += 1;
            if steps.is_none() {
                break;
            }
        }
        order
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
    /// whole epoch's from there on (order and augmentation depend on the sample, not on where
    /// loading started), which is what resuming mid-epoch needs.
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
        let order = self.order(mode, epoch, ds_id, steps);
        let batches = match steps {
            Some(steps) => steps as usize,
            None => self
                .batches(mode, epoch, ds_id, None)
                .min(order.len().div_ceil(self.batch_size_at(epoch))),
        };
        let mut loader = self.work(mode, epoch, ds_id, wanted, order, batches, keys)?;
        loader.first_batch = skip;
        EpochLoader::start(loader, self.workers, self.prefetch)
    }

    /// Starts loading the samples `order` of the dataset of `mode`/`ds_id` as `batches` batches.
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
        let work = self.work(mode, epoch, ds_id, wanted, order, batches, keys)?;
        EpochLoader::start(work, self.workers, self.prefetch)
    }

    #[allow(clippy::too_many_arguments)]
    fn work(
        &self,
        mode: Mode,
        epoch: u32,
        ds_id: &str,
        wanted: &BTreeSet<KeyId>,
        order: Vec<u64>,
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
        let width = keys.len();
        let work = EpochWork {
            source: Arc::clone(&dataset.source),
            source_keys: dataset.keys.clone(),
            ops: active,
            wanted: wanted.iter().copied().collect(),
            order,
            batch_size: self.batch_size_at(epoch),
            batches,
            first_batch: 0,
            mode,
            epoch,
            ds_id: ds_id.to_owned(),
            seed: self.seed,
            width,
            keys: Arc::clone(keys),
        };
        Ok(work)
    }
}

/// Fisher–Yates with a ChaCha stream: the same seed gives the same order on every platform.
fn shuffle_in_place(values: &mut [u64], seed: u64) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    for i in (1..values.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        values.swap(i, j);
    }
}

fn open_dataset(
    manifest: &Manifest,
    registry: &Registry,
    config: &DatasetConfig,
) -> Result<Arc<dyn Source>> {
    let text = toml::to_string(&config.config).unwrap_or_default();
    if config.kind == "idx" {
        let idx: IdxConfig = fe_plugin_api::parse_config(&text)
            .map_err(|e| manifest.error_at(&config.path.join_dotted(e.field()), e.message()))?;
        return Ok(Arc::new(IdxSource::open(&idx, &manifest.dir())?));
    }
    if let Some(opened) = formats::open(&config.kind, &text, &manifest.dir()) {
        return opened.map_err(|error| match error {
            formats::OpenError::Config(e) => {
                manifest.error_at(&config.path.join_dotted(e.field()), e.message())
            }
            formats::OpenError::Data(e) => e,
        });
    }
    let creation = Creation::new(&config.path, &[], &[], DeviceSpec::CPU, manifest.run.seed);
    match registry.create_dataset(&config.kind, &text, &creation.context()) {
        Some(Ok(object)) => Ok(Arc::new(PluginSource::new(object))),
        Some(Err(error)) => Err(creation_error(manifest, &config.path, error)),
        None => Err(unknown_component(
            manifest,
            registry,
            &config.path.key("type"),
            ComponentKind::Dataset,
            &config.kind,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let mut a: Vec<u64> = (0..100).collect();
        let mut b = a.clone();
        shuffle_in_place(&mut a, 7);
        shuffle_in_place(&mut b, 7);
        assert_eq!(a, b);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        let mut c: Vec<u64> = (0..100).collect();
        shuffle_in_place(&mut c, 8);
        assert_ne!(a, c);
    }
}
