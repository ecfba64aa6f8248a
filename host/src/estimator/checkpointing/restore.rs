//! The run from a checkpoint's files, after checking the checkpoint was written by this run's
//! manifest, plugins and components.

use std::path::{Path, PathBuf};

use fe_plugin_api::ffi::TrialEvent;
use fe_plugin_api::State;
use tch::Tensor;

use super::{ModelRecord, ResumeOptions};
use crate::checkpoint::store::{self, Files};
use crate::checkpoint::{compat, CheckpointInfo, ComponentRecord, Cursor, PluginRecord};
use crate::error::{Error, Result};
use crate::estimator::Estimator;
use crate::system::System;

impl Estimator {
    /// Restores the whole run from the checkpoint at `path` (a checkpoint, or a checkpoint
    /// root whose `latest` is used), after checking that it was written by this run's
    /// manifest, plugins and components. Returns the checkpoint directory.
    pub fn resume(&mut self, path: &Path, options: ResumeOptions) -> Result<PathBuf> {
        let dir = crate::checkpoint::resolve(path)?;
        let files = store::read(&dir)?;
        self.resume_from_files(&files, options)?;
        Ok(dir)
    }

    /// [`Estimator::resume`] from a checkpoint already read and verified: the ranks of a
    /// data-parallel run restore the very files they compared, not a second read of them.
    pub fn resume_from_files(&mut self, files: &Files, options: ResumeOptions) -> Result<()> {
        let cursor = self.restore(files, options)?;
        self.checkpointing.resume = Some(cursor);
        self.trial_event(TrialEvent::CheckpointLoad, &files.dir)
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
        compat::epochs_left(&info, self.system.total_epochs, options.epochs.is_some())
            .map_err(|message| Error::Usage(format!("{}: {message}", files.dir.display())))?;
        // Checked before anything is restored: a state missing from it is not noticed later.
        let rng = files.tensors("rng.safetensors")?;
        super::random_state::check(&rng, self.network.device)
            .map_err(|message| files.problem("rng.safetensors", message))?;
        self.restore_components(files)?;
        self.restore_models(files)?;
        let system: System = files.parse_json("system.json")?;
        self.restore_system(system);
        let rank = options.rank;
        if let Some(state) = crate::estimator::parallel::this_ranks_generator(&rng, rank) {
            crate::shim::set_generator_state(crate::shim::Generator::Cpu, state)
                .map_err(|e| files.problem("rng.safetensors", format!("`rank{rank}/cpu`: {e}")))?;
        }
        // A checkpoint written on a GPU resumes on the CPU without its CUDA state; on a GPU,
        // the saved stream continues on this run's device, per rank as for the CPU.
        if let tch::Device::Cuda(index) = self.network.device {
            if let Some((name, state)) =
                crate::estimator::parallel::this_ranks_cuda_generator(&rng, rank)
            {
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
                let params = crate::optim::Parameters {
                    model: &name,
                    names: &model.param_names,
                    tensors: &model.params,
                };
                slot.optimizer
                    .load_state(&saved.hyper, &tensors, &params)
                    .map_err(|e| files.problem(&file, e))?;
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
}
