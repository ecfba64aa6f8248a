//! `split_from`: a dataset made of samples taken out of another (FastEstimator's
//! `dataset.split`), by fraction, count or explicit indices, with a seed and optional
//! stratification by a key.
//!
//! The samples taken are chosen from a seeded permutation of the ones still in the source,
//! and leave it: the source keeps the rest. Both keep their samples in the source's order.
//! Fractions are of the source's size before anything was split from it, so two splits of
//! 0.1 each take the same number of samples. With `stratify`, each class (each distinct value
//! of that key) gives its share (largest remainders for the rounding), so class proportions
//! are kept.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use tch::{Kind, Tensor};

use super::order::shuffle_in_place;
use super::Source;

/// The table of a dataset with `split_from`, less that key.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct SplitConfig {
    /// Take this fraction of the source's samples, in (0, 1).
    #[serde(default)]
    pub fraction: Option<f64>,
    /// Take this many samples.
    #[serde(default)]
    pub count: Option<u64>,
    /// Take exactly these samples (indices into the source as read).
    #[serde(default)]
    pub indices: Option<Vec<u64>>,
    /// Seed of the choice (default: the run seed).
    #[serde(default)]
    pub seed: Option<u64>,
    /// Keep the proportions of each value of this key.
    #[serde(default)]
    pub stratify: Option<String>,
}

/// A dataset being split: the samples of `base` still in it, and its size before any split.
pub struct Pool {
    /// The dataset as read.
    pub base: Arc<dyn Source>,
    /// Indices into `base` still in this dataset, ascending.
    pub indices: Vec<u64>,
    /// Size before anything was split from it.
    pub original: u64,
}

impl Pool {
    /// All of `source`.
    pub fn whole(source: Arc<dyn Source>) -> Self {
        let n = source.len();
        Self {
            base: source,
            indices: (0..n).collect(),
            original: n,
        }
    }

    /// The samples still in it, as a dataset.
    pub fn source(&self) -> Arc<dyn Source> {
        if self.indices.len() as u64 == self.base.len() {
            return Arc::clone(&self.base);
        }
        Arc::new(Subset {
            inner: Arc::clone(&self.base),
            indices: self.indices.clone(),
        })
    }

    /// Takes the samples `config` selects out of this pool and returns them as a new pool.
    /// Errors name the config field at fault.
    pub fn take(&mut self, config: &SplitConfig, run_seed: u64) -> Result<Pool, (String, String)> {
        let chosen: Vec<u64> = match (&config.fraction, &config.count, &config.indices) {
            (Some(fraction), None, None) => {
                if !(*fraction > 0.0 && *fraction < 1.0) {
                    return Err((
                        "fraction".into(),
                        "must be between 0 and 1 (exclusive)".into(),
                    ));
                }
                let count = (fraction * self.original as f64).round() as u64;
                if count == 0 {
                    return Err((
                        "fraction".into(),
                        format!("{fraction} of {} samples is none", self.original),
                    ));
                }
                self.choose(count, config, run_seed, "fraction")?
            }
            (None, Some(count), None) => {
                if *count == 0 {
                    return Err(("count".into(), "must be at least 1".into()));
                }
                self.choose(*count, config, run_seed, "count")?
            }
            (None, None, Some(indices)) => {
                if config.stratify.is_some() || config.seed.is_some() {
                    return Err((
                        "indices".into(),
                        "explicit indices take no `seed` or `stratify`".into(),
                    ));
                }
                self.explicit(indices)?
            }
            _ => {
                return Err((
                    String::new(),
                    "give exactly one of `fraction`, `count` and `indices`".into(),
                ))
            }
        };
        let mut taken = chosen.clone();
        taken.sort_unstable();
        self.indices.retain(|i| taken.binary_search(i).is_err());
        let original = taken.len() as u64;
        Ok(Pool {
            base: Arc::clone(&self.base),
            indices: taken,
            original,
        })
    }

    fn explicit(&self, indices: &[u64]) -> Result<Vec<u64>, (String, String)> {
        let mut seen = std::collections::BTreeSet::new();
        for (i, &index) in indices.iter().enumerate() {
            let field = format!("indices[{i}]");
            if index >= self.base.len() {
                return Err((
                    field,
                    format!(
                        "sample {index} does not exist ({} samples)",
                        self.base.len()
                    ),
                ));
            }
            if !seen.insert(index) {
                return Err((field, format!("sample {index} is listed twice")));
            }
            if self.indices.binary_search(&index).is_err() {
                return Err((field, format!("sample {index} was already split off")));
            }
        }
        if indices.is_empty() {
            return Err(("indices".into(), "must list at least one sample".into()));
        }
        Ok(indices.to_vec())
    }

