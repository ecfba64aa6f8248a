//! `type = "webdataset"`: samples from tar shards as WebDataset writes them, on local disk,
//! behind `http(s)://` URLs or from a `pipe:COMMAND`'s output.
//!
//! How it fits the pipeline: at open, one pass over every shard's headers (local shards:
//! headers only; streams: the shard is read once and its data discarded) records where each
//! sample's members are — a few bytes per member, never the data. The dataset is then a
//! source of samples by position like every other, so what the pipeline promises holds as it
//! is: each sample once per pass, shared between ranks (DistributedSampler's interleaving) and
//! workers (chunks), and exact mid-epoch resume, since an epoch's order is a pure function of
//! the run seed, epoch and pass and the checkpoint records the batch to start at.
//!
//! What WebDataset contributes is the order: a shuffled epoch visits the shards in a seeded
//! order, reading each front to back, through a shuffle buffer of `shuffle_buffer` samples
//! (WebDataset's `shuffle(n)`), so a stream is read forward and memory stays bounded.

mod index;
mod read;
pub mod urls;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use rand_chacha::rand_core::{RngCore, SeedableRng};
use serde::Deserialize;
use tch::Tensor;

use crate::error::{Error, Result};
use crate::pipeline::Source;
use index::Member;
use urls::Shard;

/// `type = "webdataset"`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct WebDatasetConfig {
    /// Shard addresses with WebDataset's brace expansion (`data/s-{000000..000039}.tar`), or a
    /// list of them; local paths are relative to the manifest.
    pub urls: Urls,
    /// Samples in the shuffle buffer of a shuffled epoch (0 or 1: shard order only).
    #[serde(default = "default_buffer")]
    pub shuffle_buffer: usize,
    /// Extension → key (`{ jpg = "x", cls = "y" }`); unlisted extensions keep their name.
    #[serde(default)]
    pub keys: BTreeMap<String, String>,
    /// Samples a worker keeps per stream (`http`, `pipe:`) it reads forward; it keeps up to 4
    /// shards open (default: `shuffle_buffer + 1024`).
    #[serde(default)]
    pub stream_cache: Option<usize>,
}

fn default_buffer() -> usize {
    1000
}

/// One pattern or several.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Urls {
    /// `"a-{0..9}.tar"` (`::` separates patterns).
    One(String),
    /// `["a-{0..9}.tar", "pipe:…"]`.
    Many(Vec<String>),
}

/// The samples of a set of shards.
pub struct WebDatasetSource {
    id: usize,
    shards: Vec<Shard>,
    /// Global index of each shard's first sample, then the total.
    first: Vec<u64>,
    /// Each sample's members in key order (the `__key__` key has none).
    members: Vec<Box<[Member]>>,
    /// Each sample's name (WebDataset's `__key__`).
    names: Vec<Box<str>>,
    /// Extensions in key order.
    extensions: Vec<String>,
    /// Dataset keys: one per extension, then `__key__`.
    keys: Vec<String>,
    shuffle_buffer: usize,
    stream_cache: usize,
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

/// The key holding each sample's name, as text.
pub const NAME_KEY: &str = "__key__";

impl WebDatasetSource {
    /// Expands the addresses and reads every shard's headers.
    pub fn open(config: &WebDatasetConfig, dir: &Path) -> Result<Self> {
        let patterns = match &config.urls {
            Urls::One(one) => vec![one.clone()],
            Urls::Many(many) => many.clone(),
        };
        let mut shards = Vec::new();
        for pattern in &patterns {
            let expanded = urls::expand(pattern).map_err(|e| Error::data(Path::new(pattern), e))?;
            shards.extend(expanded.iter().map(|url| Shard::parse(url, dir)));
        }
        if shards.is_empty() {
            return Err(Error::data(Path::new("urls"), "names no shards"));
        }
        let mut source = Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            shards: Vec::new(),
            first: vec![0],
            members: Vec::new(),
            names: Vec::new(),
            extensions: Vec::new(),
            keys: Vec::new(),
            shuffle_buffer: config.shuffle_buffer,
            stream_cache: config.stream_cache.unwrap_or(config.shuffle_buffer + 1024),
        };
        for shard in &shards {
            let name = shard.name();
            index::scan(shard, |found| source.add(found))
                .map_err(|e| Error::data(Path::new(&name), e))?;
            source.first.push(source.members.len() as u64);
        }
        source.shards = shards;
        source.keys = source
            .extensions
            .iter()
            .map(|ext| config.keys.get(ext).cloned().unwrap_or_else(|| ext.clone()))
            .chain([NAME_KEY.to_owned()])
            .collect();
        if let Some(unused) = config
            .keys
            .keys()
            .find(|ext| !source.extensions.contains(ext))
        {
            return Err(Error::data(
                Path::new(&source.shards[0].name()),
                format!(
                    "`keys` renames `.{unused}`, but the samples have only {}",
                    source.extension_list()
                ),
            ));
        }
        Ok(source)
    }

    fn extension_list(&self) -> String {
        let list: Vec<String> = self.extensions.iter().map(|e| format!(".{e}")).collect();
        list.join(", ")
    }

