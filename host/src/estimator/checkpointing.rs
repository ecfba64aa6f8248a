//! The estimator's side of checkpoints: everything the run holds, turned into the files of
//! a checkpoint and back. What the files are and how they are written is in
//! [`crate::checkpoint`].

use std::path::{Path, PathBuf};

use fe_plugin_api::ffi::TrialEvent;
use fe_plugin_api::{Mode, State};
use serde::{Deserialize, Serialize};
use tch::Tensor;

use super::Estimator;
use crate::checkpoint::store::{self, Files};
use crate::checkpoint::writer::{Job, Writer};
use crate::checkpoint::{compat, existing, CheckpointInfo, ComponentRecord, Cursor, PluginRecord};
use crate::error::{Error, Result};
use crate::manifest::CheckpointConfig;
use crate::network::precision::GradScaler;
use crate::system::{tensors, System};

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
    fn parse_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T> {
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

impl Estimator {
    fn stateful(&self) -> Vec<(Stateful, String, String)> {
        let mut out = Vec::new();
        let network = &self.network;
        for (i, op) in network.ops.iter().enumerate() {
            out.push((
                Stateful::Op(i),
                format!("network.ops.{i}"),
                op.label.clone(),
            ));
        }
        for (i, slicer) in network.slicers.iter().enumerate() {
            out.push((
                Stateful::Slicer(i),
                format!("network.slicers.{i}"),
                slicer.label.clone(),
            ));
        }
        for (i, op) in network.post.iter().enumerate() {
            out.push((
                Stateful::Post(i),
                format!("network.postprocessing.{i}"),
                op.label.clone(),
            ));
        }
        for (i, op) in self.pipeline.ops.iter().enumerate() {
            out.push((
                Stateful::PipelineOp(i),
                format!("pipeline.ops.{i}"),
                op.label.clone(),
            ));
        }
        for (i, dataset) in self.pipeline.datasets.iter().enumerate() {
            let name = match dataset.ds_id.as_str() {
                "" => format!("the {} dataset", dataset.mode),
                id => format!("the {} dataset `{id}`", dataset.mode),
            };
            out.push((Stateful::Dataset(i), format!("pipeline.data.{i}"), name));
        }
        for (i, trace) in self.traces.iter().enumerate() {
            out.push((
                Stateful::Trace(i),
                format!("traces.{i}"),
                trace.label.clone(),
            ));
        }
        for (i, model) in network.models.iter().enumerate() {
            let name = format!("{} ({})", model.name, model.architecture);
            out.push((Stateful::Model(i), format!("models.{}", model.name), name));
        }
        out
    }

    fn state_of(&self, component: Stateful) -> std::result::Result<State, String> {
        let text = |e: fe_plugin_api::PluginError| e.to_string();
        match component {
            Stateful::Op(i) => self.network.ops[i].state(),
            Stateful::Slicer(i) => self.network.slicers[i].handle.state().map_err(text),
            Stateful::Post(i) => self.network.post[i].handle.state().map_err(text),
            Stateful::PipelineOp(i) => self.pipeline.ops[i].handle.state().map_err(text),
            Stateful::Dataset(i) => self.pipeline.datasets[i].source.state(),
            Stateful::Trace(i) => self.traces[i].state(),
            Stateful::Model(i) => self.network.models[i].handle.state().map_err(text),
        }
    }

    fn load_state_into(
        &mut self,
        component: Stateful,
        state: State,
    ) -> std::result::Result<(), String> {
        let text = |e: fe_plugin_api::PluginError| e.to_string();
        match component {
            Stateful::Op(i) => self.network.ops[i].load_state(state),
            Stateful::Slicer(i) => self.network.slicers[i]
                .handle
                .load_state(state)
                .map_err(text),
            Stateful::Post(i) => self.network.post[i].handle.load_state(state).map_err(text),
            Stateful::PipelineOp(i) => self.pipeline.ops[i].handle.load_state(state).map_err(text),
            Stateful::Dataset(i) => self.pipeline.datasets[i].source.load_state(state),
            Stateful::Trace(i) => self.traces[i].load_state(state),
            Stateful::Model(i) => self.network.models[i]
                .handle
                .load_state(state)
                .map_err(text),
        }
    }

    /// Every file of a checkpoint of the run as it is now, at `cursor`.
    pub fn capture(&self, cursor: Cursor, sequence: u64) -> Result<Vec<(String, Vec<u8>)>> {
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        let monitor = self
            .checkpointing
            .config
            .as_ref()
            .and_then(|c| c.monitor.clone());
        let monitor = match (cursor, monitor) {
            (Cursor::EpochEnd { .. }, Some(key)) => self
                .system
                .summary
                .at(Mode::Eval, &key, self.system.global_step)
                .map(|value| (key, value)),
            _ => None,
        };
        let info = CheckpointInfo {
            fe_host_version: env!("CARGO_PKG_VERSION").to_owned(),
            step: self.system.global_step,
            sequence,
            cursor,
            monitor,
            created: crate::system::timestamp(),
            run_id: self.checkpointing.run_id.clone(),
        };
        files.push((
            "checkpoint.json".into(),
            json_bytes(&info, "checkpoint.json")?,
        ));
        files.push((
            "system.json".into(),
            json_bytes(&self.system, "system.json")?,
        ));
        files.push((
            "manifest.toml".into(),
            self.checkpointing.manifest_text.clone().into_bytes(),
        ));
        files.push((
            "plugins.json".into(),
            json_bytes(&self.checkpointing.plugins, "plugins.json")?,
        ));
        for model in &self.network.models {
            let name = &model.name;
            let variables: Vec<(String, Tensor)> = model
                .named_variables()
                .map(|(n, t)| (n.to_owned(), t.detach()))
                .collect();
            let file = format!("models/{name}.safetensors");
            files.push((file.clone(), safetensors_bytes(&variables, &file)?));
            let mut optimizers = Vec::new();
            for (k, slot) in model.optimizers.iter().enumerate() {
                optimizers.push(OptimizerRecord {
                    summary: slot.summary.clone(),
                    hyper: slot.optimizer.hyper_state(),
                });
                let state = slot.optimizer.tensor_state();
                if !state.is_empty() {
                    let file = format!("optim/{name}.{k}.safetensors");
                    files.push((file.clone(), safetensors_bytes(&state, &file)?));
                }
            }
            let record = ModelRecord {
                architecture: model.architecture.clone(),
                current_optimizer: model.current_optimizer,
                scaler: model
                    .scaler
                    .as_ref()
                    .map(GradScaler::snapshot)
                    .transpose()
                    .map_err(Error::Run)?,
                optimizers,
                torchscript: model.torchscript.as_ref().map(|source| ArchitectureFile {
                    file: source.file.display().to_string(),
                    sha256: source.sha256.clone(),
                }),
            };
            files.push((
                format!("models/{name}.json"),
                json_bytes(&record, "a model record")?,
            ));
        }
        let mut components = Vec::new();
        for (component, id, name) in self.stateful() {
            let state = self
                .state_of(component)
                .map_err(|e| Error::Run(format!("cannot save the state of {name}: {e}")))?;
            let (json, tensors) = state.into_parts();
            let (has_json, has_tensors) = (!json.is_empty(), !tensors.is_empty());
            if has_json {
                files.push((format!("states/{id}.json"), json.into_bytes()));
            }
            if has_tensors {
                let file = format!("states/{id}.safetensors");
                files.push((file.clone(), safetensors_bytes(&tensors, &file)?));
            }
            components.push(ComponentRecord {
                id,
                name,
                json: has_json,
                tensors: has_tensors,
            });
        }
        files.push((
            "components.json".into(),
            json_bytes(&components, "components.json")?,
        ));
        let cpu = crate::shim::generator_state(crate::shim::Generator::Cpu)
            .map_err(|e| Error::Run(format!("cannot save the CPU random state: {e}")))?;
        let cuda = match self.network.device {
            tch::Device::Cuda(index) => Some((
                index,
                crate::shim::generator_state(crate::shim::Generator::Cuda(index))
                    .map_err(|e| Error::Run(format!("cannot save the CUDA random state: {e}")))?,
            )),
            _ => None,
        };
        let mut rng = match &self.network.group {
            Some(group) => super::parallel::gather_generators(
                group,
                &cpu,
                cuda.as_ref().map(|(_, state)| state),
            )?,
            None => vec![("cpu".to_owned(), cpu)],
        };
        if let Some((index, state)) = cuda {
            rng.push((format!("cuda:{index}"), state));
        }
        files.push((
            "rng.safetensors".into(),
            safetensors_bytes(&rng, "rng.safetensors")?,
        ));
        Ok(files)
    }
}

/// How a resumed run may differ from its checkpoint.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResumeOptions {
    /// Accept compatible differences (more epochs, another log interval, a rebuilt plugin).
    pub allow_changes: bool,
    /// The epoch count the command line sets, if it overrides the manifest's.
    pub epochs: Option<u32>,
}

