//! The ABI-stable surface: one root module per plugin and one trait object per component.
//!
//! Plugin authors never touch this module; [`export_plugin!`](crate::export_plugin) builds the
//! root module and the adapter builds the objects. The host uses these types to call in.
//!
//! # Evolution rules
//!
//! abi_stable's layout check refuses a plugin whose prefix type (this root module, every
//! `#[sabi_trait]` vtable, [`PluginExt`], [`FfiRunInfo`](crate::run::FfiRunInfo),
//! [`FfiHost`](crate::host_link::FfiHost)) has *fewer* fields than the host's, any `#[repr(C)]`
//! struct that differs, and an exhaustive enum whose variant count differs. So no type reached
//! from an existing module ever changes within 0.1 — not even a defaulted trait method
//! appended after `#[sabi(last_prefix_field)]`, which would lock every older plugin out of
//! newer hosts. Additions go into a new, separately exported module that hosts look for and
//! older plugins lack, as 0.1.1 did with [`PluginExt`] under [`PLUGIN_EXT_SYMBOL`] and 0.1.2
//! with [`PluginHostLink`](crate::host_link::PluginHostLink); such additions are patch
//! releases, checked in both directions by `tests/plugin_kit.rs`. Any other change is
//! breaking: bump the minor version so build info refuses old plugins first. The full rules
//! are in this crate's README ("Compatibility and evolution").

// abi_stable 0.11's `#[sabi_trait]` expands to impls inside a const block.
#![allow(non_local_definitions)]

use abi_stable::library::RootModule;
use abi_stable::sabi_trait;
use abi_stable::std_types::{RBox, ROption, RResult, RSlice, RStr, RString, RVec};
use abi_stable::{declare_root_module_statics, package_version_strings, StableAbi};

use crate::context::{CreateContext, StepContext};
use crate::error::PluginError;
use crate::fields::ComponentFields;
use crate::registry::ComponentKind;
use crate::run::FfiRunInfoRef;
use crate::state::ComponentState;
use crate::tensor::{NamedTensor, RTensor, TensorRef};
use crate::trace_data::{TraceContext, TraceOutput, Value, ValueRef};

/// A [`TensorOp`](crate::TensorOp) behind the boundary.
#[sabi_trait]
pub trait FfiTensorOp: Send {
    /// See [`TensorOp::forward`](crate::TensorOp::forward).
    fn forward(
        &mut self,
        inputs: RSlice<'_, TensorRef<'_>>,
        ctx: &StepContext<'_>,
    ) -> RResult<RVec<RTensor>, PluginError>;
    /// See [`TensorOp::state`](crate::TensorOp::state).
    fn state(&self) -> RResult<ComponentState, PluginError>;
    /// See [`TensorOp::load_state`](crate::TensorOp::load_state).
    #[sabi(last_prefix_field)]
    fn load_state(&mut self, state: ComponentState) -> RResult<(), PluginError>;
}

/// A [`NumpyOp`](crate::NumpyOp) behind the boundary.
#[sabi_trait]
pub trait FfiNumpyOp: Send + Sync {
    /// See [`NumpyOp::forward`](crate::NumpyOp::forward).
    fn forward(
        &self,
        inputs: RSlice<'_, TensorRef<'_>>,
        ctx: &StepContext<'_>,
    ) -> RResult<RVec<RTensor>, PluginError>;
    /// See [`NumpyOp::forward_batch`](crate::NumpyOp::forward_batch).
    fn forward_batch(
        &self,
        inputs: RSlice<'_, TensorRef<'_>>,
        ctx: &StepContext<'_>,
    ) -> RResult<RVec<RTensor>, PluginError>;
    /// See [`NumpyOp::batchable`](crate::NumpyOp::batchable).
    fn batchable(&self) -> bool;
    /// See [`NumpyOp::is_filter`](crate::NumpyOp::is_filter).
    fn is_filter(&self) -> bool;
    /// See [`NumpyOp::remove`](crate::NumpyOp::remove).
    fn remove(
        &self,
        inputs: RSlice<'_, TensorRef<'_>>,
        ctx: &StepContext<'_>,
    ) -> RResult<bool, PluginError>;
    /// See [`NumpyOp::state`](crate::NumpyOp::state).
    fn state(&self) -> RResult<ComponentState, PluginError>;
    /// See [`NumpyOp::load_state`](crate::NumpyOp::load_state).
    #[sabi(last_prefix_field)]
    fn load_state(&self, state: ComponentState) -> RResult<(), PluginError>;
}

