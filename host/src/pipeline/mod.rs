//! The data pipeline: datasets per mode and ds_id, per-sample NumpyOps on worker threads,
//! seeded shuffling, batching.

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
use crate::schedule::{DsFilter, ModeFilter};

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
    /// The plugin op.
    pub handle: NumpyOpHandle,
}

/// One dataset of one mode.
pub struct Dataset {
    /// Mode it feeds.
    pub mode: Mode,
    /// Its id.
    pub ds_id: String,
    /// The samples.
    pub source: Arc<dyn Source>,
    /// Key ids of the source's keys.
    pub keys: Vec<KeyId>,
}

/// The pipeline of a run.
pub struct Pipeline {
    /// Datasets, in mode then ds_id order.
    pub datasets: Vec<Dataset>,
    /// Per-sample ops (all of them; filtered per epoch).
    pub ops: Vec<Arc<PipelineOp>>,
    /// Samples per batch.
    pub batch_size: usize,
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
        for config in &manifest.pipeline.data {
            let source = open_dataset(manifest, registry, config)?;
            if source.is_empty() {
                return Err(manifest.error_at(
                    &config.path,
                    format!("the {} dataset has no samples", config.mode),
                ));
            }
            let key_ids = keys.intern_all(source.keys());
            datasets.push(Dataset {
                mode: config.mode,
                ds_id: config.ds_id.clone(),
                source,
                keys: key_ids,
            });
        }
        let mut ops = Vec::new();
        for spec in &manifest.pipeline.ops {
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
                handle,
            }));
        }
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        Ok(Self {
            datasets,
            ops,
            batch_size: manifest.pipeline.batch_size as usize,
            shuffle: manifest.pipeline.shuffle,
            drop_last: manifest.pipeline.drop_last,
            workers: manifest.pipeline.workers.unwrap_or(cores),
            prefetch: manifest.pipeline.prefetch,
            seed: manifest.run.seed,
        })
    }

    /// The dataset ids of `mode`, in order (empty when the mode has no data).
    pub fn ds_ids(&self, mode: Mode) -> Vec<String> {
        self.datasets
            .iter()
            .filter(|d| d.mode == mode)
            .map(|d| d.ds_id.clone())
            .collect()
    }

    fn dataset(&self, mode: Mode, ds_id: &str) -> Option<&Dataset> {
        self.datasets
            .iter()
            .find(|d| d.mode == mode && d.ds_id == ds_id)
    }

    fn active_ops(&self, mode: Mode, ds_id: &str) -> Vec<&Arc<PipelineOp>> {
        self.ops
            .iter()
            .filter(|op| op.modes.contains(mode) && op.ds_ids.matches(ds_id))
            .collect()
    }

    /// Keys a batch of `mode`/`ds_id` can hold: the dataset's and the ops' outputs.
    pub fn available_keys(&self, mode: Mode, ds_id: &str) -> BTreeSet<KeyId> {
        let mut keys: BTreeSet<KeyId> = self
            .dataset(mode, ds_id)
            .map(|d| d.keys.iter().copied().collect())
            .unwrap_or_default();
        for op in self.active_ops(mode, ds_id) {
            keys.extend(op.outputs.iter().copied());
        }
        keys
    }

    /// Samples in the dataset of `mode`/`ds_id`.
    pub fn samples(&self, mode: Mode, ds_id: &str) -> u64 {
        self.dataset(mode, ds_id)
            .map(|d| d.source.len())
            .unwrap_or(0)
    }

    /// Batches in an epoch of `mode`/`ds_id` (`steps` overrides).
    pub fn batches(&self, mode: Mode, ds_id: &str, steps: Option<u64>) -> usize {
        if let Some(steps) = steps {
            return steps as usize;
        }
        let n = self.samples(mode, ds_id) as usize;
        if self.drop_last {
            n / self.batch_size
        } else {
            n.div_ceil(self.batch_size)
        }
    }

    /// Dataset indices of one epoch. With `steps`, passes over the data repeat (each pass
    /// reshuffled) until `steps` batches are filled, as FastEstimator's loader does.
    pub fn order(&self, mode: Mode, epoch: u32, ds_id: &str, steps: Option<u64>) -> Vec<u64> {
        let n = self.samples(mode, ds_id);
        let shuffle = self.shuffle && mode == Mode::Train;
        let wanted = match steps {
            Some(steps) => steps as usize * self.batch_size,
            None => self.batches(mode, ds_id, None) * self.batch_size,
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
        let order = self.order(mode, epoch, ds_id, steps);
        let batches = match steps {
            Some(steps) => steps as usize,
            None => self
                .batches(mode, ds_id, None)
                .min(order.len().div_ceil(self.batch_size)),
        };
        self.epoch_in_order(mode, epoch, ds_id, wanted, order, batches, keys)
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
        let dataset = self
            .dataset(mode, ds_id)
            .ok_or_else(|| Error::Internal(format!("no {mode} dataset `{ds_id}`")))?;
        let active: Vec<Arc<PipelineOp>> =
            self.active_ops(mode, ds_id).into_iter().cloned().collect();
        let width = keys.len();
        let work = EpochWork {
            source: Arc::clone(&dataset.source),
            source_keys: dataset.keys.clone(),
            ops: active,
            wanted: wanted.iter().copied().collect(),
            order,
            batch_size: self.batch_size,
            batches,
            mode,
            epoch,
            ds_id: ds_id.to_owned(),
            seed: self.seed,
            width,
            keys: Arc::clone(keys),
        };
        EpochLoader::start(work, self.workers, self.prefetch)
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
