//! Traces as the estimator runs them: plugin traces and metrics behind the boundary, and the
//! host's own traces (losses, logging) that need the run's internals.

use std::collections::BTreeSet;

use abi_stable::std_types::RString;
use fe_plugin_api::ffi::{TraceHook, TrialEvent};
use fe_plugin_api::{
    ComponentKind, DeviceSpec, Mode, State, StepContext, TraceContext, Value, ValueRef,
};
use smallvec::SmallVec;

use super::data::{Data, Logged};
use super::lr_traces::{LrScheduler, LrSchedulerConfig, ReduceLrConfig, ReduceLrOnPlateau};
use crate::error::{Error, Result};
use crate::manifest::{ComponentSpec, Manifest};
use crate::network::{step_error, Batch, KeyId, Keys, Network};
use crate::plugins::create::{creation_error, unknown_component, Creation};
use crate::plugins::handles::TraceHandle;
use crate::plugins::Registry;
use crate::schedule::{DsFilter, InForce, ModeFilter, Scheduled};
use crate::system::System;

/// What a hook can see and change.
pub struct Cx<'a> {
    /// The run state (traces may set `stop_training`).
    pub system: &'a mut System,
    /// The network (models, learning rates).
    pub network: &'a mut Network,
    /// Writes of this hook group.
    pub data: &'a mut Data,
    /// Samples in the current batch (batch hooks).
    pub batch_size: i64,
}

