//! The estimator's side of checkpoints: everything the run holds, turned into the files of
//! a checkpoint and back. What the files are and how they are written is in
//! [`crate::checkpoint`].

use std::path::{Path, PathBuf};

use fe_plugin_api::ffi::TrialEvent;
use serde::{Deserialize, Serialize};
use tch::Tensor;

use super::Estimator;
use crate::checkpoint::store::Files;
use crate::checkpoint::writer::{Job, Writer};
use crate::checkpoint::{existing, Cursor, PluginRecord};
use crate::error::{Error, Result};
use crate::manifest::CheckpointConfig;
use crate::network::precision::GradScaler;
use crate::system::tensors;

mod capture;
mod random_state;
mod restore;

/// What the estimator needs to write and resume checkpoints.
#[derive(Default)]
pub struct Checkpointing {
    /// When to save and what to keep; `None` writes no checkpoint during the run.
    pub config: Option<CheckpointConfig>,
    /// The manifest text the run was built from.
    pub manifest_text: String,
    /// The loaded plugins.
    pub plugins: Vec<PluginRecord>,
    /// Where a resumed run continues.
    pub resume: Option<Cursor>,
    /// Writes checkpoints while training continues.
    pub writer: Writer,
    /// Write order of the next checkpoint (found by scanning the root at the first save).
    pub next_sequence: Option<u64>,
    /// Where a run without `[checkpoint]` saves when a signal stops it.
    pub fallback_dir: PathBuf,
    /// The newest checkpoint this run wrote completely.
    pub last_written: Option<PathBuf>,
    /// This run's id in its checkpoints: new for a fresh run, the resumed run's otherwise.
    pub run_id: String,
}

/// `models/<name>.json`.
#[derive(Serialize, Deserialize)]
struct ModelRecord {
    architecture: String,
    current_optimizer: Option<usize>,
    scaler: Option<GradScaler>,
    optimizers: Vec<OptimizerRecord>,
    /// For a TorchScript architecture: the file and its sha256 (absent in checkpoints written
    /// before they were recorded, and for other architectures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    torchscript: Option<ArchitectureFile>,
}

/// The file an architecture was read from, as a checkpoint records it.
#[derive(Serialize, Deserialize)]
struct ArchitectureFile {
    file: String,
    sha256: String,
}

#[derive(Serialize, Deserialize)]
struct OptimizerRecord {
    summary: String,
    hyper: serde_json::Value,
}

/// A component with state, wherever it lives in the run.
#[derive(Clone, Copy)]
enum Stateful {
    Op(usize),
    Slicer(usize),
    Post(usize),
    PipelineOp(usize),
    Dataset(usize),
    Trace(usize),
    Model(usize),
}

fn internal(what: &str) -> impl FnOnce(serde_json::Error) -> Error + '_ {
    move |e| Error::Internal(format!("cannot serialize {what}: {e}"))
}

fn json_bytes<T: Serialize>(value: &T, what: &str) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(value).map_err(internal(what))
}

fn safetensors_bytes(tensors: &[(String, Tensor)], file: &str) -> Result<Vec<u8>> {
    tensors::serialize(tensors).map_err(|e| Error::Run(format!("cannot save {file}: {e}")))
}

impl Files {
    pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T> {
        serde_json::from_slice(self.get(path)?).map_err(|e| Error::Checkpoint {
            path: self.dir.join(path),
            message: format!("is not what fe-host wrote: {e}"),
        })
    }

    fn tensors(&self, path: &str) -> Result<Vec<(String, Tensor)>> {
        tensors::deserialize(self.get(path)?).map_err(|message| Error::Checkpoint {
            path: self.dir.join(path),
            message,
        })
    }

    fn problem(&self, path: &str, message: impl Into<String>) -> Error {
        Error::Checkpoint {
            path: self.dir.join(path),
            message: message.into(),
        }
    }
}

/// How a resumed run may differ from its checkpoint.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResumeOptions {
    /// Accept compatible differences (more epochs, another log interval, a rebuilt plugin).
    pub allow_changes: bool,
    /// The epoch count the command line sets, if it overrides the manifest's.
    pub epochs: Option<u32>,
    /// The rank restoring, in a data-parallel run (0 alone): it continues its own random
    /// stream. Restores come before the ranks train as one, so before the estimator's
    /// strategy knows the rank.
    pub rank: usize,
}