impl Estimator {
    /// Restores the whole run from the checkpoint at `path` (a checkpoint, or a checkpoint
    /// root whose `latest` is used), after checking that it was written by this run's
    /// manifest, plugins and components. Returns the checkpoint directory.
    pub fn resume(&mut self, path: &Path, options: ResumeOptions) -> Result<PathBuf> {
        let dir = crate::checkpoint::resolve(path)?;
        let files = store::read(&dir)?;
        let cursor = self.restore(&files, options)?;
        self.checkpointing.resume = Some(cursor);
        self.trial_event(TrialEvent::CheckpointLoad, &dir)?;
        Ok(dir)
    }

    /// Loads every file of a verified checkpoint into the run; returns its cursor.
    pub fn restore(&mut self, files: &Files, options: ResumeOptions) -> Result<Cursor> {
        let info: CheckpointInfo = files.parse_json("checkpoint.json")?;
        // The resumed run goes on under the id it had (empty for checkpoints older than ids).
        self.checkpointing.run_id = info.run_id.clone();
        let saved_manifest = std::str::from_utf8(files.get("manifest.toml")?)
            .map_err(|_| files.problem("manifest.toml", "is not UTF-8 text"))?;
        let mut differences = compat::manifest_differences(
            saved_manifest,
            &self.checkpointing.manifest_text,
            options.epochs,
        )
        .map_err(|message| files.problem("manifest.toml", message))?;
        if options.epochs.is_some() {
            // `--epochs` on the command line is consent to the epoch count it sets.
            differences
                .compatible
                .retain(|d| !d.starts_with("run.epochs: "));
        }
        let plugins: Vec<PluginRecord> = files.parse_json("plugins.json")?;
        differences.extend(compat::plugin_differences(
            &plugins,
            &self.checkpointing.plugins,
        ));
        differences.extend(self.architecture_differences(files)?);
        differences
            .verdict(options.allow_changes)
            .map_err(|message| Error::Checkpoint {
                path: files.dir.clone(),
                message,
            })?;
        self.restore_components(files)?;
        self.restore_models(files)?;
        let system: System = files.parse_json("system.json")?;
        self.restore_system(system);
        let rng = files.tensors("rng.safetensors")?;
        let rank = crate::dist::role::rank();
        if let Some(state) = super::parallel::this_ranks_generator(&rng, rank) {
            crate::shim::set_generator_state(crate::shim::Generator::Cpu, state)
                .map_err(|e| files.problem("rng.safetensors", format!("`rank{rank}/cpu`: {e}")))?;
        }
        // A checkpoint written on a GPU resumes on the CPU without its CUDA state; on a GPU,
        // the saved stream continues on this run's device, per rank as for the CPU.
        if let tch::Device::Cuda(index) = self.network.device {
            if let Some((name, state)) = super::parallel::this_ranks_cuda_generator(&rng, rank) {
                crate::shim::set_generator_state(crate::shim::Generator::Cuda(index), state)
                    .map_err(|e| files.problem("rng.safetensors", format!("`{name}`: {e}")))?;
            }
        }
        Ok(info.cursor)
    }

