//! The six kinds of component a plugin can provide, as plain Rust traits.
//!
//! Implement one, give it a [`FromConfig`] constructor, register it with
//! `inventory::submit!` (see [`Registration`](crate::Registration)) and call
//! [`export_plugin!`](crate::export_plugin) once per crate. The adapter in this crate turns
//! each into an ABI-stable object, catches panics, and names the plugin, component and method
//! in every error.

use std::path::Path;

use serde::de::DeserializeOwned;
use tch::Tensor;

use crate::context::{CreateContext, StepContext};
use crate::state::State;
use crate::trace_data::{TraceContext, TraceData, Value};
use crate::{Error, Result};

/// Builds a component from its manifest table.
///
/// `Config` is deserialized from the component's TOML table (minus the keys the host owns:
/// `op`, `inputs`, `outputs`, `mode`, `ds_id`, ...). Fields the config does not know are
/// errors that name the field.
///
/// ```
/// use fe_plugin_api::{CreateContext, FromConfig, Result};
///
/// #[derive(fe_plugin_api::serde::Deserialize)]
/// #[serde(crate = "fe_plugin_api::serde")]
/// struct ScaleConfig { factor: f64 }
///
/// struct Scale { factor: f64 }
///
/// impl FromConfig for Scale {
///     type Config = ScaleConfig;
///     fn from_config(config: ScaleConfig, ctx: &CreateContext<'_>) -> Result<Self> {
///         ctx.expect_arity(Some(1), Some(1))?;
///         Ok(Scale { factor: config.factor })
///     }
/// }
/// ```
pub trait FromConfig: Sized {
    /// The deserialized manifest table.
    type Config: DeserializeOwned;
    /// Creates the component.
    fn from_config(config: Self::Config, ctx: &CreateContext<'_>) -> Result<Self>;
}

/// A config with no fields: any field given in the manifest is an error.
#[derive(serde::Deserialize, Debug, Default, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub struct NoConfig {}

/// A network op: reads tensors by key, writes tensors by key, on the run's device.
///
/// ```
/// use fe_plugin_api::{StepContext, Result, TensorOp};
/// use fe_plugin_api::tch::Tensor;
///
/// /// Doubles its input.
/// struct Double;
///
/// impl TensorOp for Double {
///     fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
///         Ok(vec![inputs[0].f_mul_scalar(2.0)?])
///     }
/// }
///
/// let mut op = Double;
/// let out = op.forward(&[&Tensor::from_slice(&[1.5f32])], &StepContext::for_tests())?;
/// assert_eq!(out[0].double_value(&[0]), 3.0);
/// # Ok::<(), fe_plugin_api::Error>(())
/// ```
pub trait TensorOp: Send + 'static {
    /// Computes the outputs (in the order of the op's output keys) from the inputs (in the
    /// order of its input keys).
    fn forward(&mut self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>>;

    /// State to checkpoint. Stateless ops keep the default.
    fn state(&self) -> Result<State> {
        Ok(State::empty())
    }

    /// Restores what [`TensorOp::state`] returned.
    fn load_state(&mut self, state: State) -> Result<()> {
        reject_state(state)
    }
}

/// A CPU data transform. In the pipeline it runs on one sample at a time, on worker threads,
/// hence `&self` and `Sync`; as network post-processing it runs on whole batches.
///
/// Randomness must come from `ctx.seed`, which the host derives from the run seed, the epoch,
/// the sample and the op, so results do not depend on the number of workers.
///
/// ```
/// use fe_plugin_api::{NumpyOp, StepContext, Result};
/// use fe_plugin_api::tch::Tensor;
///
/// /// Scales pixel values into [0, 1].
/// struct ToUnit;
///
/// impl NumpyOp for ToUnit {
///     fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
///         Ok(vec![inputs[0].f_to_kind(fe_plugin_api::tch::Kind::Float)?.f_div_scalar(255.0)?])
///     }
/// }
///
/// let out = ToUnit.forward(&[&Tensor::from_slice(&[255u8])], &StepContext::for_tests())?;
/// assert_eq!(out[0].double_value(&[0]), 1.0);
/// # Ok::<(), fe_plugin_api::Error>(())
/// ```
pub trait NumpyOp: Send + Sync + 'static {
    /// Transforms one sample.
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>>;

    /// Transforms a batch (dimension 0 is the batch). The default runs [`NumpyOp::forward`]
    /// on every sample and stacks the results; override it when a vectorised form exists.
    fn forward_batch(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        per_sample(inputs, |sample| self.forward(sample, ctx))
    }

    /// `true` when [`NumpyOp::forward_batch`] on stacked samples gives exactly the per-sample
    /// results stacked: no randomness, nothing computed across samples, any batch size. The
    /// pipeline then runs the op once per batch instead of once per sample (trailing ops only,
    /// so ops before it still see single samples). Leave `false` for random augmentations.
    fn batchable(&self) -> bool {
        false
    }