/// A [`Slicer`](crate::Slicer) behind the boundary.
#[sabi_trait]
pub trait FfiSlicer: Send {
    /// See [`Slicer::slice`](crate::Slicer::slice).
    fn slice(&mut self, key: RStr<'_>, batch: TensorRef<'_>)
        -> RResult<RVec<RTensor>, PluginError>;
    /// See [`Slicer::unslice`](crate::Slicer::unslice).
    fn unslice(
        &mut self,
        key: RStr<'_>,
        slices: RSlice<'_, TensorRef<'_>>,
    ) -> RResult<RTensor, PluginError>;
    /// See [`Slicer::state`](crate::Slicer::state).
    fn state(&self) -> RResult<ComponentState, PluginError>;
    /// See [`Slicer::load_state`](crate::Slicer::load_state).
    #[sabi(last_prefix_field)]
    fn load_state(&mut self, state: ComponentState) -> RResult<(), PluginError>;
}

/// Which trace hook is being called.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceHook {
    /// `on_begin`
    Begin = 0,
    /// `on_epoch_begin`
    EpochBegin = 1,
    /// `on_batch_begin`
    BatchBegin = 2,
    /// `on_batch_end`
    BatchEnd = 3,
    /// `on_epoch_end`
    EpochEnd = 4,
    /// `on_end`
    End = 5,
}

impl TraceHook {
    /// The hook's method name, for messages.
    pub fn method(self) -> &'static str {
        match self {
            TraceHook::Begin => "on_begin",
            TraceHook::EpochBegin => "on_epoch_begin",
            TraceHook::BatchBegin => "on_batch_begin",
            TraceHook::BatchEnd => "on_batch_end",
            TraceHook::EpochEnd => "on_epoch_end",
            TraceHook::End => "on_end",
        }
    }
}

/// Which checkpoint/trial event is being reported (Determined's hooks).
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrialEvent {
    /// `on_checkpoint_end(dir)`
    CheckpointEnd = 0,
    /// `on_checkpoint_load(dir)`
    CheckpointLoad = 1,
    /// `on_trial_close()`
    TrialClose = 2,
}

/// A [`Trace`](crate::Trace) or [`Metric`](crate::Metric) behind the boundary.
#[sabi_trait]
pub trait FfiTrace: Send {
    /// Runs one of the data hooks.
    fn hook(
        &mut self,
        hook: TraceHook,
        ctx: &TraceContext<'_>,
        keys: RSlice<'_, RString>,
        values: RSlice<'_, ValueRef<'_>>,
    ) -> RResult<TraceOutput, PluginError>;
    /// Reports a checkpoint or trial event; `dir` is empty for `TrialClose`.
    fn event(&mut self, event: TrialEvent, dir: RStr<'_>) -> RResult<(), PluginError>;
    /// For metrics, this worker's partial state; `RNone` for plain traces.
    fn metric_partial(&self) -> RResult<ROption<ComponentState>, PluginError>;
    /// For metrics, the final values reduced from every worker's partial state.
    fn metric_reduce(&self, partials: RVec<ComponentState>) -> RResult<RVec<Value>, PluginError>;
    /// See [`Trace::state`](crate::Trace::state).
    fn state(&self) -> RResult<ComponentState, PluginError>;
    /// See [`Trace::load_state`](crate::Trace::load_state).
    #[sabi(last_prefix_field)]
    fn load_state(&mut self, state: ComponentState) -> RResult<(), PluginError>;
}

/// A [`Model`](crate::Model) behind the boundary.
#[sabi_trait]
pub trait FfiModel: Send {
    /// Runs the model, returning its outputs followed by the requested layers' outputs.
    fn forward(
        &mut self,
        inputs: RSlice<'_, TensorRef<'_>>,
        train: bool,
        layers: RSlice<'_, RStr<'_>>,
    ) -> RResult<RVec<RTensor>, PluginError>;
    /// See [`Model::layers`](crate::Model::layers).
    fn layers(&self) -> RResult<RVec<RString>, PluginError>;
    /// See [`Model::variables`](crate::Model::variables).
    fn variables(&self) -> RResult<RVec<NamedTensor>, PluginError>;
    /// See [`Model::state`](crate::Model::state).
    fn state(&self) -> RResult<ComponentState, PluginError>;
    /// See [`Model::load_state`](crate::Model::load_state).
    #[sabi(last_prefix_field)]
    fn load_state(&mut self, state: ComponentState) -> RResult<(), PluginError>;
}

/// A [`Dataset`](crate::Dataset) behind the boundary.
#[sabi_trait]
pub trait FfiDataset: Send + Sync {
    /// See [`Dataset::len`](crate::Dataset::len).
    fn len(&self) -> u64;
    /// `true` when the dataset has no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// See [`Dataset::keys`](crate::Dataset::keys).
    fn keys(&self) -> RVec<RString>;
    /// See [`Dataset::get`](crate::Dataset::get).
    fn get(&self, index: u64) -> RResult<RVec<RTensor>, PluginError>;
    /// See [`Dataset::state`](crate::Dataset::state).
    fn state(&self) -> RResult<ComponentState, PluginError>;
    /// See [`Dataset::load_state`](crate::Dataset::load_state).
    #[sabi(last_prefix_field)]
    fn load_state(&self, state: ComponentState) -> RResult<(), PluginError>;
}

/// An owned [`FfiTensorOp`] object.
pub type TensorOpBox = FfiTensorOp_TO<'static, RBox<()>>;
/// An owned [`FfiNumpyOp`] object.
pub type NumpyOpBox = FfiNumpyOp_TO<'static, RBox<()>>;
/// An owned [`FfiSlicer`] object.
pub type SlicerBox = FfiSlicer_TO<'static, RBox<()>>;
/// An owned [`FfiTrace`] object.
pub type TraceBox = FfiTrace_TO<'static, RBox<()>>;
/// An owned [`FfiModel`] object.
pub type ModelBox = FfiModel_TO<'static, RBox<()>>;
/// An owned [`FfiDataset`] object.
pub type DatasetBox = FfiDataset_TO<'static, RBox<()>>;

/// One component in a plugin's description.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct ComponentInfo {
    /// Its kind.
    pub kind: ComponentKind,
    /// The name manifests use.
    pub name: RString,
    /// One-line description.
    pub doc: RString,
    /// Default modes in manifest syntax; empty for every mode.
    pub default_mode: RString,
    /// For traces: `true` when it is a metric (accumulate / reduce).
    pub is_metric: bool,
}