    /// Adds a scanned sample; every sample must have the first one's extensions.
    fn add(&mut self, found: index::Found) -> std::result::Result<(), String> {
        if self.extensions.is_empty() {
            self.extensions = found.members.iter().map(|(e, _)| e.clone()).collect();
            self.extensions.sort();
        }
        let mut members = Vec::with_capacity(self.extensions.len());
        for ext in &self.extensions {
            let member = found
                .members
                .iter()
                .find(|(e, _)| e == ext)
                .ok_or_else(|| {
                    format!(
                        "sample `{}` has no `.{ext}` member (every sample needs {})",
                        found.key,
                        self.extension_list()
                    )
                })?;
            members.push(member.1);
        }
        if let Some((extra, _)) = found
            .members
            .iter()
            .find(|(e, _)| !self.extensions.contains(e))
        {
            return Err(format!(
                "sample `{}` has a `.{extra}` member the first sample lacks (every sample needs {})",
                found.key,
                self.extension_list()
            ));
        }
        self.members.push(members.into_boxed_slice());
        self.names.push(found.key.into_boxed_str());
        Ok(())
    }

    /// Samples per shard, in shard order.
    pub fn shard_sizes(&self) -> Vec<u64> {
        self.first.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

/// A shuffled pass: shards in a seeded order, each read front to back, through a shuffle
/// buffer of `buffer` samples (fill the buffer, then emit a random one per sample read and
/// put the new one in its place; drain at the end in random order).
pub fn stream_order(first: &[u64], buffer: usize, seed: u64) -> Vec<u64> {
    let mut shards: Vec<u64> = (0..first.len().saturating_sub(1) as u64).collect();
    crate::pipeline::order::shuffle_in_place(&mut shards, seed);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(crate::rng::mix(seed, 1));
    let total = first.last().copied().unwrap_or(0) as usize;
    let mut out = Vec::with_capacity(total);
    let mut held: Vec<u64> = Vec::with_capacity(buffer);
    for shard in shards {
        for sample in first[shard as usize]..first[shard as usize + 1] {
            if held.len() < buffer.max(1) {
                held.push(sample);
                continue;
            }
            let j = (rng.next_u64() % held.len() as u64) as usize;
            out.push(std::mem::replace(&mut held[j], sample));
        }
    }
    while !held.is_empty() {
        let j = (rng.next_u64() % held.len() as u64) as usize;
        out.push(held.swap_remove(j));
    }
    out
}

impl Source for WebDatasetSource {
    fn len(&self) -> u64 {
        self.members.len() as u64
    }

    fn keys(&self) -> &[String] {
        &self.keys
    }

    fn get(&self, index: u64) -> std::result::Result<Vec<Tensor>, String> {
        if index >= self.len() {
            return Err(format!("sample {index} of {}", self.len()));
        }
        let names = |sample: u64, key: usize| {
            format!(
                "{}.{}",
                self.names[sample as usize],
                self.extensions.get(key).map_or("", String::as_str)
            )
        };
        let layout = read::Layout {
            source: self.id,
            shards: &self.shards,
            first: &self.first,
            members: &self.members,
            names: &names,
            cache: self.stream_cache,
        };
        let bytes = read::read_sample(&layout, index)?;
        let shard = self.first.partition_point(|&f| f <= index) - 1;
        let mut out = Vec::with_capacity(self.keys.len());
        for (key, member) in bytes.into_iter().enumerate() {
            out.push(read::decode(&self.extensions[key], member).map_err(|e| {
                format!(
                    "shard {}, member `{}`: {e}",
                    self.shards[shard].name(),
                    names(index, key)
                )
            })?);
        }
        out.push(fe_plugin_api::text_tensor(&self.names[index as usize]));
        Ok(out)
    }

    fn stream_order(&self, seed: u64) -> Option<Vec<u64>> {
        Some(stream_order(&self.first, self.shuffle_buffer, seed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_order_is_a_seeded_permutation_that_keeps_shards_together() {
        let first = [0u64, 10, 20, 30, 40];
        let a = stream_order(&first, 4, 7);
        assert_eq!(a, stream_order(&first, 4, 7));
        assert_ne!(a, stream_order(&first, 4, 8));
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..40).collect::<Vec<_>>());
        // Without a buffer each shard is read whole, in a shuffled shard order.
        let plain = stream_order(&first, 0, 7);
        for run in plain.chunks(10) {
            assert!(run.windows(2).all(|w| w[1] == w[0] + 1), "{plain:?}");
        }
        // A buffer of 4 delays a sample by at most ... and never lets one jump ahead of
        // the samples read before it by more than the buffer.
        let position = |order: &[u64], s: u64| order.iter().position(|&x| x == s).unwrap();
        for s in 0..40 {
            let shard_start = plain.iter().position(|&x| x == s / 10 * 10).unwrap();
            let read_at = shard_start + (s % 10) as usize;
            assert!(
                position(&a, s) + 3 >= read_at,
                "sample {s} came out too early"
            );
        }
    }
}