/// A trace implemented by the host.
pub trait HostTrace {
    /// Keys it reads from batches.
    fn inputs(&self) -> Vec<KeyId> {
        Vec::new()
    }
    /// Before the first epoch.
    fn on_begin(&mut self, _cx: &mut Cx<'_>) -> Result<()> {
        Ok(())
    }
    /// At the start of an epoch.
    fn on_epoch_begin(&mut self, _cx: &mut Cx<'_>) -> Result<()> {
        Ok(())
    }
    /// Before a batch.
    fn on_batch_begin(&mut self, _cx: &mut Cx<'_>) -> Result<()> {
        Ok(())
    }
    /// After a batch.
    fn on_batch_end(&mut self, _cx: &mut Cx<'_>, _batch: &Batch) -> Result<()> {
        Ok(())
    }
    /// At the end of an epoch.
    fn on_epoch_end(&mut self, _cx: &mut Cx<'_>) -> Result<()> {
        Ok(())
    }
    /// After training (also after an early stop).
    fn on_end(&mut self, _cx: &mut Cx<'_>) -> Result<()> {
        Ok(())
    }
    /// What a checkpoint must keep for the run to continue exactly (`Null`: nothing).
    fn state(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// Restores what [`HostTrace::state`] returned.
    fn load_state(&mut self, _state: serde_json::Value) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// A plugin trace with its resolved keys.
pub struct PluginTrace {
    handle: TraceHandle,
    metric: bool,
    input_names: Vec<RString>,
    input_ids: Vec<KeyId>,
    outputs: Vec<String>,
}

/// What a trace is.
pub enum TraceKind {
    /// From a plugin.
    Plugin(PluginTrace),
    /// From the host.
    Host(Box<dyn HostTrace>),
}

/// One trace with its filters.
pub struct TraceSlot {
    /// `Name (traces[i])`.
    pub label: String,
    /// Modes it runs in.
    pub modes: ModeFilter,
    /// Dataset ids it runs for.
    pub ds_ids: DsFilter,
    /// Epochs it is in force (scheduled traces).
    pub epochs: InForce,
    /// The trace.
    pub kind: TraceKind,
}

impl TraceSlot {
    /// A host trace running in `modes`.
    pub fn host(label: &str, modes: ModeFilter, trace: Box<dyn HostTrace>) -> Self {
        Self {
            label: label.to_owned(),
            modes,
            ds_ids: DsFilter::Any,
            epochs: InForce::always(),
            kind: TraceKind::Host(trace),
        }
    }

    /// Whether it runs in `mode` in `epoch` (and, when given, for `ds_id`).
    pub fn active(&self, mode: Mode, epoch: u32, ds_id: Option<&str>) -> bool {
        self.modes.contains(mode)
            && self.epochs.at(epoch)
            && ds_id.is_none_or(|id| self.ds_ids.matches(id))
    }

    /// Batch keys it reads.
    pub fn batch_inputs(&self) -> Vec<KeyId> {
        match &self.kind {
            TraceKind::Plugin(p) => p.input_ids.clone(),
            TraceKind::Host(h) => h.inputs(),
        }
    }

    /// Names of the keys it reads (plugin traces).
    pub fn input_names(&self) -> Vec<String> {
        match &self.kind {
            TraceKind::Plugin(p) => p.input_names.iter().map(|n| n.to_string()).collect(),
            TraceKind::Host(_) => Vec::new(),
        }
    }

    /// Names of the keys it writes (plugin traces).
    pub fn output_names(&self) -> &[String] {
        match &self.kind {
            TraceKind::Plugin(p) => &p.outputs,
            TraceKind::Host(_) => &[],
        }
    }

    /// Runs `hook`. `batch` is given for the batch hooks.
    pub fn run(&mut self, hook: TraceHook, cx: &mut Cx<'_>, batch: Option<&Batch>) -> Result<()> {
        match &mut self.kind {
            TraceKind::Host(trace) => match (hook, batch) {
                (TraceHook::Begin, _) => trace.on_begin(cx),
                (TraceHook::EpochBegin, _) => trace.on_epoch_begin(cx),
                (TraceHook::BatchBegin, _) => trace.on_batch_begin(cx),
                (TraceHook::BatchEnd, Some(batch)) => trace.on_batch_end(cx, batch),
                (TraceHook::EpochEnd, _) => trace.on_epoch_end(cx),
                (TraceHook::End, _) => trace.on_end(cx),
                _ => Ok(()),
            },
            TraceKind::Plugin(trace) => trace.run(hook, cx, batch),
        }
    }

    /// Its checkpointable state (host traces keep theirs as JSON).
    pub fn state(&self) -> std::result::Result<State, String> {
        match &self.kind {
            TraceKind::Plugin(trace) => trace.handle.state().map_err(|e| e.to_string()),
            TraceKind::Host(trace) => match trace.state() {
                serde_json::Value::Null => Ok(State::empty()),
                json => Ok(State::from_parts(json.to_string(), Vec::new())),
            },
        }
    }

    /// Restores what [`TraceSlot::state`] returned.
    pub fn load_state(&mut self, state: State) -> std::result::Result<(), String> {
        match &mut self.kind {
            TraceKind::Plugin(trace) => trace.handle.load_state(state).map_err(|e| e.to_string()),
            TraceKind::Host(trace) => {
                let json = match state.json_text() {
                    "" => serde_json::Value::Null,
                    text => serde_json::from_str(text)
                        .map_err(|e| format!("invalid state JSON: {e}"))?,
                };
                trace.load_state(json)
            }
        }
    }

    /// Reports a checkpoint or trial event to plugin traces.
    pub fn event(&mut self, event: TrialEvent, dir: &str) -> Result<()> {
        match &mut self.kind {
            TraceKind::Plugin(trace) => {
                trace
                    .handle
                    .event(event, dir)
                    .map_err(|error| Error::Component {
                        error,
                        during: "trial event".to_owned(),
                    })
            }
            TraceKind::Host(_) => Ok(()),
        }
    }
}

impl PluginTrace {
    fn run(&mut self, hook: TraceHook, cx: &mut Cx<'_>, batch: Option<&Batch>) -> Result<()> {
        let system = &*cx.system;
        let mode = system.mode.unwrap_or(Mode::Train);
        let ds_id = system.ds_id.clone();
        let total_epochs = system.total_epochs;
        let step = StepContext {
            mode,
            epoch: system.epoch_idx,
            global_step: system.global_step,
            batch_idx: system.batch_idx,
            ds_id: ds_id.as_str().into(),
            warmup: false,
            seed: 0,
        };
        let ctx = TraceContext {
            step,
            total_epochs,
            batch_size: if batch.is_some() {
                cx.batch_size.max(0) as u64
            } else {
                0
            },
        };
        // A metric only needs its inputs after each batch; its epoch hooks carry no data.
        if self.metric
            && hook != TraceHook::BatchEnd
            && hook != TraceHook::EpochBegin
            && hook != TraceHook::EpochEnd
        {
            return Ok(());
        }
        let output = {
            let values: SmallVec<[ValueRef<'_>; 4]> = self
                .input_names
                .iter()
                .zip(&self.input_ids)
                .map(|(name, id)| match batch.and_then(|b| b.get(*id)) {
                    Some(tensor) => ValueRef::Tensor(tensor.into()),
                    None => match cx.data.get(name.as_str()) {
                        Some(Logged::Scalar(v)) => ValueRef::Float(*v),
                        Some(Logged::Tensor(t)) => ValueRef::Tensor(t.into()),
                        Some(Logged::Text(s)) => ValueRef::Text(s.as_str().into()),
                        None => ValueRef::Missing,
                    },
                })
                .collect();
            self.handle.hook(hook, &ctx, &self.input_names, &values)
        }
        .map_err(|error| step_error(error, &step))?;
        for write in output.writes {
            let value = match write.value {
                Value::Float(v) => Logged::Scalar(v),
                Value::Int(v) => Logged::Scalar(v as f64),
                Value::Text(s) => Logged::Text(s.into_string()),
                Value::Tensor(t) => Logged::Tensor(t.into_tensor()),
            };
            cx.data.write(write.key.as_str(), value, write.log);
        }
        if output.stop_training {
            cx.system.stop_training = true;
        }
        if self.metric && hook == TraceHook::EpochEnd {
            self.write_metric(cx, &step)?;
        }
        Ok(())
    }

    /// Reduces this worker's partial state (the only worker, for now) into the metric's values.
    fn write_metric(&mut self, cx: &mut Cx<'_>, step: &StepContext<'_>) -> Result<()> {
        let partial = self
            .handle
            .metric_partial()
            .map_err(|error| step_error(error, step))?;
        let values = self
            .handle
            .metric_reduce(partial.into_iter().collect())
            .map_err(|error| step_error(error, step))?;
        for (key, value) in self.outputs.iter().zip(values) {
            let logged = match value {
                Value::Float(v) => Logged::Scalar(v),
                Value::Int(v) => Logged::Scalar(v as f64),
                Value::Text(s) => Logged::Text(s.into_string()),
                Value::Tensor(t) => Logged::Tensor(t.into_tensor()),
            };
            cx.data.write(key, logged, true);
        }
        Ok(())
    }
}

/// The traces fe-host implements itself, by name.
pub const BUILTIN_TRACES: [&str; 2] = ["LRScheduler", "ReduceLROnPlateau"];

/// Creates the traces of the manifest: plugin traces, and the host's own.
pub fn build_traces(
    manifest: &Manifest,
    registry: &Registry,
    network: &Network,
    keys: &mut Keys,
) -> Result<Vec<TraceSlot>> {
    let mut traces = Vec::new();
    for (spec, epochs) in manifest.traces.iter().flat_map(Scheduled::variants) {
        let mut trace = if BUILTIN_TRACES.contains(&spec.name.as_str()) {
            build_host_trace(manifest, network, spec)?
        } else {
            build_trace(manifest, registry, keys, spec)?
        };
        trace.epochs = epochs;
        traces.push(trace);
    }
    Ok(traces)
}

fn build_host_trace(
    manifest: &Manifest,
    network: &Network,
    spec: &ComponentSpec,
) -> Result<TraceSlot> {
    let parse_error = |e: fe_plugin_api::Error| {
        manifest.error_at(
            &spec.path.join_dotted(e.field()),
            format!("{} ({})", e.message(), spec.name),
        )
    };
    let model_index = |name: &str| {
        network
            .models
            .iter()
            .position(|m| m.name == name)
            .ok_or_else(|| {
                let known: Vec<&str> = network.models.iter().map(|m| m.name.as_str()).collect();
                manifest.error_at(
                    &spec.path.key("model"),
                    format!("unknown model `{name}` (models: {})", known.join(", ")),
                )
            })
    };
    if !spec.inputs.is_empty() || !spec.outputs.is_empty() {
        return Err(manifest.error_at(
            &spec.path,
            format!("{} takes no `inputs` or `outputs`", spec.name),
        ));
    }
    let (default_mode, trace): (&str, Box<dyn HostTrace>) = if spec.name == "LRScheduler" {
        let config: LrSchedulerConfig =
            fe_plugin_api::parse_config(&spec.config_text()).map_err(parse_error)?;
        config.lr.validate().map_err(|(field, message)| {
            manifest.error_at(&spec.path.key("lr").key(field), message)
        })?;
        let model = model_index(&config.model)?;
        (
            "train",
            Box::new(LrScheduler::new(network, model, Some(config.lr))),
        )
    } else {
        let config: ReduceLrConfig =
            fe_plugin_api::parse_config(&spec.config_text()).map_err(parse_error)?;
        let model = model_index(&config.model)?;
        if !(config.factor > 0.0 && config.factor < 1.0) {
            return Err(manifest.error_at(&spec.path.key("factor"), "must be between 0 and 1"));
        }
        let metric = match &config.metric {
            Some(metric) => metric.clone(),
            None => network.update_loss_key(model).ok_or_else(|| {
                manifest.error_at(
                    &spec.path,
                    format!(
                        "model `{}` is not trained with a loss; say which `metric` to watch",
                        config.model
                    ),
                )
            })?,
        };
        (
            "eval",
            Box::new(ReduceLrOnPlateau::new(network, model, metric, config)),
        )
    };
    let modes = match spec.mode {
        Some(modes) => modes,
        None => {
            ModeFilter::parse_default(default_mode).map_err(|e| manifest.error_at(&spec.path, e))?
        }
    };
    let mut slot = TraceSlot::host(&spec.label(), modes, trace);
    slot.ds_ids = spec.ds_id.clone();
    Ok(slot)
}

fn build_trace(
    manifest: &Manifest,
    registry: &Registry,
    keys: &mut Keys,
    spec: &ComponentSpec,
) -> Result<TraceSlot> {
    let Some(entry) = registry.get(ComponentKind::Trace, &spec.name) else {
        return Err(unknown_component(
            manifest,
            registry,
            &spec.path.key("trace"),
            ComponentKind::Trace,
            &spec.name,
        ));
    };
    let metric = entry.info.is_metric;
    let default_mode = entry.info.default_mode.to_string();
    let creation = Creation::new(
        &spec.path,
        &spec.inputs,
        &spec.outputs,
        DeviceSpec::CPU,
        manifest.run.seed,
    );
    let handle = match registry.create_trace(&spec.name, &spec.config_text(), &creation.context()) {
        Some(Ok(object)) => TraceHandle(object),
        Some(Err(error)) => return Err(creation_error(manifest, &spec.path, error)),
        None => {
            return Err(manifest.error_at(
                &spec.path.key("trace"),
                format!("`{}` cannot be used as a trace", spec.name),
            ))
        }
    };
    let modes = match spec.mode {
        Some(modes) => modes,
        None => ModeFilter::parse_default(&default_mode)
            .map_err(|e| manifest.error_at(&spec.path, e))?,
    };
    Ok(TraceSlot {
        label: spec.label(),
        modes,
        ds_ids: spec.ds_id.clone(),
        epochs: InForce::always(),
        kind: TraceKind::Plugin(PluginTrace {
            handle,
            metric,
            input_names: spec
                .inputs
                .iter()
                .map(|s| RString::from(s.as_str()))
                .collect(),
            input_ids: keys.intern_all(&spec.inputs),
            outputs: spec.outputs.clone(),
        }),
    })
}

/// Batch keys the active traces of `mode`/`epoch`/`ds_id` read.
pub fn wanted_keys(traces: &[TraceSlot], mode: Mode, epoch: u32, ds_id: &str) -> BTreeSet<KeyId> {
    traces
        .iter()
        .filter(|t| t.active(mode, epoch, Some(ds_id)))
        .flat_map(TraceSlot::batch_inputs)
        .collect()
}