    fn restore_components(&mut self, files: &Files) -> Result<()> {
        let saved: Vec<ComponentRecord> = files.parse_json("components.json")?;
        let components = self.stateful();
        // FastEstimator's check: the same number of components, then the same ones in order.
        let group = |id: &str| {
            id.rsplit_once('.')
                .map_or(id.to_owned(), |(g, _)| g.to_owned())
        };
        let count =
            |list: &mut dyn Iterator<Item = String>, g: &str| list.filter(|x| *x == g).count();
        for (_, id, _) in &components {
            let g = group(id);
            let (ours, theirs) = (
                count(&mut components.iter().map(|(_, id, _)| group(id)), &g),
                count(&mut saved.iter().map(|c| group(&c.id)), &g),
            );
            if ours != theirs {
                return Err(files.problem(
                    "components.json",
                    format!("has {theirs} {g} but this run has {ours}: the checkpoint is from another network"),
                ));
            }
        }
        if saved.len() != components.len() {
            return Err(files.problem(
                "components.json",
                format!(
                    "lists {} components but this run has {}",
                    saved.len(),
                    components.len()
                ),
            ));
        }
        for ((component, id, name), record) in components.into_iter().zip(saved) {
            if record.id != id || record.name != name {
                return Err(files.problem(
                    "components.json",
                    format!(
                        "has {} as {}, but this run has {name} there",
                        record.name, record.id
                    ),
                ));
            }
            let json = if record.json {
                let path = format!("states/{id}.json");
                String::from_utf8(files.get(&path)?.to_vec())
                    .map_err(|_| files.problem(&path, "is not UTF-8 text"))?
            } else {
                String::new()
            };
            let tensors = if record.tensors {
                files.tensors(&format!("states/{id}.safetensors"))?
            } else {
                Vec::new()
            };
            let path = if record.json {
                format!("states/{id}.json")
            } else {
                format!("states/{id}.safetensors")
            };
            self.load_state_into(component, State::from_parts(json, tensors))
                .map_err(|e| files.problem(&path, format!("cannot be loaded into {name}: {e}")))?;
        }
        Ok(())
    }

