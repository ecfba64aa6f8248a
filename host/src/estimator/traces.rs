//! Traces as the estimator runs them: plugin traces and metrics behind the boundary, and the
//! host's own traces (losses, logging) that need the run's internals.

use std::collections::BTreeSet;

use abi_stable::std_types::RString;
use fe_plugin_api::ffi::{TraceHook, TrialEvent};
use fe_plugin_api::{
    ComponentKind, ComponentState, DeviceSpec, Mode, State, StepContext, TraceContext, Value,
    ValueRef,
};
use smallvec::SmallVec;

use super::data::{Data, Logged};
use crate::error::{Error, Result};
use crate::manifest::{ComponentSpec, Manifest};
use crate::network::{step_error, Batch, KeyId, Keys, Network};
use crate::plugins::create::{creation_error, registered, Creation};
use crate::plugins::handles::TraceHandle;
use crate::plugins::registry::Provider;
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
    /// Lines a trace wants printed (`EarlyStopping triggered ...`), shown after the hook group.
    pub notes: &'a mut Vec<String>,
}

/// A trace implemented by the host.
pub trait HostTrace {
    /// Keys it reads from batches.
    fn inputs(&self) -> Vec<KeyId> {
        Vec::new()
    }
    /// Names of the keys it reads, batch keys and other traces' outputs (for the run order).
    fn input_names(&self) -> Vec<String> {
        Vec::new()
    }
    /// Names of the keys it writes.
    fn output_names(&self) -> Vec<String> {
        Vec::new()
    }
    /// Runs first whatever it reads (the essentials).
    fn essential(&self) -> bool {
        false
    }
    /// Reads everything traces write (the loggers): runs last.
    fn reads_everything(&self) -> bool {
        false
    }
    /// Reads its batch inputs only on logged train steps (see
    /// [`super::essential::is_log_step`]): other train steps need not bring them back to the
    /// host, which on CUDA saves a copy and a sync per step.
    fn reads_batch_only_at_log_steps(&self) -> bool {
        false
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
    /// Makes what it wrote durable now (a run stopped by a signal ends without `on_end`).
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    /// Whether it may set `stop_training` in a batch hook. A data-parallel run agrees on such
    /// a stop after every training step with a collective of its own; without one, the ranks
    /// agree on signals inside the gradient all-reduce and save that round trip.
    fn may_stop_between_steps(&self) -> bool {
        false
    }
    /// Whether all it does is write files (loggers, savers): such a trace runs on rank 0
    /// only in a data-parallel run, where the other ranks would write the same files.
    fn writes_files_only(&self) -> bool {
        false
    }
    /// The model files it saved and keeps (the savers), for the run's closing lines.
    fn saved_models(&self) -> Vec<std::path::PathBuf> {
        Vec::new()
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
    /// `plugin::Name`, for errors the host finds in what the plugin returned.
    who: (String, String),
    metric: bool,
    /// A metric's partial state restored from a checkpoint taken inside the epoch: reduced
    /// together with what the metric accumulates after the resume.
    carried: Vec<State>,
    input_names: Vec<RString>,
    input_ids: Vec<KeyId>,
    outputs: Vec<String>,
    /// In a data-parallel run: the group a metric gathers its ranks' partial states over.
    group: Option<crate::dist::SharedGroup>,
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
    /// Skipped on this rank (a writer, on a rank other than 0 of a data-parallel run).
    pub idle: bool,
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
            idle: false,
        }
    }

    /// Takes part in a data-parallel run as rank `group.rank()`: writers fall idle on every
    /// rank but 0; metrics gather their partial states over the group.
    pub fn join(&mut self, group: &crate::dist::SharedGroup) {
        match &mut self.kind {
            TraceKind::Host(trace) => self.idle = trace.writes_files_only() && group.rank() != 0,
            TraceKind::Plugin(trace) => trace.group = Some(group.clone()),
        }
    }