/// What a plugin is and provides.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct PluginDescription {
    /// The plugin crate's name.
    pub name: RString,
    /// The plugin crate's version.
    pub version: RString,
    /// Everything it provides.
    pub components: RVec<ComponentInfo>,
}

/// The root module every plugin exports. Each `create_*` takes the component's name, its
/// config as TOML text and the creation context.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
#[sabi(missing_field(panic))]
pub struct PluginMod {
    /// Lists the plugin and its components.
    pub describe: extern "C" fn() -> PluginDescription,
    /// Creates a tensor op.
    pub create_tensor_op:
        extern "C" fn(RStr<'_>, RStr<'_>, &CreateContext<'_>) -> RResult<TensorOpBox, PluginError>,
    /// Creates a numpy op.
    pub create_numpy_op:
        extern "C" fn(RStr<'_>, RStr<'_>, &CreateContext<'_>) -> RResult<NumpyOpBox, PluginError>,
    /// Creates a slicer.
    pub create_slicer:
        extern "C" fn(RStr<'_>, RStr<'_>, &CreateContext<'_>) -> RResult<SlicerBox, PluginError>,
    /// Creates a trace or metric.
    pub create_trace:
        extern "C" fn(RStr<'_>, RStr<'_>, &CreateContext<'_>) -> RResult<TraceBox, PluginError>,
    /// Creates a model.
    pub create_model:
        extern "C" fn(RStr<'_>, RStr<'_>, &CreateContext<'_>) -> RResult<ModelBox, PluginError>,
    /// Creates a dataset.
    #[sabi(last_prefix_field)]
    pub create_dataset:
        extern "C" fn(RStr<'_>, RStr<'_>, &CreateContext<'_>) -> RResult<DatasetBox, PluginError>,
}

/// Name of the exported static that holds a plugin's [`ExtHeader`] (since 0.1.1).
pub const PLUGIN_EXT_SYMBOL: &[u8] = b"FE_PLUGIN_EXT_V1\0";

/// What a plugin provides beyond [`PluginMod`], since 0.1.1: a module of its own under its
/// own symbol ([`PLUGIN_EXT_SYMBOL`]), found only by hosts that look for it. Not new fields of
/// [`PluginMod`]: abi_stable refuses a root module with fewer fields than the host's, so
/// growing it would lock every older plugin out. A plugin without the symbol (built before
/// 0.1.1) simply lacks these functions.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginExtRef)))]
#[sabi(missing_field(option))]
pub struct PluginExt {
    /// Tells the plugin about the run before any component is created (see
    /// [`RunInfo`](crate::RunInfo)).
    pub set_run_info: extern "C" fn(FfiRunInfoRef),
    /// The configuration fields its components declare.
    #[sabi(last_prefix_field)]
    pub describe_fields: extern "C" fn() -> RVec<ComponentFields>,
}

/// The static a plugin exports under [`PLUGIN_EXT_SYMBOL`]: the layout of its [`PluginExt`],
/// which the host checks against its own before calling `module`. Frozen: two pointers.
#[repr(C)]
pub struct ExtHeader {
    /// abi_stable's layout of the plugin's `PluginExtRef`.
    pub layout: &'static abi_stable::type_layout::TypeLayout,
    /// Returns the plugin's extension module.
    pub module: extern "C" fn() -> PluginExtRef,
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "fe_plugin";
    const NAME: &'static str = "fe_plugin";
    const VERSION_STRINGS: abi_stable::sabi_types::VersionStrings = package_version_strings!();
}
