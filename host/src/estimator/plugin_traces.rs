//! A plugin trace as the estimator runs it: its hooks called across the plugin boundary with
//! the batch's and the logged values, and, for a metric, its partial states reduced over the
//! ranks and with what a checkpoint carried.

use abi_stable::std_types::RString;
use fe_plugin_api::ffi::TraceHook;
use fe_plugin_api::{ComponentState, Mode, State, StepContext, TraceContext, Value, ValueRef};
use smallvec::SmallVec;

use super::data::Logged;
use super::traces::Cx;
use crate::error::{Error, Result};
use crate::network::{step_error, Batch, KeyId};
use crate::plugins::handles::TraceHandle;

/// A plugin trace with its resolved keys.
pub struct PluginTrace {
    pub(super) handle: TraceHandle,
    /// `plugin::Name`, for errors the host finds in what the plugin returned.
    pub(super) who: (String, String),
    pub(super) metric: bool,
    /// A metric's partial state restored from a checkpoint taken inside the epoch: reduced
    /// together with what the metric accumulates after the resume.
    pub(super) carried: Vec<State>,
    pub(super) input_names: Vec<RString>,
    pub(super) input_ids: Vec<KeyId>,
    pub(super) outputs: Vec<String>,
}

impl PluginTrace {
    pub(super) fn run(
        &mut self,
        hook: TraceHook,
        cx: &mut Cx<'_>,
        batch: Option<&Batch>,
    ) -> Result<()> {
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
        let live = cx
            .strategy
            .gather_partials(partial.map(State::from_ffi))
            .map_err(Error::Run)?;
        partials.extend(live.into_iter().map(State::into_ffi));
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
    pub(super) fn metric_state(
        &self,
        strategy: &crate::dist::Strategy,
    ) -> std::result::Result<State, String> {
        let live = self.handle.state().map_err(|e| e.to_string())?;
        let mut live = strategy.gather_states(live)?;
        if self.carried.is_empty() && live.len() == 1 {
            return Ok(live.remove(0));
        }
        let mut partials: Vec<State> = self.carried.iter().map(super::metric_state::copy).collect();
        partials.extend(live.into_iter().filter(|s| !s.is_empty()));
        if partials.len() == 1 {
            return Ok(partials.remove(0));
        }
        super::metric_state::join(partials)
    }

    /// Keeps the partial states of a checkpoint, to be reduced with what the metric
    /// accumulates from now on; the metric itself starts from its reset state, with what it
    /// keeps across epochs taken from the newest of them (the plugin's adapter finds it there;
    /// every rank's copy is the same, since every rank reduces the same partials).
    pub(super) fn load_metric_state(&mut self, state: State) -> std::result::Result<(), String> {
        self.carried = super::metric_state::split(state)?;
        let newest = self
            .carried
            .last()
            .map(super::metric_state::copy)
            .unwrap_or_default();
        self.handle.load_state(newest).map_err(|e| e.to_string())
    }
}