    /// Whether it may set `stop_training` in a batch hook ([`HostTrace::may_stop_between_steps`]):
    /// a plugin trace may, a plugin metric cannot (its API has no way to ask).
    pub fn may_stop_between_steps(&self) -> bool {
        match &self.kind {
            TraceKind::Plugin(p) => !p.metric,
            TraceKind::Host(h) => h.may_stop_between_steps(),
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

    /// Batch keys it reads on a train step that is not logged.
    pub fn batch_inputs_between_logs(&self) -> Vec<KeyId> {
        match &self.kind {
            TraceKind::Host(h) if h.reads_batch_only_at_log_steps() => Vec::new(),
            _ => self.batch_inputs(),
        }
    }

    /// Names of the keys it reads (plugin traces).
    pub fn input_names(&self) -> Vec<String> {
        match &self.kind {
            TraceKind::Plugin(p) => p.input_names.iter().map(|n| n.to_string()).collect(),
            TraceKind::Host(_) => Vec::new(),
        }
    }

    /// Names of the keys it writes.
    pub fn output_names(&self) -> Vec<String> {
        match &self.kind {
            TraceKind::Plugin(p) => p.outputs.clone(),
            TraceKind::Host(h) => h.output_names(),
        }
    }

    /// What the run order needs to know of it.
    pub fn deps(&self) -> super::order::Deps {
        let (inputs, essential, reads_everything) = match &self.kind {
            TraceKind::Plugin(_) => (self.input_names(), false, false),
            TraceKind::Host(h) => (h.input_names(), h.essential(), h.reads_everything()),
        };
        super::order::Deps {
            label: self.label.clone(),
            inputs,
            outputs: self.output_names(),
            essential,
            reads_everything,
        }
    }

    /// Runs `hook`. `batch` is given for the batch hooks.
    pub fn run(&mut self, hook: TraceHook, cx: &mut Cx<'_>, batch: Option<&Batch>) -> Result<()> {
        if self.idle {
            return Ok(());
        }
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
            TraceKind::Plugin(trace) => {
                let ran = trace.run(hook, cx, batch);
                for (name, graphs) in crate::plugins::graphs::take_pending() {
                    cx.system.add_graph(&name, graphs);
                }
                ran
            }
        }
    }

    /// Its checkpointable state (host traces keep theirs as JSON).
    pub fn state(&self) -> std::result::Result<State, String> {
        match &self.kind {
            TraceKind::Plugin(trace) if trace.metric => trace.metric_state(),
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
            TraceKind::Plugin(trace) if trace.metric => trace.load_metric_state(state),
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

    /// The model files a host trace saved and keeps.
    pub fn saved_models(&self) -> Vec<std::path::PathBuf> {
        if self.idle {
            return Vec::new();
        }
        match &self.kind {
            TraceKind::Host(trace) => trace.saved_models(),
            TraceKind::Plugin(_) => Vec::new(),
        }
    }

    /// Flushes what a host trace wrote (plugin traces flush in their own hooks).
    pub fn flush(&mut self) -> Result<()> {
        if self.idle {
            return Ok(());
        }
        match &mut self.kind {
            TraceKind::Host(trace) => trace.flush(),
            TraceKind::Plugin(_) => Ok(()),
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
        if self.metric && hook == TraceHook::EpochBegin {
            // A new epoch: what a checkpoint carried over belongs to the one before.
            self.carried.clear();
        }
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

    /// Reduces every rank's partial state (this process's alone outside data parallelism), with
    /// any partial state a mid-epoch checkpoint carried over, into the metric's values: one per
    /// output key. Every rank reduces the same partials, so every rank logs the same values
    /// and traces that read them (EarlyStopping) decide alike. What a checkpoint carried is
    /// the same on every rank (they all loaded it): it counts once.
    fn write_metric(&mut self, cx: &mut Cx<'_>, step: &StepContext<'_>) -> Result<()> {
        let partial = self
            .handle
            .metric_partial()
            .map_err(|error| step_error(error, step))?;
        let mut partials: Vec<ComponentState> =
            self.carried.drain(..).map(State::into_ffi).collect();
        match &self.group {
            Some(group) => {
                let live = partial.map(State::from_ffi).unwrap_or_else(State::empty);
                let gathered = group.all_gather_states(&live).map_err(Error::Run)?;
                partials.extend(
                    gathered
                        .into_iter()
                        .filter(|s| !s.is_empty())
                        .map(State::into_ffi),
                );
            }
            None => partials.extend(partial),
        }
        let values = self
            .handle
            .metric_reduce(partials)
            .map_err(|error| step_error(error, step))?;
        if values.len() != self.outputs.len() {
            let (plugin, name) = &self.who;
            let message = format!(
                "returned {} value(s) for {} output key(s) ({})",
                values.len(),
                self.outputs.len(),
                self.outputs.join(", ")
            );
            let error =
                fe_plugin_api::Error::msg(message).into_plugin_error(plugin, name, "reduce");
            return Err(step_error(error, step));
        }
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

impl PluginTrace {
    /// A metric's checkpoint state: its partial state, after those carried over from the
    /// checkpoint it was restored from (see [`super::metric_state`]).
    fn metric_state(&self) -> std::result::Result<State, String> {
        let live = self.handle.state().map_err(|e| e.to_string())?;
        let live = match &self.group {
            Some(group) => group.all_gather_states(&live)?,
            None if self.carried.is_empty() => return Ok(live),
            None => vec![live],
        };
        let mut partials: Vec<State> = self.carried.iter().map(super::metric_state::copy).collect();
        partials.extend(live.into_iter().filter(|s| !s.is_empty()));
        if partials.len() == 1 {
            return Ok(partials.remove(0));
        }
        super::metric_state::join(partials)
    }

    /// Keeps the partial states of a checkpoint, to be reduced with what the metric
    /// accumulates from now on; the metric itself starts from its reset state.
    fn load_metric_state(&mut self, state: State) -> std::result::Result<(), String> {
        self.carried = super::metric_state::split(state)?;
        self.handle
            .load_state(State::empty())
            .map_err(|e| e.to_string())
    }
}

/// Creates the traces of the manifest: plugin traces, and the host's own.
pub fn build_traces(
    manifest: &Manifest,
    registry: &Registry,
    network: &Network,
    keys: &mut Keys,
) -> Result<Vec<TraceSlot>> {
    let mut traces = Vec::new();
    for (spec, epochs) in manifest.traces.iter().flat_map(Scheduled::variants) {
        let mut trace = match super::host_traces::builtin(&spec.name) {
            Some(builtin) => super::host_traces::build(builtin, manifest, network, keys, spec)?,
            None => build_trace(manifest, registry, keys, spec)?,
        };
        trace.epochs = epochs;
        traces.push(trace);
    }
    Ok(traces)
}

fn build_trace(
    manifest: &Manifest,
    registry: &Registry,
    keys: &mut Keys,
    spec: &ComponentSpec,
) -> Result<TraceSlot> {
    let entry = registered(
        manifest,
        registry,
        &spec.path.key("trace"),
        ComponentKind::Trace,
        &spec.name,
    )?;
    let metric = entry.info.is_metric;
    let plugin = match entry.provider {
        Provider::Plugin(index) => registry
            .plugins
            .plugins
            .get(index)
            .map_or("plugin", |p| p.name())
            .to_owned(),
        Provider::Builtin => "fe-host".to_owned(),
    };
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
            who: (plugin, spec.name.clone()),
            metric,
            carried: Vec::new(),
            input_names: spec
                .inputs
                .iter()
                .map(|s| RString::from(s.as_str()))
                .collect(),
            input_ids: keys.intern_all(&spec.inputs),
            outputs: spec.outputs.clone(),
            group: None,
        }),
        idle: false,
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

/// The batch keys traces read on a train step that is not logged (a subset of
/// [`wanted_keys`]).
pub fn wanted_keys_between_logs(
    traces: &[TraceSlot],
    mode: Mode,
    epoch: u32,
    ds_id: &str,
) -> BTreeSet<KeyId> {
    traces
        .iter()
        .filter(|t| t.active(mode, epoch, Some(ds_id)))
        .flat_map(TraceSlot::batch_inputs_between_logs)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::adapt::TerminateOnNaN;
    use crate::estimator::essential::TrainEssential;
    use crate::schedule::ModeFilter;

    #[test]
    fn only_the_loss_log_skips_its_keys_between_logged_steps() {
        let (loss, other) = (KeyId(0), KeyId(1));
        let essential = TraceSlot::host(
            "TrainEssential",
            ModeFilter::ALL,
            Box::new(TrainEssential::new(vec![(loss, "ce".into())], &[])),
        );
        let watcher = TraceSlot::host(
            "TerminateOnNaN",
            ModeFilter::ALL,
            Box::new(TerminateOnNaN::new(vec![(other, "mse".into())], Vec::new())),
        );
        let traces = [essential, watcher];
        let all = wanted_keys(&traces, Mode::Train, 1, "");
        let lean = wanted_keys_between_logs(&traces, Mode::Train, 1, "");
        assert_eq!(all.into_iter().collect::<Vec<_>>(), [loss, other]);
        // TerminateOnNaN checks every step, so its key still comes back every step.
        assert_eq!(lean.into_iter().collect::<Vec<_>>(), [other]);
    }
}
