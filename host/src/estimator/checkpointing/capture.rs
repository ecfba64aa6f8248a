//! A checkpoint's files from the run: every stateful component's state, the models and their
//! optimizers, the System and the random states.

use fe_plugin_api::{Mode, State};
use tch::Tensor;

use super::{
    json_bytes, safetensors_bytes, ArchitectureFile, ModelRecord, OptimizerRecord, Stateful,
};
use crate::checkpoint::{CheckpointInfo, ComponentRecord, Cursor};
use crate::error::{Error, Result};
use crate::estimator::Estimator;
use crate::network::precision::GradScaler;

impl Estimator {
    pub(super) fn stateful(&self) -> Vec<(Stateful, String, String)> {
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
            Stateful::Trace(i) => self.traces[i].state(&self.strategy),
            Stateful::Model(i) => self.network.models[i].handle.state().map_err(text),
        }
    }

    pub(super) fn load_state_into(
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
            let state = self.state_of(component).map_err(|e| {
                match crate::dist::is_collective_failure(&e) {
                    true => Error::Run(e),
                    false => Error::Run(format!("cannot save the state of {name}: {e}")),
                }
            })?;
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
        // A single process keeps the one state under `cpu`, as checkpoints always had it.
        let mut rng = if self.strategy.is_data_parallel() {
            crate::estimator::parallel::gather_generators(
                &self.strategy,
                &cpu,
                cuda.as_ref().map(|(_, state)| state),
            )?
        } else {
            vec![("cpu".to_owned(), cpu)]
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
