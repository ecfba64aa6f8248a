//! Test support: run your plugin's components without the host.
//!
//! Each constructor looks the component up among the registrations linked into the test
//! binary and builds it through the same adapter the host calls across the boundary, so config
//! parsing, unknown-field errors and panic catching behave exactly as in a real run.
//!
//! ```
//! use fe_plugin_api::{inventory, testing, CreateContext, FromConfig, NoConfig, Registration,
//!                     Result, StepContext, TensorOp};
//! use fe_plugin_api::tch::Tensor;
//!
//! struct Square;
//! impl TensorOp for Square {
//!     fn forward(&mut self, x: &[&Tensor], _: &StepContext<'_>) -> Result<Vec<Tensor>> {
//!         Ok(vec![x[0].f_square()?])
//!     }
//! }
//! impl FromConfig for Square {
//!     type Config = NoConfig;
//!     fn from_config(_: NoConfig, _: &CreateContext<'_>) -> Result<Self> { Ok(Square) }
//! }
//! inventory::submit! { Registration::tensor_op::<Square>("Square", "x²") }
//!
//! let mut op = testing::tensor_op("Square", "", &["x"], &["y"]).unwrap();
//! let y = op.forward(&[&Tensor::from_slice(&[3.0f32])]).unwrap();
//! assert_eq!(y[0].double_value(&[0]), 9.0);
//! // Unknown config fields are rejected with the field's name:
//! let err = testing::tensor_op("Square", "power = 3", &["x"], &["y"]).unwrap_err();
//! assert_eq!(err.field.as_str(), "power");
//! ```
//!
//! Every hook can be driven: per-step calls with any [`StepContext`] (mode, epoch, step),
//! trace hooks with any [`TraceContext`] ([`TestTrace::hook_with`]), the checkpoint and trial
//! events ([`TestTrace::checkpoint_end`], ...), and `state` / `load_state` of every kind.
//! [`set_run_info`] gives this thread's components a manifest directory, an output directory
//! and a rank. Errors name your crate (the one calling `export_plugin!`), as in a real run.

use std::path::Path;

use abi_stable::std_types::{RResult, RSlice, RStr, RString, RVec};
use tch::Tensor;

use crate::adapter;
use crate::context::{CreateContext, StepContext};
use crate::error::PluginError;
use crate::ffi::{
    DatasetBox, ModelBox, NumpyOpBox, SlicerBox, TensorOpBox, TraceBox, TraceHook, TrialEvent,
};
use crate::run::RunInfo;
use crate::state::State;
use crate::tensor::{RTensor, TensorRef};
use crate::trace_data::{TraceContext, TraceOutput, Value, ValueRef};

/// Tells the components this thread creates and calls about their run (manifest and output
/// directories, rank and world size), as the host does for a real run; `None` forgets it.
/// Other test threads are not affected.
///
/// ```
/// use fe_plugin_api::{testing, RunInfo};
/// testing::set_run_info(Some(RunInfo {
///     manifest_dir: Some("/experiments/mnist".into()),
///     rank: 1,
///     world_size: 2,
///     ..RunInfo::unknown()
/// }));
/// let ctx = fe_plugin_api::CreateContext::detached("test");
/// assert_eq!(ctx.resolve_path("data/train.csv"),
///            std::path::Path::new("/experiments/mnist/data/train.csv"));
/// testing::set_run_info(None);
/// assert_eq!(ctx.resolve_path("data/train.csv"), std::path::Path::new("data/train.csv"));
/// ```
pub fn set_run_info(info: Option<RunInfo>) {
    crate::run::set_thread(info);
}

fn keys(names: &[&str]) -> Vec<RString> {
    names.iter().map(|n| RString::from(*n)).collect()
}

fn context<'a>(inputs: &'a [RString], outputs: &'a [RString]) -> CreateContext<'a> {
    CreateContext {
        location: RStr::from_str("test"),
        inputs: RSlice::from_slice(inputs),
        outputs: RSlice::from_slice(outputs),
        ..CreateContext::detached("test")
    }
}