    /// A TorchScript file whose contents changed since the checkpoint is another architecture
    /// under the same manifest text: refused like an edit of the manifest.
    fn architecture_differences(&self, files: &Files) -> Result<compat::Differences> {
        let mut differences = compat::Differences::default();
        for model in &self.network.models {
            let Some(source) = &model.torchscript else {
                continue;
            };
            let record_path = format!("models/{}.json", model.name);
            if !files.has(&record_path) {
                continue;
            }
            let record: ModelRecord = files.parse_json(&record_path)?;
            if let Some(saved) = record
                .torchscript
                .filter(|saved| saved.sha256 != source.sha256)
            {
                differences.incompatible.push(format!(
                    "the TorchScript file of model `{}` changed: {} had sha256 {} and {} has {}",
                    model.name,
                    saved.file,
                    saved.sha256,
                    source.file.display(),
                    source.sha256
                ));
            }
        }
        Ok(differences)
    }

    fn restore_models(&mut self, files: &Files) -> Result<()> {
        for model in &mut self.network.models {
            let name = model.name.clone();
            let weights = format!("models/{name}.safetensors");
            let values = files.tensors(&weights)?;
            crate::system::weights::copy_into(model, &values, &files.dir.join(&weights))?;
            let record_path = format!("models/{name}.json");
            let record: ModelRecord = files.parse_json(&record_path)?;
            if record.optimizers.len() != model.optimizers.len() {
                return Err(files.problem(
                    &record_path,
                    format!(
                        "has {} optimizer(s) for `{name}` but this run has {}",
                        record.optimizers.len(),
                        model.optimizers.len()
                    ),
                ));
            }
            for (k, (slot, saved)) in model
                .optimizers
                .iter_mut()
                .zip(&record.optimizers)
                .enumerate()
            {
                let file = format!("optim/{name}.{k}.safetensors");
                let tensors = if files.has(&file) {
                    files.tensors(&file)?
                } else {
                    Vec::new()
                };
                let device = model
                    .params
                    .first()
                    .map(Tensor::device)
                    .unwrap_or(tch::Device::Cpu);
                let tensors = tensors
                    .into_iter()
                    .map(|(n, t)| t.f_to_device(device).map(|t| (n, t)))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| files.problem(&file, crate::tch_message(e)))?;
                slot.optimizer
                    .load_state(&saved.hyper, &tensors)
                    .map_err(|e| {
                        files.problem(&file, format!("cannot restore `{}`: {e}", saved.summary))
                    })?;
            }
            model.current_optimizer = record.current_optimizer;
            if model.scaler.is_some() {
                model.scaler = record.scaler;
            }
        }
        Ok(())
    }

    /// Takes the saved System, keeping what the current command sets (epoch count, logging,
    /// steps per epoch).
    fn restore_system(&mut self, saved: System) {
        let current = &self.system;
        self.system = System {
            total_epochs: current.total_epochs,
            log_steps: current.log_steps,
            train_steps_per_epoch: current.train_steps_per_epoch,
            eval_steps_per_epoch: current.eval_steps_per_epoch,
            ..saved
        };
    }

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
        // Every rank captures (the capture gathers the ranks' metric and random states, a
        // collective); rank 0 alone writes.
        let files = self.capture(cursor, sequence)?;
        let step = self.system.global_step;
        if !crate::dist::role::writes_outputs() {
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
            self.trial_event(TrialEvent::CheckpointEnd, dir)?;
        }
        Ok(written)
    }
}