impl Estimator {
    /// Reports `event` with `dir` to every trace.
    pub(super) fn trial_event(&mut self, event: TrialEvent, dir: &Path) -> Result<()> {
        let dir = dir.to_string_lossy().into_owned();
        for trace in &mut self.traces {
            trace.event(event, &dir)?;
        }
        Ok(())
    }

    /// Takes a checkpoint at `cursor` into the configured checkpoint root (if any): the
    /// snapshot now, the writing (and removing what the policy no longer keeps) on the
    /// background writer, or here with `background = false`. The write before it finishes
    /// first, and its traces' `on_checkpoint_end` run.
    pub fn save_checkpoint(&mut self, cursor: Cursor) -> Result<()> {
        if self.checkpointing.config.is_none() && self.stop.decided.is_some() {
            // Stopped by a signal without `[checkpoint]`: the work is saved where `--resume`
            // looks, in the foreground since the run ends right after.
            let mut dir = self.checkpointing.fallback_dir.clone();
            if crate::checkpoint::check_owner(&dir, &self.checkpointing.run_id).is_err() {
                // Another run's checkpoints are there: this run's go into a folder of its own.
                dir = dir.join(&self.checkpointing.run_id);
            }
            self.checkpointing.config = Some(CheckpointConfig {
                dir,
                dir_named: true,
                every_epochs: None,
                every_steps: None,
                keep_last: None,
                keep_best: None,
                monitor: None,
                maximize: false,
                background: false,
            });
        }
        let Some(config) = self.checkpointing.config.clone() else {
            return Ok(());
        };
        self.finish_checkpoint()?;
        let root = &config.dir;
        let sequence = match self.checkpointing.next_sequence {
            Some(n) => n,
            None => existing(root)?
                .iter()
                .map(|s| s.sequence + 1)
                .max()
                .unwrap_or(0),
        };
        self.checkpointing.next_sequence = Some(sequence + 1);
        // The logs on disk must reach the step the checkpoint does: a run that crashes after it
        // resumes there and keeps the rows up to it, so rows still in a buffer would be lost
        // for good (a run killed mid-epoch lost its log back to the start).
        for trace in &mut self.traces {
            trace.flush()?;
        }
        // Every rank captures (the capture gathers the ranks' metric and random states, a
        // collective); rank 0 alone writes.
        let files = self.capture(cursor, sequence)?;
        let step = self.system.global_step;
        if !self.strategy.writes_outputs() {
            self.checkpointing.last_written = Some(root.join(format!("ckpt-{step}")));
            return Ok(());
        }
        let mut name = format!("ckpt-{step}");
        let mut n = 1;
        while root.join(&name).exists() {
            name = format!("ckpt-{step}.{n}");
            n += 1;
        }
        let background = config.background;
        let job = Job {
            name,
            files,
            config,
            run_id: self.checkpointing.run_id.clone(),
        };
        if background {
            self.checkpointing.writer.start(job)?;
        } else {
            let dir = job.run()?;
            self.checkpointing.last_written = Some(dir.clone());
            crate::stop::checkpoint_complete();
            self.trial_event(TrialEvent::CheckpointEnd, &dir)?;
        }
        Ok(())
    }

    /// Ends a run a signal stopped: waits for its checkpoint, flushes the logs and returns the
    /// [`Error::Stopped`] that says where it can continue.
    pub(super) fn stopped(&mut self) -> Result<()> {
        self.finish_checkpoint()?;
        for trace in &mut self.traces {
            trace.flush()?;
        }
        // The ranks leave together, once rank 0's checkpoint is durable: a launcher (torchrun's
        // agent, `--nproc`) ends the other ranks as soon as one exits.
        self.strategy.barrier()?;
        let signal = self
            .stop
            .decided
            .map_or("a signal", crate::stop::Signal::name);
        let checkpoint = self
            .checkpointing
            .last_written
            .clone()
            .ok_or_else(|| Error::Internal("a stopped run wrote no checkpoint".into()))?;
        Err(Error::Stopped {
            signal,
            step: self.system.global_step,
            checkpoint,
            resume: "fe-host run MANIFEST --resume".into(),
        })
    }

    /// Waits for the checkpoint being written, if any, and tells the traces it is complete.
    /// Returns its directory.
    pub fn finish_checkpoint(&mut self) -> Result<Option<PathBuf>> {
        let written = self.checkpointing.writer.wait()?;
        if let Some(dir) = &written {
            self.checkpointing.last_written = Some(dir.clone());
            crate::stop::checkpoint_complete();
            self.trial_event(TrialEvent::CheckpointEnd, dir)?;
        }
        Ok(written)
    }
}