    /// `true` for filtering ops: the host calls [`NumpyOp::remove`] instead of `forward`.
    fn is_filter(&self) -> bool {
        false
    }

    /// For filtering ops: `true` drops the sample from the epoch.
    fn remove(&self, _inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<bool> {
        Ok(false)
    }

    /// State to checkpoint (ops drawing randomness from `ctx.seed` have none).
    fn state(&self) -> Result<State> {
        Ok(State::empty())
    }

    /// Restores what [`NumpyOp::state`] returned. Takes `&self`: ops shared by pipeline
    /// workers keep mutable state behind a lock.
    fn load_state(&self, state: State) -> Result<()> {
        reject_state(state)
    }
}

/// Runs `f` on each sample of a batch and stacks each output along a new dimension 0.
pub fn per_sample(
    inputs: &[&Tensor],
    mut f: impl FnMut(&[&Tensor]) -> Result<Vec<Tensor>>,
) -> Result<Vec<Tensor>> {
    let batch = match inputs.first() {
        Some(first) => first.size().first().copied().unwrap_or(0),
        None => return Ok(Vec::new()),
    };
    let mut columns: Vec<Vec<Tensor>> = Vec::new();
    for index in 0..batch {
        let sample: Vec<Tensor> = inputs
            .iter()
            .map(|t| t.f_get(index))
            .collect::<std::result::Result<_, _>>()?;
        let refs: Vec<&Tensor> = sample.iter().collect();
        let outputs = f(&refs)?;
        if columns.is_empty() {
            columns = outputs
                .iter()
                .map(|_| Vec::with_capacity(batch as usize))
                .collect();
        }
        if outputs.len() != columns.len() {
            return Err(Error::msg(
                "forward returned a different number of outputs per sample",
            ));
        }
        for (column, output) in columns.iter_mut().zip(outputs) {
            column.push(output);
        }
    }
    columns
        .iter()
        .map(|column| Tensor::f_stack(column, 0).map_err(Error::from))
        .collect()
}

/// Cuts a batch into minibatches before the network runs, and joins the results after
/// (FastEstimator's Slicer). The host calls `slice` once per key named in the slicer's
/// `slice` list and `unslice` once per key in its `unslice` list.
///
/// ```
/// use fe_plugin_api::{Result, Slicer};
/// use fe_plugin_api::tch::{Device, Kind, Tensor};
///
/// /// Halves every batch along dimension 0.
/// struct Halves;
///
/// impl Slicer for Halves {
///     fn slice(&mut self, _key: &str, batch: &Tensor) -> Result<Vec<Tensor>> {
///         Ok(batch.f_chunk(2, 0)?)
///     }
///     fn unslice(&mut self, _key: &str, slices: &[&Tensor]) -> Result<Tensor> {
///         Ok(Tensor::f_cat(slices, 0)?)
///     }
/// }
///
/// let parts = Halves.slice("x", &Tensor::arange(4, (Kind::Int64, Device::Cpu)))?;
/// assert_eq!(parts.len(), 2);
/// # Ok::<(), fe_plugin_api::Error>(())
/// ```
pub trait Slicer: Send + 'static {
    /// Cuts `batch` (the value of `key`) into minibatches.
    fn slice(&mut self, key: &str, batch: &Tensor) -> Result<Vec<Tensor>>;

    /// Joins the per-minibatch values of `key` back into one batch value.
    fn unslice(&mut self, key: &str, slices: &[&Tensor]) -> Result<Tensor>;

    /// State to checkpoint.
    fn state(&self) -> Result<State> {
        Ok(State::empty())
    }

    /// Restores what [`Slicer::state`] returned.
    fn load_state(&mut self, state: State) -> Result<()> {
        reject_state(state)
    }
}

