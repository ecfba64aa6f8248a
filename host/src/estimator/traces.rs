//! Traces as the estimator runs them: plugin traces and metrics behind the boundary
//! (plugin_traces.rs), and the host's own traces (losses, logging) that need the run's
//! internals; each with the modes, datasets and epochs it runs in.

use std::collections::BTreeSet;

use abi_stable::std_types::RString;
use fe_plugin_api::ffi::{TraceHook, TrialEvent};
use fe_plugin_api::{ComponentKind, DeviceSpec, Mode, State};

use super::data::Data;
use super::plugin_traces::PluginTrace;
use crate::error::{Error, Result};
use crate::key_path::KeyPath;
use crate::manifest::{ComponentSpec, Manifest};
use crate::network::{Batch, KeyId, Keys, Network};
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
    /// How the ranks reduce what traces compute (alone: nothing to reduce).
    pub strategy: &'a crate::dist::Strategy,
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
    /// The manifest key that names what it reads, where a missing input is reported:
    /// `inputs`, or a watcher's `monitor` / `metric`.
    fn inputs_key(&self) -> &'static str {
        "inputs"
    }
    /// Names of the keys it writes.
    fn output_names(&self) -> Vec<String> {
        Vec::new()
    }
    /// Runs first whatever it reads (the essentials).
    fn essential(&self) -> bool {
        false
    }
    /// Its batch hooks run a collective in a data-parallel run (the logged training loss is
    /// averaged over the ranks), so a rank without data of its own in a step runs them too
    /// (see `estimator::uneven`), with its batch weighed by the group's contribution.
    fn collective_in_batch_hooks(&self) -> bool {
        false
    }
    /// Reads everything traces write (the loggers): runs last.
    fn reads_everything(&self) -> bool {
        false
    }
    /// A key naming each sample and keys logged per sample with it: the id must be in some
    /// mode the trace runs in, and the keys wherever it is (checked before the first step).
    fn per_sample_keys(&self) -> Option<(KeyId, Vec<KeyId>)> {
        None
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
    /// The model whose learning rate it sets, and how (see [`super::lr_sources`]).
    fn lr_control(&self) -> Option<super::lr_sources::LrControl> {
        None
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
    /// The other files or directories it wrote (a logger's file, TensorBoard's directory), for
    /// the run's closing lines.
    fn written_logs(&self) -> Vec<std::path::PathBuf> {
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

/// What a trace is.
pub enum TraceKind {
    /// From a plugin.
    Plugin(Box<PluginTrace>),
    /// From the host.
    Host(Box<dyn HostTrace>),
}

/// One trace with its filters.
pub struct TraceSlot {
    /// `Name (traces[i])`.
    pub label: String,
    /// Where the manifest declares it (none for the traces the host adds itself).
    pub path: Option<KeyPath>,
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
            path: None,
            modes,
            ds_ids: DsFilter::Any,
            epochs: InForce::always(),
            kind: TraceKind::Host(trace),
            idle: false,
        }
    }

    /// Takes part in a data-parallel run as `rank`: writers fall idle on every rank but 0.
    /// (Metrics gather their partial states through the run's strategy.)
    pub fn join(&mut self, rank: usize) {
        if let TraceKind::Host(trace) = &self.kind {
            self.idle = trace.writes_files_only() && rank != 0;
        }
    }

    /// Whether its batch hooks run a collective ([`HostTrace::collective_in_batch_hooks`]).
    pub fn collective_in_batch_hooks(&self) -> bool {
        match &self.kind {
            TraceKind::Host(h) => h.collective_in_batch_hooks(),
            TraceKind::Plugin(_) => false,
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

    /// Its checkpointable state (host traces keep theirs as JSON); a metric's is gathered
    /// from every rank through `strategy`.
    pub fn state(&self, strategy: &crate::dist::Strategy) -> std::result::Result<State, String> {
        match &self.kind {
            TraceKind::Plugin(trace) if trace.metric => trace.metric_state(strategy),
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

    /// The logs a host trace wrote (see [`HostTrace::written_logs`]).
    pub fn written_logs(&self) -> Vec<std::path::PathBuf> {
        match &self.kind {
            TraceKind::Host(trace) if !self.idle => trace.written_logs(),
            _ => Vec::new(),
        }
    }

    /// The manifest key naming what it reads (see [`HostTrace::inputs_key`]).
    pub fn inputs_key(&self) -> &'static str {
        match &self.kind {
            TraceKind::Host(trace) => trace.inputs_key(),
            TraceKind::Plugin(_) => "inputs",
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

/// Creates the traces of the manifest: plugin traces, and the host's own.
pub fn build_traces(
    manifest: &Manifest,
    registry: &Registry,
    network: &Network,
    keys: &mut Keys,
) -> Result<Vec<TraceSlot>> {
    let mut traces = Vec::new();
    let mut paths = Vec::new();
    for (spec, epochs) in manifest.traces.iter().flat_map(Scheduled::variants) {
        let mut trace = match super::host_traces::builtin(&spec.name) {
            Some(builtin) => super::host_traces::build(builtin, manifest, network, keys, spec)?,
            None => build_trace(manifest, registry, keys, spec)?,
        };
        trace.epochs = epochs;
        traces.push(trace);
        paths.push(spec.path.clone());
    }
    super::lr_sources::check(manifest, network, &paths, &traces)?;
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
        path: Some(spec.path.clone()),
        modes,
        ds_ids: spec.ds_id.clone(),
        epochs: InForce::always(),
        kind: TraceKind::Plugin(Box::new(PluginTrace {
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
        })),
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