    fn choose(
        &self,
        count: u64,
        config: &SplitConfig,
        run_seed: u64,
        field: &str,
    ) -> Result<Vec<u64>, (String, String)> {
        let available = self.indices.len() as u64;
        if count > available {
            return Err((
                field.into(),
                format!("asks for {count} samples but only {available} are left to split"),
            ));
        }
        let seed = crate::rng::mix(
            config.seed.unwrap_or(run_seed),
            crate::rng::hash_str("split"),
        );
        let mut order = self.indices.clone();
        shuffle_in_place(&mut order, seed);
        let Some(key) = &config.stratify else {
            return Ok(order[..count as usize].to_vec());
        };
        let classes = self.classes(key).map_err(|e| ("stratify".to_owned(), e))?;
        let mut sizes: BTreeMap<&Vec<u64>, u64> = BTreeMap::new();
        for class in classes.values() {
            *sizes.entry(class).or_default() += 1;
        }
        let quotas = largest_remainder(count, available, &sizes);
        let mut left = quotas;
        let mut chosen = Vec::with_capacity(count as usize);
        for index in order {
            if let Some(class) = classes.get(&index) {
                if let Some(quota) = left.get_mut(class) {
                    if *quota > 0 {
                        *quota -= 1;
                        chosen.push(index);
                    }
                }
            }
        }
        Ok(chosen)
    }

    /// The class of every sample in the pool: the value of `key`, as the bits of its elements.
    fn classes(&self, key: &str) -> Result<BTreeMap<u64, Vec<u64>>, String> {
        let keys = self.base.keys();
        let Some(position) = keys.iter().position(|k| k == key) else {
            return Err(format!(
                "the dataset has no key `{key}` (keys: {})",
                keys.join(", ")
            ));
        };
        let mut classes = BTreeMap::new();
        for &index in &self.indices {
            let values = self
                .base
                .get(index)
                .map_err(|e| format!("sample {index}: {e}"))?;
            let value = values
                .get(position)
                .ok_or_else(|| format!("sample {index} has no value for `{key}`"))?;
            classes.insert(
                index,
                class_of(value).map_err(|e| format!("sample {index}: {e}"))?,
            );
        }
        Ok(classes)
    }
}

fn class_of(value: &Tensor) -> Result<Vec<u64>, String> {
    let flat = value
        .f_to_kind(Kind::Double)
        .and_then(|t| t.f_flatten(0, -1))
        .map_err(crate::tch_message)?;
    let numbers = Vec::<f64>::try_from(&flat).map_err(crate::tch_message)?;
    let mut class: Vec<u64> = value.size().iter().map(|&d| d as u64).collect();
    class.push(u64::MAX);
    class.extend(numbers.iter().map(|v| v.to_bits()));
    Ok(class)
}

/// Splits `count` over classes in proportion to their sizes (of `total`), rounding by
/// largest remainder (ties to the first class in order).
fn largest_remainder<'a>(
    count: u64,
    total: u64,
    sizes: &BTreeMap<&'a Vec<u64>, u64>,
) -> BTreeMap<&'a Vec<u64>, u64> {
    let mut quotas = BTreeMap::new();
    let mut remainders = Vec::new();
    let mut given = 0;
    for (class, &size) in sizes {
        let exact = count as u128 * size as u128;
        let floor = (exact / total.max(1) as u128) as u64;
        quotas.insert(*class, floor);
        given += floor;
        remainders.push((exact % total.max(1) as u128, *class));
    }
    remainders.sort_by_key(|r| std::cmp::Reverse(r.0));
    for (_, class) in remainders.into_iter().take((count - given) as usize) {
        if let Some(q) = quotas.get_mut(class) {
            *q += 1;
        }
    }
    quotas
}

/// Some samples of another dataset.
pub struct Subset {
    inner: Arc<dyn Source>,
    indices: Vec<u64>,
}

impl Subset {
    fn map(&self, index: u64) -> Result<u64, String> {
        self.indices.get(index as usize).copied().ok_or_else(|| {
            format!(
                "sample {index} is out of range ({} samples)",
                self.indices.len()
            )
        })
    }
}

impl Source for Subset {
    fn len(&self) -> u64 {
        self.indices.len() as u64
    }

    fn keys(&self) -> &[String] {
        self.inner.keys()
    }

    fn get(&self, index: u64) -> Result<Vec<Tensor>, String> {
        let inner = self.map(index)?;
        self.inner
            .get(inner)
            .map_err(|e| format!("{e} (sample {inner} of the dataset it was split from)"))
    }

    fn get_batch(&self, indices: &[u64]) -> Result<Vec<Tensor>, String> {
        let inner = indices
            .iter()
            .map(|&i| self.map(i))
            .collect::<Result<Vec<_>, _>>()?;
        self.inner.get_batch(&inner)
    }

    // A split's state is the dataset it was split from: train and eval subsets of one plugin
    // dataset save the same state, and restoring it twice leaves it the same.
    fn state(&self) -> Result<fe_plugin_api::State, String> {
        self.inner.state()
    }

    fn load_state(&self, state: fe_plugin_api::State) -> Result<(), String> {
        self.inner.load_state(state)
    }
}