/// A callback that watches the run: metrics, logging, saving, early stopping.
///
/// Every hook receives the run context and a [`TraceData`] giving the trace's declared inputs
/// (batch tensors in the batch hooks, values written by other traces in the epoch hooks) and
/// taking what it writes.
///
/// ```
/// use fe_plugin_api::{Result, Trace, TraceContext, TraceData};
///
/// /// Stops training once epoch `last` has run.
/// struct StopAfter { last: u32 }
///
/// impl Trace for StopAfter {
///     fn on_epoch_end(&mut self, ctx: &TraceContext<'_>, data: &mut TraceData<'_>) -> Result<()> {
///         if ctx.step.epoch >= self.last {
///             data.request_stop();
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait Trace: Send + 'static {
    /// Before the first epoch.
    fn on_begin(&mut self, _ctx: &TraceContext<'_>, _data: &mut TraceData<'_>) -> Result<()> {
        Ok(())
    }
    /// At the start of every epoch of a mode this trace runs in.
    fn on_epoch_begin(&mut self, _ctx: &TraceContext<'_>, _data: &mut TraceData<'_>) -> Result<()> {
        Ok(())
    }
    /// Before each batch runs through the network.
    fn on_batch_begin(&mut self, _ctx: &TraceContext<'_>, _data: &mut TraceData<'_>) -> Result<()> {
        Ok(())
    }
    /// After each batch, with the network's outputs.
    fn on_batch_end(&mut self, _ctx: &TraceContext<'_>, _data: &mut TraceData<'_>) -> Result<()> {
        Ok(())
    }
    /// At the end of every epoch.
    fn on_epoch_end(&mut self, _ctx: &TraceContext<'_>, _data: &mut TraceData<'_>) -> Result<()> {
        Ok(())
    }
    /// After the last epoch, including after an early stop.
    fn on_end(&mut self, _ctx: &TraceContext<'_>, _data: &mut TraceData<'_>) -> Result<()> {
        Ok(())
    }
    /// After a checkpoint was written completely into `dir`.
    fn on_checkpoint_end(&mut self, _dir: &Path) -> Result<()> {
        Ok(())
    }
    /// After the run was restored from the checkpoint in `dir`.
    fn on_checkpoint_load(&mut self, _dir: &Path) -> Result<()> {
        Ok(())
    }
    /// Once at the very end of a run, whether it succeeded or failed.
    fn on_trial_close(&mut self) -> Result<()> {
        Ok(())
    }
    /// State to checkpoint.
    fn state(&self) -> Result<State> {
        Ok(State::empty())
    }
    /// Restores what [`Trace::state`] returned.
    fn load_state(&mut self, state: State) -> Result<()> {
        reject_state(state)
    }
}

/// A metric computed the way Determined's `MetricReducer` does, so it stays exact when the
/// batches are spread over several workers: each worker [`accumulate`](Metric::accumulate)s
/// its batches into a partial state, and [`reduce`](Metric::reduce) combines the partial
/// states of all workers into the final values. Registered as a metric, it runs as a trace:
/// reset at each epoch start, accumulate after each batch, reduce and write at epoch end.
///
/// ```
/// use fe_plugin_api::{Metric, Result, State, Value};
/// use fe_plugin_api::tch::Tensor;
///
/// /// Mean of its single input over all samples.
/// #[derive(Default)]
/// struct Mean { sum: f64, count: f64 }
///
/// impl Metric for Mean {
///     fn reset(&mut self) { *self = Mean::default(); }
///     fn accumulate(&mut self, inputs: &[&Tensor]) -> Result<()> {
///         self.sum += inputs[0].f_sum(fe_plugin_api::tch::Kind::Double)?.double_value(&[]);
///         self.count += inputs[0].numel() as f64;
///         Ok(())
///     }
///     fn partial(&self) -> Result<State> { State::from_json(&(self.sum, self.count)) }
///     fn reduce(&self, partials: &[State]) -> Result<Vec<Value>> {
///         let (mut sum, mut count) = (0.0, 0.0);
///         for partial in partials {
///             let (s, c): (f64, f64) = partial.json()?;
///             sum += s;
///             count += c;
///         }
///         Ok(vec![Value::Float(sum / count)])
///     }
/// }
/// ```
pub trait Metric: Send + 'static {
    /// Forgets everything accumulated.
    fn reset(&mut self);
    /// Adds one batch (inputs in the order of the metric's input keys).
    fn accumulate(&mut self, inputs: &[&Tensor]) -> Result<()>;
    /// This worker's partial state.
    fn partial(&self) -> Result<State>;
    /// Combines the partial states of every worker into the final values, one per output key.
    fn reduce(&self, partials: &[State]) -> Result<Vec<Value>>;
    /// At each epoch end, on every worker, just before [`reduce`](Metric::reduce): the run
    /// context, for metrics whose result depends on the mode or step (`LabelTracker` files a
    /// summary graph per mode and step). A provided Rust method, adapted inside the plugin:
    /// it changes no type that crosses the ABI.
    fn on_epoch_end(&mut self, _ctx: &TraceContext<'_>) -> Result<()> {
        Ok(())
    }
    /// What the metric keeps across epochs, which [`reset`](Metric::reset) leaves alone (a
    /// history over the epochs, a best value so far), for checkpoints; not the partial state,
    /// which the host checkpoints itself. A resumed run hands it to
    /// [`load_state`](Metric::load_state) after `reset`, so the history goes on where the
    /// checkpoint left it. Provided Rust methods like `on_epoch_end`: the plugin's adapter
    /// carries the kept state inside the checkpoint state it already returns, and no type that
    /// crosses the ABI changes; under a host older than this release the kept state is not
    /// handed back (the history starts at the resume).
    fn state(&self) -> Result<State> {
        Ok(State::empty())
    }
    /// Restores what [`Metric::state`] returned.
    fn load_state(&mut self, state: State) -> Result<()> {
        reject_state(state)
    }
}

