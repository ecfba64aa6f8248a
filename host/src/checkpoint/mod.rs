//! Crash-safe, exact checkpoints.
//!
//! A checkpoint is a directory `ckpt-<global step>` in the run's checkpoint root:
//!
//! ```text
//! checkpoint.json            step, epoch, where in the epoch (the data cursor), monitored value
//! system.json                the System: counters, stop flag, the logged history
//! manifest.toml              the manifest the run was started with
//! plugins.json               name, version, build and sha256 of every loaded plugin
//! components.json            every component in order (count and names are checked on load)
//! models/<name>.safetensors  weights and buffers
//! models/<name>.json         optimizer in force, mixed-precision scaler
//! optim/<name>.<k>.{json,safetensors}   each optimizer's hyper-parameters, step counts, moments
//! states/<component>.{json,safetensors} whatever an op, slicer, trace, pipeline op or dataset declares
//! rng.safetensors            libtorch's CPU (and CUDA) generator states
//! MANIFEST.json              every file above with its size and sha256, written last
//! ```
//!
//! Everything else random (data order, augmentation, per-step seeds) is derived from the run
//! seed and the position in the run, so the cursor restores it. See [`store`] for how writes
//! survive a crash, [`writer`] for how they happen while training goes on, [`policy`] for
//! when checkpoints are written and kept, and [`compat`] for what a resumed run must share
//! with the checkpoint.

pub mod compat;
pub mod policy;
pub mod store;
pub mod writer;

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Where in the run a checkpoint was taken, so a resumed run continues from exactly there.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(tag = "at", rename_all = "snake_case")]
pub enum Cursor {
    /// Inside the training epoch `epoch`: `batches_done` batches of its `ds_index`-th dataset
    /// (and every batch of the ones before) were trained on.
    InEpoch {
        /// The epoch.
        epoch: u32,
        /// Which of the epoch's training datasets.
        ds_index: usize,
        /// Batches of that dataset done.
        batches_done: u64,
    },
    /// After epoch `epoch`, its evaluation included.
    EpochEnd {
        /// The epoch.
        epoch: u32,
    },
}

impl Cursor {
    /// The epoch a resumed run continues in.
    pub fn next_epoch(&self) -> u32 {
        match *self {
            Cursor::InEpoch { epoch, .. } => epoch,
            Cursor::EpochEnd { epoch } => epoch + 1,
        }
    }

    /// The epoch it was taken in (inside, or at its end).
    pub fn epoch(&self) -> u32 {
        match *self {
            Cursor::InEpoch { epoch, .. } | Cursor::EpochEnd { epoch } => epoch,
        }
    }

    /// Where, in words: `inside epoch 2 (1 batches done)`, `after epoch 3`.
    pub fn describe(&self) -> String {
        match *self {
            Cursor::InEpoch {
                epoch,
                batches_done,
                ..
            } => format!("inside epoch {epoch} ({batches_done} batches done)"),
            Cursor::EpochEnd { epoch } => format!("after epoch {epoch}"),
        }
    }
}

/// `checkpoint.json`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CheckpointInfo {
    /// fe-host's version that wrote it.
    pub fe_host_version: String,
    /// Global step.
    pub step: u64,
    /// Write order within the checkpoint root.
    pub sequence: u64,
    /// Where in the run.
    pub cursor: Cursor,
    /// The monitored evaluation value (`[checkpoint] monitor`), at epoch ends.
    pub monitor: Option<(String, f64)>,
    /// When it was written (`YYYYmmdd-HHMMSS`, UTC).
    pub created: String,
    /// The run that wrote it (a resumed run keeps the id of the run it continues); empty in
    /// checkpoints written before runs had ids. A run never deletes nor resumes from a
    /// checkpoint with another id by itself.
    #[serde(default)]
    pub run_id: String,
}

/// One loaded plugin, as recorded in `plugins.json`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PluginRecord {
    /// Crate name.
    pub name: String,
    /// Crate version.
    pub version: String,
    /// File name.
    pub file: String,
    /// sha256 of the file.
    pub sha256: String,
    /// fe-plugin-api, tch, libtorch and flavour it was built against.
    pub built_against: String,
}

