//! Host-side handles over the ABI objects: take `&[&Tensor]`, give back `Vec<Tensor>`, and
//! keep errors as [`PluginError`] for the caller to stamp with the step.

use abi_stable::std_types::{RResult, RSlice, RStr, RString, RVec};
use fe_plugin_api::ffi::{
    ModelBox, NumpyOpBox, SlicerBox, TensorOpBox, TraceBox, TraceHook, TrialEvent,
};
use fe_plugin_api::{
    ComponentState, NamedTensor, PluginError, RTensor, State, StepContext, TensorRef, TraceContext,
    TraceOutput, Value, ValueRef,
};
use smallvec::SmallVec;
use tch::Tensor;

type Refs<'a> = SmallVec<[TensorRef<'a>; 6]>;

fn refs<'a>(tensors: &[&'a Tensor]) -> Refs<'a> {
    tensors.iter().map(|t| TensorRef::from(*t)).collect()
}

fn tensors(out: RResult<RVec<RTensor>, PluginError>) -> Result<Vec<Tensor>, PluginError> {
    out.into_result()
        .map(|v| v.into_iter().map(RTensor::into_tensor).collect())
}

/// A plugin tensor op.
pub struct TensorOpHandle(pub TensorOpBox);

impl TensorOpHandle {
    /// Runs the op.
    pub fn forward(
        &mut self,
        inputs: &[&Tensor],
        ctx: &StepContext<'_>,
    ) -> Result<Vec<Tensor>, PluginError> {
        let handles = refs(inputs);
        tensors(self.0.forward(RSlice::from_slice(&handles), ctx))
    }

    /// Its checkpointable state.
    pub fn state(&self) -> Result<State, PluginError> {
        self.0.state().into_result().map(State::from_ffi)
    }

    /// Restores its state.
    pub fn load_state(&mut self, state: State) -> Result<(), PluginError> {
        self.0.load_state(state.into_ffi()).into_result()
    }
}

/// A plugin numpy op (shared by pipeline workers).
pub struct NumpyOpHandle(pub NumpyOpBox);

impl NumpyOpHandle {
    /// Its checkpointable state.
    pub fn state(&self) -> Result<State, PluginError> {
        self.0.state().into_result().map(State::from_ffi)
    }

    /// Restores its state (numpy ops are shared by workers, so this takes `&self`).
    pub fn load_state(&self, state: State) -> Result<(), PluginError> {
        self.0.load_state(state.into_ffi()).into_result()
    }

    /// One sample.
    pub fn forward(
        &self,
        inputs: &[&Tensor],
        ctx: &StepContext<'_>,
    ) -> Result<Vec<Tensor>, PluginError> {
        let handles = refs(inputs);
        tensors(self.0.forward(RSlice::from_slice(&handles), ctx))
    }

    /// One batch.
    pub fn forward_batch(
        &self,
        inputs: &[&Tensor],
        ctx: &StepContext<'_>,
    ) -> Result<Vec<Tensor>, PluginError> {
        let handles = refs(inputs);
        tensors(self.0.forward_batch(RSlice::from_slice(&handles), ctx))
    }

    /// `true` when the op may run once per batch (see `NumpyOp::batchable`).
    pub fn batchable(&self) -> bool {
        self.0.batchable()
    }

    /// `true` for filtering ops.
    pub fn is_filter(&self) -> bool {
        self.0.is_filter()
    }

    /// For filtering ops: drop this sample?
    pub fn remove(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<bool, PluginError> {
        let handles = refs(inputs);
        self.0
            .remove(RSlice::from_slice(&handles), ctx)
            .into_result()
    }
}

/// A plugin slicer.
pub struct SlicerHandle(pub SlicerBox);

impl SlicerHandle {
    /// Its checkpointable state.
    pub fn state(&self) -> Result<State, PluginError> {
        self.0.state().into_result().map(State::from_ffi)
    }