/// A model architecture. Parameters and buffers are created on `ctx.device` at construction
/// (usually through a `tch::nn::VarStore`) and handed to the host by name; the host owns the
/// optimizer, moves and checkpoints them.
///
/// ```
/// use fe_plugin_api::{Model, Result};
/// use fe_plugin_api::tch::{nn, nn::Module, Tensor};
///
/// struct Linear { vs: nn::VarStore, layer: nn::Linear }
///
/// impl Model for Linear {
///     fn forward(&mut self, inputs: &[&Tensor], _train: bool) -> Result<Vec<Tensor>> {
///         Ok(vec![self.layer.forward(inputs[0])])
///     }
///     fn variables(&self) -> Vec<(String, Tensor)> {
///         fe_plugin_api::var_store_variables(&self.vs)
///     }
/// }
///
/// let vs = nn::VarStore::new(fe_plugin_api::tch::Device::Cpu);
/// let layer = nn::linear(vs.root() / "fc", 3, 2, Default::default());
/// let mut model = Linear { vs, layer };
/// let names: Vec<String> = model.variables().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["fc.bias", "fc.weight"]);
/// ```
pub trait Model: Send + 'static {
    /// Runs the model; `train` selects training behaviour (dropout, batch-norm statistics).
    fn forward(&mut self, inputs: &[&Tensor], train: bool) -> Result<Vec<Tensor>>;

    /// Runs the model and also returns the outputs of the named intermediate layers.
    fn forward_with_layers(
        &mut self,
        inputs: &[&Tensor],
        train: bool,
        layers: &[&str],
    ) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
        if let Some(layer) = layers.first() {
            return Err(Error::unsupported(format!(
                "this model exposes no intermediate layers (asked for `{layer}`)"
            )));
        }
        Ok((self.forward(inputs, train)?, Vec::new()))
    }

    /// Names accepted by [`Model::forward_with_layers`].
    fn layers(&self) -> Vec<String> {
        Vec::new()
    }

    /// Every parameter and buffer, by unique name, sharing storage with the model.
    /// Parameters are the ones that require gradients.
    fn variables(&self) -> Vec<(String, Tensor)>;

    /// State beyond the variables (which the host saves itself), e.g. counters.
    fn state(&self) -> Result<State> {
        Ok(State::empty())
    }

    /// Restores what [`Model::state`] returned.
    fn load_state(&mut self, state: State) -> Result<()> {
        reject_state(state)
    }
}

/// The variables of a `VarStore`, sorted by name (shallow copies sharing storage).
pub fn var_store_variables(vs: &tch::nn::VarStore) -> Vec<(String, Tensor)> {
    let mut variables: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    variables.sort_by(|a, b| a.0.cmp(&b.0));
    variables
}

/// A source of samples for formats the host does not read itself, or generated data.
/// Must be deterministic: the same index gives the same sample.
///
/// ```
/// use fe_plugin_api::{Dataset, Result};
/// use fe_plugin_api::tch::Tensor;
///
/// /// The numbers 0..n with their squares.
/// struct Squares { n: u64 }
///
/// impl Dataset for Squares {
///     fn len(&self) -> u64 { self.n }
///     fn keys(&self) -> Vec<String> { vec!["x".into(), "y".into()] }
///     fn get(&self, index: u64) -> Result<Vec<Tensor>> {
///         let x = index as f32;
///         Ok(vec![Tensor::from(x), Tensor::from(x * x)])
///     }
/// }
/// assert_eq!(Squares { n: 4 }.get(3)?[1].double_value(&[]), 9.0);
/// # Ok::<(), fe_plugin_api::Error>(())
/// ```
pub trait Dataset: Send + Sync + 'static {
    /// Number of samples.
    fn len(&self) -> u64;
    /// `true` when there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The keys every sample has, in the order `get` returns them.
    fn keys(&self) -> Vec<String>;
    /// Sample `index` (`0 <= index < len()`).
    fn get(&self, index: u64) -> Result<Vec<Tensor>>;

    /// State to checkpoint (datasets that are pure functions of the index have none).
    fn state(&self) -> Result<State> {
        Ok(State::empty())
    }

    /// Restores what [`Dataset::state`] returned.
    fn load_state(&self, state: State) -> Result<()> {
        reject_state(state)
    }
}

fn reject_state(state: State) -> Result<()> {
    if state.is_empty() {
        Ok(())
    } else {
        Err(Error::unsupported(
            "this component keeps no state but was given some",
        ))
    }
}