fn refs<'a>(tensors: &[&'a Tensor]) -> Vec<TensorRef<'a>> {
    tensors.iter().map(|t| TensorRef::from(*t)).collect()
}

fn tensors(out: RResult<RVec<RTensor>, PluginError>) -> Result<Vec<Tensor>, PluginError> {
    out.into_result()
        .map(|v| v.into_iter().map(RTensor::into_tensor).collect())
}

/// A tensor op built through the adapter.
pub struct TestTensorOp(TensorOpBox);

/// Builds the registered tensor op `name` from `config` (TOML text).
pub fn tensor_op(
    name: &str,
    config: &str,
    inputs: &[&str],
    outputs: &[&str],
) -> Result<TestTensorOp, PluginError> {
    let (i, o) = (keys(inputs), keys(outputs));
    adapter::create_tensor_op(name.into(), config.into(), &context(&i, &o))
        .into_result()
        .map(TestTensorOp)
}

impl TestTensorOp {
    /// Runs `forward` in a training context.
    pub fn forward(&mut self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, PluginError> {
        self.forward_with(inputs, &StepContext::for_tests())
    }

    /// Runs `forward` in the given context.
    pub fn forward_with(
        &mut self,
        inputs: &[&Tensor],
        ctx: &StepContext<'_>,
    ) -> Result<Vec<Tensor>, PluginError> {
        let handles = refs(inputs);
        tensors(self.0.forward(RSlice::from_slice(&handles), ctx))
    }
}

/// A numpy op built through the adapter.
pub struct TestNumpyOp(NumpyOpBox);

/// Builds the registered numpy op `name` from `config` (TOML text).
pub fn numpy_op(
    name: &str,
    config: &str,
    inputs: &[&str],
    outputs: &[&str],
) -> Result<TestNumpyOp, PluginError> {
    let (i, o) = (keys(inputs), keys(outputs));
    adapter::create_numpy_op(name.into(), config.into(), &context(&i, &o))
        .into_result()
        .map(TestNumpyOp)
}

impl TestNumpyOp {
    /// Transforms one sample.
    pub fn forward(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, PluginError> {
        self.forward_with(inputs, &StepContext::for_tests())
    }

    /// Transforms one sample in the given context (e.g. another `seed`).
    pub fn forward_with(
        &self,
        inputs: &[&Tensor],
        ctx: &StepContext<'_>,
    ) -> Result<Vec<Tensor>, PluginError> {
        let handles = refs(inputs);
        tensors(self.0.forward(RSlice::from_slice(&handles), ctx))
    }

    /// Transforms one batch.
    pub fn forward_batch(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, PluginError> {
        self.forward_batch_with(inputs, &StepContext::for_tests())
    }

    /// Transforms one batch in the given context.
    pub fn forward_batch_with(
        &self,
        inputs: &[&Tensor],
        ctx: &StepContext<'_>,
    ) -> Result<Vec<Tensor>, PluginError> {
        let handles = refs(inputs);
        tensors(self.0.forward_batch(RSlice::from_slice(&handles), ctx))
    }

    /// `true` when the op may run once per batch.
    pub fn batchable(&self) -> bool {
        self.0.batchable()
    }

    /// `true` for filtering ops.
    pub fn is_filter(&self) -> bool {
        self.0.is_filter()
    }

    /// For filtering ops: would this sample be removed?
    pub fn remove(&self, inputs: &[&Tensor]) -> Result<bool, PluginError> {
        let handles = refs(inputs);
        self.0
            .remove(RSlice::from_slice(&handles), &StepContext::for_tests())
            .into_result()
    }
}

/// A slicer built through the adapter.
pub struct TestSlicer(SlicerBox);

/// Builds the registered slicer `name`; `slice` and `unslice` are its key lists.
pub fn slicer(
    name: &str,
    config: &str,
    slice: &[&str],
    unslice: &[&str],
) -> Result<TestSlicer, PluginError> {
    let (i, o) = (keys(slice), keys(unslice));
    adapter::create_slicer(name.into(), config.into(), &context(&i, &o))
        .into_result()
        .map(TestSlicer)
}

impl TestSlicer {
    /// Cuts one key's batch.
    pub fn slice(&mut self, key: &str, batch: &Tensor) -> Result<Vec<Tensor>, PluginError> {
        tensors(self.0.slice(key.into(), TensorRef::from(batch)))
    }

    /// Joins one key's slices.
    pub fn unslice(&mut self, key: &str, slices: &[&Tensor]) -> Result<Tensor, PluginError> {
        let handles = refs(slices);
        self.0
            .unslice(key.into(), RSlice::from_slice(&handles))
            .into_result()
            .map(RTensor::into_tensor)
    }
}

/// A trace or metric built through the adapter.
pub struct TestTrace {
    object: TraceBox,
    inputs: Vec<RString>,
}

/// Builds the registered trace or metric `name`.
pub fn trace(
    name: &str,
    config: &str,
    inputs: &[&str],
    outputs: &[&str],
) -> Result<TestTrace, PluginError> {
    let (i, o) = (keys(inputs), keys(outputs));
    adapter::create_trace(name.into(), config.into(), &context(&i, &o))
        .into_result()
        .map(|object| TestTrace { object, inputs: i })
}

impl TestTrace {
    /// Runs a hook with the given tensors as the trace's inputs, in training, epoch 1 of 1.
    pub fn hook(
        &mut self,
        hook: TraceHook,
        inputs: &[&Tensor],
    ) -> Result<TraceOutput, PluginError> {
        let ctx = TraceContext {
            step: StepContext::for_tests(),
            total_epochs: 1,
            batch_size: inputs
                .first()
                .map(|t| t.size().first().copied().unwrap_or(0) as u64)
                .unwrap_or(0),
        };
        self.hook_with(hook, &ctx, inputs)
    }

    /// Runs a hook in the given context: any mode, epoch, step or batch size.
    ///
    /// ```
    /// # use fe_plugin_api::{testing, Mode, StepContext, TraceContext};
    /// # fn drive(trace: &mut testing::TestTrace) -> Result<(), fe_plugin_api::PluginError> {
    /// let step = StepContext { mode: Mode::Eval, epoch: 3, ..StepContext::for_tests() };
    /// let ctx = TraceContext { step, total_epochs: 5, batch_size: 0 };
    /// trace.hook_with(fe_plugin_api::ffi::TraceHook::EpochEnd, &ctx, &[])?;
    /// # Ok(()) }
    /// ```
    pub fn hook_with(
        &mut self,
        hook: TraceHook,
        ctx: &TraceContext<'_>,
        inputs: &[&Tensor],
    ) -> Result<TraceOutput, PluginError> {
        let values: Vec<ValueRef<'_>> = inputs
            .iter()
            .map(|t| ValueRef::Tensor(TensorRef::from(*t)))
            .collect();
        self.object
            .hook(
                hook,
                ctx,
                RSlice::from_slice(&self.inputs),
                RSlice::from_slice(&values),
            )
            .into_result()
    }

    /// Determined's `on_checkpoint_end`: the host finished writing a checkpoint into `dir`.
    pub fn checkpoint_end(&mut self, dir: &Path) -> Result<(), PluginError> {
        self.event(TrialEvent::CheckpointEnd, dir)
    }

    /// Determined's `on_checkpoint_load`: the host resumed from the checkpoint in `dir`.
    pub fn checkpoint_load(&mut self, dir: &Path) -> Result<(), PluginError> {
        self.event(TrialEvent::CheckpointLoad, dir)
    }

    /// Determined's `on_trial_close`: the run is over.
    pub fn trial_close(&mut self) -> Result<(), PluginError> {
        self.event(TrialEvent::TrialClose, Path::new(""))
    }

    fn event(&mut self, event: TrialEvent, dir: &Path) -> Result<(), PluginError> {
        let dir = dir.to_string_lossy();
        self.object.event(event, RStr::from_str(&dir)).into_result()
    }

    /// For metrics: one epoch over `batches`, reduced as if each group of batches had run on
    /// its own worker. `workers[k]` lists the batch indices worker `k` saw.
    pub fn metric_epoch(
        &mut self,
        batches: &[Vec<Tensor>],
        workers: &[Vec<usize>],
    ) -> Result<Vec<Value>, PluginError> {
        let mut partials = RVec::new();
        for worker in workers {
            self.hook(TraceHook::EpochBegin, &[])?;
            for &index in worker {
                let batch: Vec<&Tensor> = batches[index].iter().collect();
                self.hook(TraceHook::BatchEnd, &batch)?;
            }
            if let Some(partial) = self.object.metric_partial().into_result()?.into_option() {
                partials.push(partial);
            }
        }
        self.object
            .metric_reduce(partials)
            .into_result()
            .map(|v| v.into_iter().collect())
    }
}

/// A model built through the adapter.
pub struct TestModel(ModelBox);

/// Builds the registered model `name` on the CPU.
pub fn model(name: &str, config: &str) -> Result<TestModel, PluginError> {
    adapter::create_model(name.into(), config.into(), &context(&[], &[]))
        .into_result()
        .map(TestModel)
}

impl TestModel {
    /// Runs the model.
    pub fn forward(&mut self, inputs: &[&Tensor], train: bool) -> Result<Vec<Tensor>, PluginError> {
        let handles = refs(inputs);
        tensors(
            self.0
                .forward(RSlice::from_slice(&handles), train, RSlice::from_slice(&[])),
        )
    }

    /// The model's variables by name.
    pub fn variables(&self) -> Result<Vec<(String, Tensor)>, PluginError> {
        self.0.variables().into_result().map(|v| {
            v.into_iter()
                .map(|named| (named.name.into_string(), named.tensor.into_tensor()))
                .collect()
        })
    }
}

/// A dataset built through the adapter.
pub struct TestDataset(DatasetBox);

/// Builds the registered dataset `name` from its TOML `config`.
pub fn dataset(name: &str, config: &str) -> Result<TestDataset, PluginError> {
    adapter::create_dataset(name.into(), config.into(), &context(&[], &[]))
        .into_result()
        .map(TestDataset)
}

impl TestDataset {
    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// `true` when there are no samples.
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }

    /// The keys of every sample.
    pub fn keys(&self) -> Vec<String> {
        self.0
            .keys()
            .into_iter()
            .map(RString::into_string)
            .collect()
    }

    /// Sample `index`.
    pub fn get(&self, index: u64) -> Result<Vec<Tensor>, PluginError> {
        tensors(self.0.get(index))
    }
}

macro_rules! opaque_debug {
    ($($name:ident),*) => {$(
        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(stringify!($name))
            }
        }
    )*};
}

/// `state` and `load_state` of every kind: what the host saves into and restores from a
/// checkpoint.
macro_rules! checkpointed {
    ($($name:ident . $field:tt),*) => {$(
        impl $name {
            /// The component's state, as the host would save it in a checkpoint.
            pub fn state(&self) -> Result<State, PluginError> {
                self.$field.state().into_result().map(State::from_ffi)
            }

            /// Restores a state from [`state`](Self::state), as the host does on resume.
            pub fn load_state(&mut self, state: State) -> Result<(), PluginError> {
                self.$field.load_state(state.into_ffi()).into_result()
            }
        }
    )*};
}

checkpointed!(
    TestTensorOp.0,
    TestNumpyOp.0,
    TestSlicer.0,
    TestTrace.object,
    TestModel.0,
    TestDataset.0
);

opaque_debug!(
    TestTensorOp,
    TestNumpyOp,
    TestSlicer,
    TestTrace,
    TestModel,
    TestDataset
);
