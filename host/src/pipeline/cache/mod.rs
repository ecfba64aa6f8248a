//! The pipeline cache (`[pipeline] cache`): the outputs of the leading deterministic ops of a
//! dataset's pipeline (decode, resize, tokenize), computed once and kept on local disk, so
//! later epochs and later runs read them instead of recomputing them (tf.data's `cache`,
//! Determined's `cache_train_dataset`).
//!
//! An op is cached when it is `Delete`, a batchable plugin op (which promises no randomness),
//! or a plugin op whose table says `cache = true`; `cache = false` keeps an op out. The cached
//! prefix is the leading run of such ops before the `Batch` op, per mode, dataset and epoch.
//!
//! A file is keyed by the sha256 of: the identity of the run's data (every data file's size
//! and digest, as the run record computes them, and every dataset's configuration), the
//! dataset (position, mode, ds_id, length), and each cached op's name, plugin crate and
//! version, keys and configuration. Changing any of them reads (or fills) another file.
//! Samples are stored in dataset index order, so shuffling, sharding and resuming address
//! them exactly as the dataset itself; later ops keep their seeds (see `EpochWork::first_op`).
//!
//! A cache that cannot be written or read (read-only, disk full) costs one warning and the
//! run goes on without it.

mod store;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::ops::Flow;
use super::work::EpochWork;
use super::Source;
use crate::batch::{Batch, KeyId};
use crate::error::{Error, Result};
use crate::manifest::Manifest;

pub use store::CachedSource;

/// Samples each fill thread processes between writes: bounds the fill's memory.
const CHUNK: u64 = 64;

/// The run's pipeline cache.
pub struct Cache {
    dir: PathBuf,
    /// sha256 of the run's data files and dataset configurations.
    data: String,
    /// Set after the first failure: one warning, then no cache for the rest of the run.
    off: AtomicBool,
    open: Mutex<HashMap<String, Arc<CachedSource>>>,
}

