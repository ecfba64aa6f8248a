//! What a run records in its version directory, beside `run.json` (which stays as it was, for
//! its readers): `manifest.toml`, the manifest exactly as the run read it (`--set` overrides
//! applied, `--epochs` and the `[run]`/`[pipeline]` defaults written out), and `record.json`,
//! everything else needed to run it again and to compare it with another run: the command
//! line, the flags that decide the computation (absolute paths), fe-host's and every plugin's
//! version and sha256, device, world size, threads, seed, the identity of every data file
//! ([`data`]), and at the end the final value of every logged key.
//!
//! Written by the process that writes the run (rank 0) when the run starts in a version it
//! is the first to record, and once more when it ends; nothing on the per-step path.

pub mod data;
pub mod resolved;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The record of a run, in its version directory.
pub const RECORD_FILE: &str = "record.json";
/// The manifest as the run read it, in its version directory.
pub const MANIFEST_FILE: &str = "manifest.toml";
/// The files the record adds to a version directory: not results of the run.
pub const FILES: [&str; 2] = [RECORD_FILE, MANIFEST_FILE];
const FORMAT: u32 = 1;

/// `record.json`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Record {
    /// Layout version of this file.
    pub format: u32,
    /// The run's id (as in `run.json` and its checkpoints).
    pub run_id: String,
    /// When it started (`YYYYmmdd-HHMMSS`, UTC).
    pub started: String,
    /// The command line, as given.
    pub command: Vec<String>,
    /// The working directory it was given in.
    pub cwd: PathBuf,
    /// Where the manifest came from.
    pub manifest: ManifestOrigin,
    /// The command-line flags that decide what runs (paths absolute).
    pub flags: Flags,
    /// The version directory this run re-ran (`run --again`), if it did.
    #[serde(default)]
    pub again_of: Option<PathBuf>,
    /// fe-host itself.
    pub fe_host: Binary,
    /// Every loaded plugin.
    pub plugins: Vec<Binary>,
    /// The device rank 0 trained on (`cpu`, `cuda:0`).
    pub device: String,
    /// Processes of the run (1: a single process).
    pub world_size: usize,
    /// libtorch intra-op threads (per process).
    pub threads: i32,
    /// `run.seed`.
    pub seed: u64,
    /// Every data path the manifest names (see [`data`]).
    pub data: Vec<data::DataFile>,
    /// Written when the run ends.
    #[serde(default)]
    pub end: Option<End>,
}

/// Where the resolved manifest came from.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ManifestOrigin {
    /// The manifest file, absolute: its directory is what the manifest's relative paths
    /// resolve against, in the run and in a rerun from any working directory.
    pub file: PathBuf,
    /// sha256 of that file's text when the run started.
    pub sha256: String,
    /// The `--set` overrides, as given (already applied in [`MANIFEST_FILE`]).
    pub overrides: Vec<String>,
}

/// The flags of `fe-host run` that change what a run computes or where it writes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Flags {
    /// `--device`.
    pub device: Option<String>,
    /// `--threads`.
    pub threads: Option<u32>,
    /// `--epochs` (also written into [`MANIFEST_FILE`]).
    pub epochs: Option<u32>,
    /// `--log-dir`, absolute.
    pub log_dir: Option<PathBuf>,
    /// `--plugin-dir`s, absolute.
    pub plugin_dirs: Vec<PathBuf>,
}

/// A binary: fe-host or a plugin.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Binary {
    /// Crate name.
    pub name: String,
    /// Crate version.
    pub version: String,
    /// The file, absolute.
    pub path: PathBuf,
    /// sha256 of the file.
    pub sha256: String,
}

/// How a run ended.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct End {
    /// When (`YYYYmmdd-HHMMSS`, UTC).
    pub ended: String,
    /// `completed`, `stopped` or `failed`.
    pub outcome: String,
    /// The last logged value of every key, by mode (non-finite values left out).
    pub metrics: BTreeMap<String, BTreeMap<String, f64>>,
}

/// Reads the record of version directory `dir`.
pub fn read(dir: &Path) -> Result<Record> {
    let path = dir.join(RECORD_FILE);
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| Error::Usage(format!("{}: not a run record: {e}", path.display())))
}

/// Writes `record` and `manifest_text` into `dir` unless it holds this run's record already
/// (a resumed run keeps the record of its first start; a version taken over from a run that
/// failed at start gets this run's). The manifest goes first: a `record.json` always has its
/// manifest beside it.
pub fn write_start(dir: &Path, record: &Record, manifest_text: &str) -> Result<()> {
    if read(dir).is_ok_and(|existing| existing.run_id == record.run_id) {
        return Ok(());
    }
    let manifest = dir.join(MANIFEST_FILE);
    std::fs::write(&manifest, manifest_text).map_err(|e| Error::io(&manifest, e))?;
    write(dir, record)
}

/// Adds how the run ended to the record in `dir` (left alone when there is none: a version
/// from before records).
pub fn write_end(dir: &Path, outcome: &str, summary: &crate::system::Summary) -> Result<()> {
    let Ok(mut record) = read(dir) else {
        return Ok(());
    };
    let mut metrics: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for (mode, keys) in &summary.history {
        for (key, steps) in keys {
            let last = steps
                .values()
                .next_back()
                .copied()
                .filter(|v| v.is_finite());
            if let Some(value) = last {
                metrics
                    .entry(mode.clone())
                    .or_default()
                    .insert(key.clone(), value);
            }
        }
    }
    record.end = Some(End {
        ended: crate::system::timestamp(),
        outcome: outcome.to_owned(),
        metrics,
    });
    write(dir, &record)
}

fn write(dir: &Path, record: &Record) -> Result<()> {
    let path = dir.join(RECORD_FILE);
    let temp = dir.join(format!(".{RECORD_FILE}.tmp-{}", std::process::id()));
    let json = serde_json::to_vec_pretty(record)
        .map_err(|e| Error::Internal(format!("cannot serialize {RECORD_FILE}: {e}")))?;
    std::fs::write(&temp, json).map_err(|e| Error::io(&temp, e))?;
    std::fs::rename(&temp, &path).map_err(|e| Error::io(&path, e))
}

/// A new record's format number.
pub fn format() -> u32 {
    FORMAT
}

/// `path` made absolute against the working directory (lexically: nothing resolved).
pub fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return crate::run_dir::lexical(path);
    }
    let here = std::env::current_dir().unwrap_or_default();
    crate::run_dir::lexical(&here.join(path))
}

/// fe-host's own executable, identified.
pub fn fe_host_binary() -> Result<Binary> {
    let path = std::env::current_exe()
        .map_err(|e| Error::Internal(format!("cannot find fe-host's own executable: {e}")))?;
    let sha256 = crate::plugins::sha256_file(&path).map_err(|e| Error::io(&path, e))?;
    Ok(Binary {
        name: env!("CARGO_PKG_NAME").to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        path,
        sha256,
    })
}

/// Every plugin of `plugins`, identified.
pub fn plugin_binaries(plugins: &crate::plugins::PluginSet) -> Result<Vec<Binary>> {
    plugins
        .plugins
        .iter()
        .map(|plugin| {
            let sha256 = crate::plugins::sha256_file(&plugin.path)
                .map_err(|e| Error::io(&plugin.path, e))?;
            Ok(Binary {
                name: plugin.name().to_owned(),
                version: plugin.version().to_owned(),
                path: absolute(&plugin.path),
                sha256,
            })
        })
        .collect()
}