    /// Restores its state.
    pub fn load_state(&mut self, state: State) -> Result<(), PluginError> {
        self.0.load_state(state.into_ffi()).into_result()
    }

    /// Cuts one key's batch.
    pub fn slice(&mut self, key: &str, batch: &Tensor) -> Result<Vec<Tensor>, PluginError> {
        tensors(self.0.slice(RStr::from_str(key), TensorRef::from(batch)))
    }

    /// Joins one key's slices.
    pub fn unslice(&mut self, key: &str, slices: &[&Tensor]) -> Result<Tensor, PluginError> {
        let handles = refs(slices);
        self.0
            .unslice(RStr::from_str(key), RSlice::from_slice(&handles))
            .into_result()
            .map(RTensor::into_tensor)
    }
}

/// A plugin trace or metric.
pub struct TraceHandle(pub TraceBox);

impl TraceHandle {
    /// Runs a data hook.
    pub fn hook(
        &mut self,
        hook: TraceHook,
        ctx: &TraceContext<'_>,
        keys: &[RString],
        values: &[ValueRef<'_>],
    ) -> Result<TraceOutput, PluginError> {
        self.0
            .hook(
                hook,
                ctx,
                RSlice::from_slice(keys),
                RSlice::from_slice(values),
            )
            .into_result()
    }

    /// Reports a checkpoint or trial event.
    pub fn event(&mut self, event: TrialEvent, dir: &str) -> Result<(), PluginError> {
        self.0.event(event, RStr::from_str(dir)).into_result()
    }

    /// For metrics: the partial state of this worker.
    pub fn metric_partial(&self) -> Result<Option<ComponentState>, PluginError> {
        self.0
            .metric_partial()
            .into_result()
            .map(|o| o.into_option())
    }

    /// For metrics: the final values from every worker's partial state.
    pub fn metric_reduce(&self, partials: Vec<ComponentState>) -> Result<Vec<Value>, PluginError> {
        self.0
            .metric_reduce(partials.into_iter().collect())
            .into_result()
            .map(|v| v.into_iter().collect())
    }

    /// Its checkpointable state.
    pub fn state(&self) -> Result<State, PluginError> {
        self.0.state().into_result().map(State::from_ffi)
    }

    /// Restores its state.
    pub fn load_state(&mut self, state: State) -> Result<(), PluginError> {
        self.0.load_state(state.into_ffi()).into_result()
    }
}

/// A plugin model.
pub struct ModelHandle(pub ModelBox);

impl ModelHandle {
    /// State the model plugin keeps besides its variables (which the host saves itself).
    pub fn state(&self) -> Result<State, PluginError> {
        self.0.state().into_result().map(State::from_ffi)
    }

    /// Restores that state.
    pub fn load_state(&mut self, state: State) -> Result<(), PluginError> {
        self.0.load_state(state.into_ffi()).into_result()
    }

    /// Runs the model; `layers` asks for intermediate outputs, returned after the outputs.
    pub fn forward(
        &mut self,
        inputs: &[&Tensor],
        train: bool,
        layers: &[RStr<'_>],
    ) -> Result<Vec<Tensor>, PluginError> {
        let handles = refs(inputs);
        tensors(self.0.forward(
            RSlice::from_slice(&handles),
            train,
            RSlice::from_slice(layers),
        ))
    }

    /// Layer names it can expose.
    pub fn layers(&self) -> Result<Vec<String>, PluginError> {
        self.0
            .layers()
            .into_result()
            .map(|v| v.into_iter().map(RString::into_string).collect())
    }

    /// Parameters and buffers by name, sharing storage with the model.
    pub fn variables(&self) -> Result<Vec<(String, Tensor)>, PluginError> {
        self.0.variables().into_result().map(|v| {
            v.into_iter()
                .map(|NamedTensor { name, tensor }| (name.into_string(), tensor.into_tensor()))
                .collect()
        })
    }
}