impl Cache {
    /// The cache of `manifest`'s run in `dir`; `None` (after the one warning) when its data
    /// cannot be identified.
    pub fn new(manifest: &Manifest, dir: PathBuf) -> Option<Self> {
        let files = match crate::record::data::identify(manifest) {
            Ok(files) => files,
            Err(e) => {
                warn(&format!("cannot identify the data files: {e}"));
                return None;
            }
        };
        let mut hasher = Sha256::new();
        for file in &files {
            hasher.update(format!("{}\0{}\0{}\n", file.key, file.size, file.sha256));
        }
        for entry in &manifest.pipeline.data {
            for (config, _) in entry.datasets.variants() {
                hasher.update(format!(
                    "{}\0{}\0{:?}\0{}\n",
                    config.path,
                    config.kind,
                    config.split_from,
                    toml::to_string(&config.config).unwrap_or_default()
                ));
            }
        }
        Some(Self {
            dir,
            data: hex(&hasher.finalize()),
            off: AtomicBool::new(false),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Makes `work` read dataset `index`'s samples after its cacheable leading ops from the
    /// cache, filling the cache first when it has no complete file for them. Leaves `work`
    /// as it is when none of its ops can be cached or the cache cannot be used.
    pub fn apply(&self, work: &mut EpochWork, index: usize, threads: usize) -> Result<()> {
        let cached = work.ops.iter().take_while(|op| op.cache.is_some()).count();
        if cached == 0 || work.first_op != 0 || self.off.load(Ordering::Relaxed) {
            return Ok(());
        }
        let key = self.key(work, index, cached);
        let source = match self.source(work, &key, cached, threads)? {
            Some(source) => source,
            None => return Ok(()),
        };
        let ids = source
            .keys()
            .iter()
            .map(|name| work.keys.get(name))
            .collect::<Option<Vec<KeyId>>>()
            .ok_or_else(|| Error::Internal("a cached key is not a key of the run".into()))?;
        work.source = source;
        work.source_keys = ids;
        work.ops.drain(..cached);
        work.first_op = cached;
        Ok(())
    }

    fn key(&self, work: &EpochWork, index: usize, cached: usize) -> String {
        let mut hasher = Sha256::new();
        hasher.update(format!(
            "fe-host pipeline cache 1\n{}\n{index}\0{}\0{}\0{}\n",
            self.data,
            work.mode,
            work.ds_id,
            work.source.len()
        ));
        for op in &work.ops[..cached] {
            hasher.update(op.cache.as_deref().unwrap_or_default());
            hasher.update("\n");
        }
        hex(&hasher.finalize())
    }

    fn source(
        &self,
        work: &EpochWork,
        key: &str,
        cached: usize,
        threads: usize,
    ) -> Result<Option<Arc<dyn Source>>> {
        let mut open = self.open.lock().map_err(|_| poisoned())?;
        if let Some(source) = open.get(key) {
            return Ok(Some(Arc::clone(source) as Arc<dyn Source>));
        }
        let path = self.dir.join(format!("{key}.fecache"));
        let what = format!("{} ({} op(s))", work.context_text(), cached);
        let complete = |source: &CachedSource| source.len() == work.source.len();
        let source = match CachedSource::open(&path) {
            Ok(source) if complete(&source) => {
                eprintln!("pipeline cache: {what} reads {}", path.display());
                source
            }
            _ => {
                let filled = match std::fs::create_dir_all(&self.dir) {
                    Err(e) => Err(format!("cannot create {}: {e}", self.dir.display())),
                    Ok(()) => {
                        // Ranks (or runs) sharing the directory fill a file once: the first
                        // takes the lock and fills, the others wait for it, then read.
                        let lock = FillLock::take(&self.dir.join(format!("{key}.lock")));
                        match CachedSource::open(&path) {
                            Ok(source) if complete(&source) => {
                                eprintln!(
                                    "pipeline cache: {what} reads {} (filled meanwhile by another process)",
                                    path.display()
                                );
                                Ok(source)
                            }
                            // An op failing fails the run, as it would without the cache.
                            _ => fill(work, &path, cached, threads)?
                                .and_then(|()| CachedSource::open(&path))
                                .inspect(|_| {
                                    lock.filled();
                                    eprintln!("pipeline cache: {what} filled {}", path.display())
                                }),
                        }
                    }
                };
                match filled {
                    Ok(source) => source,
                    Err(message) => {
                        self.disable(&message);
                        return Ok(None);
                    }
                }
            }
        };
        let source = Arc::new(source);
        open.insert(key.to_owned(), Arc::clone(&source));
        Ok(Some(source as Arc<dyn Source>))
    }

    fn disable(&self, message: &str) {
        if !self.off.swap(true, Ordering::Relaxed) {
            warn(message);
        }
    }
}

/// An exclusive `flock` on a file beside a cache file, held while it is filled and released
/// when dropped (or when the process dies, so a killed filler never blocks the next one).
/// Without a lock file (a read-only directory) nothing is locked and the fill reports why.
struct FillLock {
    path: PathBuf,
    held: Option<std::fs::File>,
}

impl FillLock {
    fn take(path: &Path) -> Self {
        use std::os::fd::AsRawFd;
        let held = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .ok()
            // SAFETY: flock on a descriptor this process owns; it blocks until granted.
            .filter(|file| unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0);
        Self {
            path: path.to_owned(),
            held,
        }
    }

    /// Removes the lock file once the cache file is in place, so the directory holds only
    /// cache files. A process still waiting on the removed file finds the cache complete when
    /// it gets the lock; one arriving later finds it complete before locking.
    fn filled(self) {
        if self.held.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn warn(message: &str) {
    eprintln!("warning: pipeline cache: {message}; the run goes on without the cache");
}

fn poisoned() -> Error {
    Error::Internal("the pipeline cache's lock was poisoned".into())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs the first `cached` ops of `work` over every sample, in index order, on `threads`
/// threads, writing the results to `path`. `Err`: an op failed (the run fails as it would
/// without the cache); `Ok(Err)`: the cache could not be written.
fn fill(
    work: &EpochWork,
    path: &Path,
    cached: usize,
    threads: usize,
) -> Result<std::result::Result<(), String>> {
    let n = work.source.len();
    let threads = threads.max(1) as u64;
    let mut writer: Option<store::Writer> = None;
    let mut start = 0;
    while start < n {
        let end = (start + CHUNK * threads).min(n);
        let samples = process(work, start, end, cached, threads)?;
        for (offset, sample) in samples.iter().enumerate() {
            let mut present: Vec<KeyId> = sample.present().collect();
            present.sort();
            if writer.is_none() {
                let names = present
                    .iter()
                    .map(|&k| work.keys.name(k).to_owned())
                    .collect();
                match store::Writer::create(path, names) {
                    Ok(w) => writer = Some(w),
                    Err(e) => return Ok(Err(format!("cannot write {}: {e}", path.display()))),
                }
            }
            let Some(w) = writer.as_mut() else {
                return Err(Error::Internal("no cache writer".into()));
            };
            let names: Vec<&str> = present.iter().map(|&k| work.keys.name(k)).collect();
            if names != w.keys() {
                return Ok(Err(format!(
                    "dataset sample {} has keys {names:?} after the cached ops, sample 0 {:?}; only samples with the same keys can be cached",
                    start + offset as u64,
                    w.keys()
                )));
            }
            let values: Vec<&tch::Tensor> = present.iter().filter_map(|&k| sample.get(k)).collect();
            if let Err(message) = w.push(&values) {
                return Ok(Err(message));
            }
        }
        start = end;
    }
    match writer {
        Some(w) => Ok(w.finish()),
        None => Ok(Err("the dataset has no samples".into())),
    }
}

/// Samples `start..end` after the first `cached` ops, in order.
fn process(
    work: &EpochWork,
    start: u64,
    end: u64,
    cached: usize,
    threads: u64,
) -> Result<Vec<Batch>> {
    let per = (end - start).div_ceil(threads);
    let parts: Vec<Result<Vec<Batch>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let from = (start + t * per).min(end);
                let to = (from + per).min(end);
                scope.spawn(move || {
                    crate::runtime::keep_ops_on_this_thread();
                    (from..to)
                        .map(|index| {
                            let mut sample = work.read_sample(index)?;
                            match work.run_ops(&mut sample, &work.ops[..cached], 0, index, false)? {
                                Flow::Keep => Ok(sample),
                                Flow::Remove { .. } => {
                                    Err(Error::Internal("a cached op dropped a sample".into()))
                                }
                            }
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Internal("a cache fill thread panicked".into())))
            })
            .collect()
    });
    let mut samples = Vec::with_capacity((end - start) as usize);
    for part in parts {
        samples.extend(part?);
    }
    Ok(samples)
}
