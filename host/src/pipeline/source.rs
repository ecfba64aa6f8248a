//! Datasets: where samples come from.

use std::path::PathBuf;

use fe_plugin_api::State;
use serde::Deserialize;
use tch::Tensor;

use crate::error::{Error, Result};

/// A random-access dataset. `get` returns one tensor per key, in `keys()` order.
pub trait Source: Send + Sync {
    /// Number of samples.
    fn len(&self) -> u64;
    /// `true` when there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The keys of every sample.
    fn keys(&self) -> &[String];
    /// Sample `index`.
    fn get(&self, index: u64) -> std::result::Result<Vec<Tensor>, String>;

    /// Samples `indices`, each key stacked along a new dimension 0.
    fn get_batch(&self, indices: &[u64]) -> std::result::Result<Vec<Tensor>, String> {
        let mut columns: Vec<Vec<Tensor>> = self
            .keys()
            .iter()
            .map(|_| Vec::with_capacity(indices.len()))
            .collect();
        for &index in indices {
            for (column, value) in columns.iter_mut().zip(self.get(index)?) {
                column.push(value);
            }
        }
        columns
            .iter()
            .zip(self.keys())
            .map(|(column, key)| {
                Tensor::f_stack(column, 0)
                    .map_err(|e| format!("cannot stack key `{key}`: {}", crate::tch_message(e)))
            })
            .collect()
    }

    /// The order of one shuffled pass seeded by `seed`, for a dataset that is read best in an
    /// order of its own (a stream of shards); `None`: a seeded uniform permutation.
    fn stream_order(&self, _seed: u64) -> Option<Vec<u64>> {
        None
    }

    /// What the dataset keeps for checkpoints. Files and generated data are pure functions of
    /// the index and have none; a plugin dataset may declare some.
    fn state(&self) -> std::result::Result<State, String> {
        Ok(State::empty())
    }

    /// Restores what [`Source::state`] returned.
    fn load_state(&self, state: State) -> std::result::Result<(), String> {
        if state.is_empty() {
            Ok(())
        } else {
            Err("this dataset keeps no state but the checkpoint has some".into())
        }
    }
}

/// `type = "idx"`: one IDX file per key, all with the same number of items.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct IdxConfig {
    /// Key → file (relative to the manifest).
    pub files: std::collections::BTreeMap<String, PathBuf>,
}

/// Several IDX files read into memory, one per key.
pub struct IdxSource {
    keys: Vec<String>,
    arrays: Vec<super::idx::IdxArray>,
    len: u64,
}

impl IdxSource {
    /// Reads every file; they must agree on the number of items.
    pub fn open(config: &IdxConfig, dir: &std::path::Path) -> Result<Self> {
        let mut keys = Vec::new();
        let mut arrays = Vec::new();
        let mut len: Option<(u64, PathBuf)> = None;
        for (key, file) in &config.files {
            let path = dir.join(file);
            let array = super::idx::read(&path)?;
            let items = array.len();
            if let Some((expected, first)) = &len {
                if *expected != items {
                    return Err(Error::data(
                        &path,
                        format!("has {items} items but {} has {expected}; every key needs one item per sample", first.display()),
                    ));
                }
            } else {
                len = Some((items, path.clone()));
            }
            keys.push(key.clone());
            arrays.push(array);
        }
        Ok(Self {
            keys,
            arrays,
            len: len.map(|(n, _)| n).unwrap_or(0),
        })
    }
}

impl Source for IdxSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn keys(&self) -> &[String] {
        &self.keys
    }

    fn get(&self, index: u64) -> std::result::Result<Vec<Tensor>, String> {
        self.arrays.iter().map(|array| array.item(index)).collect()
    }

    fn get_batch(&self, indices: &[u64]) -> std::result::Result<Vec<Tensor>, String> {
        self.arrays
            .iter()
            .map(|array| array.items(indices))
            .collect()
    }
}

/// A dataset provided by a plugin.
pub struct PluginSource {
    handle: fe_plugin_api::ffi::DatasetBox,
    keys: Vec<String>,
    len: u64,
}

impl PluginSource {
    /// Wraps a plugin dataset object.
    pub fn new(handle: fe_plugin_api::ffi::DatasetBox) -> Self {
        let keys = handle.keys().into_iter().map(|k| k.into_string()).collect();
        let len = handle.len();
        Self { handle, keys, len }
    }
}

impl Source for PluginSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn keys(&self) -> &[String] {
        &self.keys
    }

    fn get(&self, index: u64) -> std::result::Result<Vec<Tensor>, String> {
        self.handle
            .get(index)
            .into_result()
            .map(|v| {
                v.into_iter()
                    .map(fe_plugin_api::RTensor::into_tensor)
                    .collect()
            })
            .map_err(|e| e.to_string())
    }

    fn state(&self) -> std::result::Result<State, String> {
        self.handle
            .state()
            .into_result()
            .map(State::from_ffi)
            .map_err(|e| e.to_string())
    }

    fn load_state(&self, state: State) -> std::result::Result<(), String> {
        self.handle
            .load_state(state.into_ffi())
            .into_result()
            .map_err(|e| e.to_string())
    }
}
