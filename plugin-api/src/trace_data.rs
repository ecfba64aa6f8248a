//! What traces read and write: values keyed by name, and the run context.

use abi_stable::std_types::{RSlice, RStr, RString, RVec};
use abi_stable::StableAbi;
use tch::Tensor;

use crate::context::StepContext;
use crate::tensor::{RTensor, TensorRef, TensorView};
use crate::{Error, Result};

/// The run as a trace sees it.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct TraceContext<'a> {
    /// Mode, epoch, step, batch index and dataset id.
    pub step: StepContext<'a>,
    /// Number of epochs the run is configured for.
    pub total_epochs: u32,
    /// Samples in the current batch (0 outside batch hooks).
    pub batch_size: u64,
}

impl TraceContext<'_> {
    /// This process's data-parallel rank (0 in a single-process run). Traces that write
    /// shared files usually do so on rank 0 only.
    pub fn rank(&self) -> u32 {
        crate::run::current().rank
    }

    /// How many processes train together (1 in a single-process run).
    pub fn world_size(&self) -> u32 {
        crate::run::current().world_size
    }

    /// The whole run: manifest and output directories, rank and world size.
    pub fn run(&self) -> crate::RunInfo {
        crate::run::current()
    }

    /// Adds (or replaces) the graph `name` in the run's summary, FastEstimator's
    /// `system.add_graph`: histories too rich for the logged values (per-class curves, label
    /// tracking). Call it from a hook; an error under a host older than fe-plugin-api 0.1.2.
    pub fn add_graph(&self, name: &str, graphs: &[crate::Graph]) -> Result<()> {
        crate::host_link::add_graph(name, graphs)
    }
}

/// A value a trace writes: a number, a text, or a tensor.
#[repr(u8)]
#[derive(StableAbi, Debug)]
pub enum Value {
    /// A floating-point scalar.
    Float(f64),
    /// An integer scalar.
    Int(i64),
    /// A text.
    Text(RString),
    /// A tensor (per-class values, confusion matrices, ...).
    Tensor(RTensor),
}

impl Value {
    /// The value as `f64` when it is a number or a one-element tensor.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(v) => Some(*v),
            Value::Int(v) => Some(*v as f64),
            Value::Tensor(t) if t.view().numel() == 1 => t
                .view()
                .f_double_value(&[])
                .ok()
                .or_else(|| t.view().f_double_value(&[0]).ok()),
            _ => None,
        }
    }

    /// Borrows the value.
    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Float(v) => ValueRef::Float(*v),
            Value::Int(v) => ValueRef::Int(*v),
            Value::Text(s) => ValueRef::Text(s.as_rstr()),
            Value::Tensor(t) => ValueRef::Tensor(t.as_ref()),
        }
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Self {
        Value::Tensor(RTensor::new(t))
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s.into())
    }
}

/// A borrowed [`Value`], or `Missing` when the key has no value yet.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy)]
pub enum ValueRef<'a> {
    /// The key has no value here.
    Missing,
    /// A floating-point scalar.
    Float(f64),
    /// An integer scalar.
    Int(i64),
    /// A text.
    Text(RStr<'a>),
    /// A tensor.
    Tensor(TensorRef<'a>),
}

/// One write made by a trace.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct TraceWrite {
    /// The key written.
    pub key: RString,
    /// The value.
    pub value: Value,
    /// `false` for values other traces may read but the logs should not show.
    pub log: bool,
}

/// What a trace hook hands back to the host.
#[repr(C)]
#[derive(StableAbi, Debug, Default)]
pub struct TraceOutput {
    /// Values written, in order.
    pub writes: RVec<TraceWrite>,
    /// `true` asks the host to stop training after the current epoch.
    pub stop_training: bool,
}

/// The trace's view of the data in a hook: its inputs, by position or key, and its writes.
pub struct TraceData<'a> {
    keys: RSlice<'a, RString>,
    values: RSlice<'a, ValueRef<'a>>,
    output: TraceOutput,
}

impl<'a> TraceData<'a> {
    /// Inputs `values[i]` for the key `keys[i]`.
    pub fn new(keys: RSlice<'a, RString>, values: RSlice<'a, ValueRef<'a>>) -> Self {
        Self {
            keys,
            values,
            output: TraceOutput::default(),
        }
    }

    /// The input keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.as_str())
    }

    /// Input `index` as given by the host.
    pub fn get(&self, index: usize) -> ValueRef<'a> {
        self.values.get(index).copied().unwrap_or(ValueRef::Missing)
    }

    /// Input `index` as a tensor; an error naming the key when it is missing or not a tensor.
    pub fn tensor(&self, index: usize) -> Result<TensorView<'a>> {
        match self.get(index) {
            ValueRef::Tensor(t) => Ok(t.view()),
            other => Err(self.wrong_input(index, "a tensor", other)),
        }
    }

    /// Input `index` as a number (a scalar value or a one-element tensor).
    pub fn scalar(&self, index: usize) -> Result<f64> {
        match self.get(index) {
            ValueRef::Float(v) => Ok(v),
            ValueRef::Int(v) => Ok(v as f64),
            ValueRef::Tensor(t) if t.view().numel() == 1 => {
                Ok(t.view().f_view([1])?.double_value(&[0]))
            }
            other => Err(self.wrong_input(index, "a number", other)),
        }
    }

    /// Input `index` as a number, or `None` when missing.
    pub fn scalar_opt(&self, index: usize) -> Option<f64> {
        match self.get(index) {
            ValueRef::Missing => None,
            _ => self.scalar(index).ok(),
        }
    }

    /// Writes a value that is logged.
    pub fn write(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        self.push(key.into(), value.into(), true);
    }

    /// Writes a value other traces can read, without logging it.
    pub fn write_without_log(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        self.push(key.into(), value.into(), false);
    }

    /// Asks the host to stop training at the end of this epoch.
    pub fn request_stop(&mut self) {
        self.output.stop_training = true;
    }

    /// What was written, for the host.
    pub fn into_output(self) -> TraceOutput {
        self.output
    }

    fn push(&mut self, key: String, value: Value, log: bool) {
        self.output.writes.push(TraceWrite {
            key: key.into(),
            value,
            log,
        });
    }

    fn wrong_input(&self, index: usize, wanted: &str, got: ValueRef<'_>) -> Error {
        let key = self.keys.get(index).map(|k| k.as_str()).unwrap_or("?");
        let got = match got {
            ValueRef::Missing => "nothing",
            ValueRef::Float(_) | ValueRef::Int(_) => "a number",
            ValueRef::Text(_) => "a text",
            ValueRef::Tensor(_) => "a tensor",
        };
        Error::msg(format!("input `{key}` should be {wanted} but is {got}"))
    }
}