impl PluginRecord {
    /// The record of a loaded plugin (hashes its file).
    pub fn of(plugin: &crate::plugins::load::LoadedPlugin) -> Result<Self> {
        let bytes = std::fs::read(&plugin.path).map_err(|e| Error::io(&plugin.path, e))?;
        let info = &plugin.info;
        Ok(Self {
            name: info.plugin_name.as_str().to_owned(),
            version: info.plugin_version.as_str().to_owned(),
            file: file_name(&plugin.path),
            sha256: store::sha256_hex(&bytes),
            built_against: format!(
                "fe-plugin-api {}, tch {}, libtorch {} {}",
                info.plugin_api_version.as_str(),
                info.tch_version.as_str(),
                info.libtorch_version.as_str(),
                info.libtorch_flavour.as_str()
            ),
        })
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A component of the run as `components.json` lists it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ComponentRecord {
    /// Stable id: `network.ops.3`, `network.ops.3.0` (a wrapped op), `traces.2`, ...
    pub id: String,
    /// What it is (`CrossEntropy (network.ops[1])`).
    pub name: String,
    /// Whether `states/<id>.json` exists.
    pub json: bool,
    /// Whether `states/<id>.safetensors` exists.
    pub tensors: bool,
}

/// The checkpoint root of `manifest`: its `[checkpoint] dir`, or `checkpoints` in the run's
/// version directory, or next to the manifest when the run has none (where `--resume` looks,
/// and where a run without `[checkpoint]` saves when it is stopped).
pub fn default_root(manifest: &crate::manifest::Manifest) -> std::path::PathBuf {
    let fallback = || match &manifest.outputs_moved {
        Some((_, version)) => version.join("checkpoints"),
        None => manifest.dir().join("checkpoints"),
    };
    manifest
        .checkpoint
        .as_ref()
        .map(|c| c.dir.clone())
        .unwrap_or_else(fallback)
}

/// The checkpoint root `path` means when it is not one itself: a root's `latest` file (its
/// root), a run directory whose `latest` links to its newest version (that version's
/// `checkpoints`), or a version directory (its `checkpoints`). Anything else is taken as given.
pub fn root_of(path: &Path) -> std::path::PathBuf {
    let named_latest = path.file_name() == Some(std::ffi::OsStr::new(store::LATEST));
    if named_latest && path.is_file() {
        if let Some(root) = path.parent() {
            return root.to_path_buf();
        }
    }
    if path.join(store::LATEST).is_dir() {
        return root_of(&path.join(store::LATEST));
    }
    let inner = path.join("checkpoints");
    if !path.join(store::LATEST).exists() && !path.join(store::MANIFEST).exists() && inner.is_dir()
    {
        return inner;
    }
    path.to_path_buf()
}

/// The checkpoint `path` names: a checkpoint directory, or a checkpoint root (its `latest`;
/// see [`root_of`] for the other paths that lead to one). Should `latest` name a directory that
/// is not a complete checkpoint (a power loss between the two renames of a write can leave
/// that), the newest complete checkpoint is used.
pub fn resolve(path: &Path) -> Result<std::path::PathBuf> {
    let root = root_of(path);
    let path = root.as_path();
    if path.join(store::MANIFEST).is_file() {
        return Ok(path.to_path_buf());
    }
    let latest = store::latest(path)?;
    if let Some(dir) = &latest {
        if dir.join(store::MANIFEST).is_file() {
            return Ok(dir.clone());
        }
    }
    let newest = newest_complete(path)?;
    match (latest, newest) {
        (Some(dangling), Some(newest)) => {
            eprintln!(
                "warning: {} names {}, which is not a complete checkpoint; using {}",
                path.join(store::LATEST).display(),
                dangling.display(),
                newest.display()
            );
            Ok(newest)
        }
        (None, Some(newest)) => Ok(newest),
        (Some(dangling), None) => Err(Error::Checkpoint {
            path: path.to_path_buf(),
            message: format!(
                "its `latest` names {}, which is not a complete checkpoint, and no other complete checkpoint is there",
                dangling.display()
            ),
        }),
        (None, None) if !path.exists() => Err(Error::Checkpoint {
            path: path.to_path_buf(),
            message: "does not exist".to_owned(),
        }),
        // The files of a checkpoint without its list: written last, so the write was cut
        // short, or the file was removed since.
        (None, None) if path.join("system.json").is_file() || path.join("models").is_dir() => {
            Err(Error::Checkpoint {
                path: path.to_path_buf(),
                message: format!(
                    "{} is missing: this checkpoint was not completely written, or its file list was removed, so nothing in it can be verified",
                    store::MANIFEST
                ),
            })
        }
        (None, None) => Err(Error::Checkpoint {
            path: path.to_path_buf(),
            message: "holds no complete checkpoint (no MANIFEST.json, and no `latest`)".to_owned(),
        }),
    }
}

/// Refuses to let run `run_id` write into `root` when it holds another run's checkpoints:
/// retention would rank them with the run's own, and `--resume` could continue the wrong run.
pub fn check_owner(root: &Path, run_id: &str) -> Result<()> {
    let foreign: Vec<String> = existing(root)?
        .into_iter()
        .filter(|s| s.run_id != run_id)
        .map(|s| s.name)
        .collect();
    if foreign.is_empty() {
        return Ok(());
    }
    let shown = if foreign.len() > 3 {
        format!(
            "{}, ... ({} in all)",
            foreign[..3].join(", "),
            foreign.len()
        )
    } else {
        foreign.join(", ")
    };
    Err(Error::Checkpoint {
        path: root.to_path_buf(),
        message: format!(
            "holds checkpoints of another run ({shown}): continue that run with --resume, or give this one another checkpoint folder ([checkpoint] dir)"
        ),
    })
}

/// The complete checkpoints of `root` as the retention policy sees them.
pub fn existing(root: &Path) -> Result<Vec<policy::Saved>> {
    let mut saved = Vec::new();
    for name in store::list(root)? {
        let path = root.join(&name).join("checkpoint.json");
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let info: CheckpointInfo =
            serde_json::from_slice(&bytes).map_err(|e| Error::Checkpoint {
                path: path.clone(),
                message: format!("is not what fe-host wrote: {e}"),
            })?;
        saved.push(policy::Saved {
            name,
            step: info.step,
            sequence: info.sequence,
            metric: info.monitor.map(|(_, v)| v),
            run_id: info.run_id,
        });
    }
    Ok(saved)
}

/// The newest complete checkpoint in `root`, by step and write order. A root holding the
/// checkpoints of several runs is refused: the newest need not be the run's own.
fn newest_complete(root: &Path) -> Result<Option<std::path::PathBuf>> {
    let mut best: Option<((u64, u64), std::path::PathBuf)> = None;
    let mut runs = std::collections::BTreeSet::new();
    for name in store::list(root)? {
        let dir = root.join(&name);
        let Ok(bytes) = std::fs::read(dir.join("checkpoint.json")) else {
            continue;
        };
        let Ok(info) = serde_json::from_slice::<CheckpointInfo>(&bytes) else {
            continue;
        };
        runs.insert(info.run_id);
        if runs.len() > 1 {
            return Err(Error::Checkpoint {
                path: root.to_path_buf(),
                message: "holds checkpoints of more than one run and its `latest` names none of them: resume from a checkpoint directory by name".into(),
            });
        }
        let key = (info.step, info.sequence);
        if best.as_ref().is_none_or(|(k, _)| key > *k) {
            best = Some((key, dir));
        }
    }
    Ok(best.map(|(_, dir)| dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(root: &Path, name: &str, step: u64, sequence: u64) {
        let info = CheckpointInfo {
            fe_host_version: "test".into(),
            step,
            sequence,
            cursor: Cursor::EpochEnd { epoch: 1 },
            monitor: None,
            created: String::new(),
            run_id: String::new(),
        };
        let files = vec![(
            "checkpoint.json".to_owned(),
            serde_json::to_vec(&info).unwrap(),
        )];
        store::write(root, name, &files).unwrap();
    }

    #[test]
    fn a_dangling_latest_falls_back_to_the_newest_complete_checkpoint() {
        let root = std::env::temp_dir().join(format!("fe-resolve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        checkpoint(&root, "ckpt-10", 10, 0);
        checkpoint(&root, "ckpt-20", 20, 1);
        assert_eq!(resolve(&root).unwrap(), root.join("ckpt-20"));
        assert_eq!(
            resolve(&root.join("ckpt-10")).unwrap(),
            root.join("ckpt-10")
        );
        store::set_latest(&root, "ckpt-30").unwrap();
        assert_eq!(resolve(&root).unwrap(), root.join("ckpt-20"));
        std::fs::remove_file(root.join(store::LATEST)).unwrap();
        assert_eq!(resolve(&root).unwrap(), root.join("ckpt-20"));
        let empty = root.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let err = resolve(&empty).unwrap_err().to_string();
        assert!(err.contains("holds no complete checkpoint"), "{err}");
        // A checkpoint whose file list is gone says so, not that the folder is empty.
        std::fs::create_dir_all(root.join("cut/models")).unwrap();
        std::fs::write(root.join("cut/system.json"), b"{}").unwrap();
        let err = resolve(&root.join("cut")).unwrap_err().to_string();
        assert!(err.contains("MANIFEST.json is missing"), "{err}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
