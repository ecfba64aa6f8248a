//! Pipeline ops: plugin NumpyOps and the host's built-ins (`Delete`, `Batch`, and the meta ops
//! `Sometimes`, `OneOf`, `Repeat`, `Fuse`), and how each runs on a sample or a batch.
//!
//! Every random choice a meta op makes comes from the seed it is given, which the loader
//! derives from the sample (or the batch's first sample) and the op's position, so results
//! never depend on which worker thread ran the op.

use fe_plugin_api::{PluginError, State, StepContext};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::batch::{Batch, KeyId, Keys};
use crate::error::Error;
use crate::manifest::KeyPath;
use crate::network::meta::Condition;
use crate::plugins::handles::NumpyOpHandle;
use crate::schedule::{DsFilter, InForce, ModeFilter};

/// A per-sample (or, after a `Batch` op, per-batch) op of the pipeline.
pub struct PipelineOp {
    /// `Name (pipeline.ops[i])`.
    pub label: String,
    /// The crate providing it (a plugin's, or `fe-host`), named by failures the host detects.
    pub provider: String,
    /// Where it is declared.
    pub path: KeyPath,
    /// Keys read.
    pub inputs: Vec<KeyId>,
    /// Keys written.
    pub outputs: Vec<KeyId>,
    /// Modes it runs in.
    pub modes: ModeFilter,
    /// Dataset ids it runs for.
    pub ds_ids: DsFilter,
    /// Epochs it is in force (scheduled ops).
    pub epochs: InForce,
    /// What the op is. Checkpoints save and restore its state through this field.
    pub handle: OpKind,
    /// When the pipeline cache may keep its outputs: its identity (name, provider and its
    /// version, keys, configuration), which is part of the cache key.
    pub cache: Option<String>,
}

/// How a `Batch` op batches: each field overrides the `[pipeline]` setting when given.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchSpec {
    /// Samples per batch.
    pub batch_size: Option<usize>,
    /// Drop the last, incomplete batch.
    pub drop_last: Option<bool>,
    /// Pad samples of different shapes to the largest with this value when collating.
    pub pad_value: Option<f64>,
}

/// What a pipeline op is.
pub enum OpKind {
    /// A plugin NumpyOp; `filter`, `batchable` and `replacement` are read once at build.
    Plugin {
        /// The op.
        op: NumpyOpHandle,
        /// It drops samples (`is_filter`).
        filter: bool,
        /// It may run once per batch (`batchable`).
        batchable: bool,
        /// For filters: a dropped sample is replaced by another (FastEstimator's default).
        replacement: bool,
    },
    /// Removes its input keys.
    Delete,
    /// Marks where samples become batches; ops after it run on batches.
    Batch(BatchSpec),
    /// Runs `op` with probability `prob`.
    Sometimes {
        /// Probability of running.
        prob: f64,
        /// The wrapped op.
        op: Box<PipelineOp>,
    },
    /// Runs one of `ops`, chosen uniformly.
    OneOf(Vec<PipelineOp>),
    /// Runs `op` `times` times, or while `condition` holds (at least once, at most `max_iter`).
    Repeat {
        /// The wrapped op.
        op: Box<PipelineOp>,
        /// Fixed repetitions.
        times: u32,
        /// Keep repeating while this holds.
        condition: Option<(KeyId, Condition)>,
        /// Upper bound with a condition.
        max_iter: Option<u32>,
    },
    /// Runs `ops` in order as one op.
    Fuse(Vec<PipelineOp>),
}

/// What running an op did to a sample or batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Carry on.
    Keep,
    /// A filter dropped it; `replacement` says whether another takes its place.
    Remove {
        /// Whether the epoch refills (FastEstimator's `replacement`).
        replacement: bool,
    },
}

/// An op that failed: its label and the failure.
#[derive(Debug)]
pub struct OpFailure {
    /// `Name (pipeline.ops[i])` of the op that failed (a wrapped op's own label).
    pub label: String,
    /// What happened.
    pub error: PluginError,
}

impl PipelineOp {
    /// The ops it wraps (none for plain ops).
    pub fn children(&self) -> Vec<&PipelineOp> {
        match &self.handle {
            OpKind::Sometimes { op, .. } | OpKind::Repeat { op, .. } => vec![op],
            OpKind::OneOf(ops) | OpKind::Fuse(ops) => ops.iter().collect(),
            _ => Vec::new(),
        }
    }

    /// `true` when it can drop samples (a filter, or a meta op around one).
    pub fn filters(&self) -> bool {
        match &self.handle {
            OpKind::Plugin { filter, .. } => *filter,
            _ => self.children().iter().any(|c| c.filters()),
        }
    }

    /// `true` when it can drop samples for good (a filter with `replacement = false`, or a
    /// meta op around one): an epoch then ends early, by as much as its data decides.
    pub fn shortens_epochs(&self) -> bool {
        match &self.handle {
            OpKind::Plugin {
                filter,
                replacement,
                ..
            } => *filter && !*replacement,
            _ => self.children().iter().any(|c| c.shortens_epochs()),
        }
    }

    /// `true` when running it once on a batch equals running it on every sample: a
    /// deterministic plugin op that says so, or `Delete`.
    pub fn batchable(&self) -> bool {
        match &self.handle {
            OpKind::Plugin {
                filter, batchable, ..
            } => *batchable && !*filter,
            OpKind::Delete => true,
            _ => false,
        }
    }

    /// The batching a `Batch` op asks for.
    pub fn batch_spec(&self) -> Option<BatchSpec> {
        match &self.handle {
            OpKind::Batch(spec) => Some(*spec),
            _ => None,
        }
    }

    /// Keys that no longer exist after it ran.
    pub fn deletes(&self) -> Vec<KeyId> {
        match &self.handle {
            OpKind::Delete => self.inputs.clone(),
            OpKind::Fuse(ops) => ops.iter().flat_map(PipelineOp::deletes).collect(),
            _ => Vec::new(),
        }
    }

    /// Runs the op on `data` (a sample, or a batch when `batched`). `seed` is this op's seed
    /// for this sample or batch.
    pub fn run(
        &self,
        data: &mut Batch,
        ctx: &StepContext<'_>,
        batched: bool,
        keys: &Keys,
    ) -> Result<Flow, OpFailure> {
        match &self.handle {
            OpKind::Plugin {
                op,
                filter,
                replacement,
                ..
            } => self.run_plugin(op, *filter, *replacement, data, ctx, batched, keys),
            OpKind::Delete => {
                for key in &self.inputs {
                    data.take(*key);
                }
                Ok(Flow::Keep)
            }
            OpKind::Batch(_) => Ok(Flow::Keep),
            OpKind::Sometimes { prob, op } => {
                if rng(ctx.seed).random::<f64>() < *prob {
                    op.run(data, &child(ctx, 1), batched, keys)
                } else {
                    Ok(Flow::Keep)
                }
            }
            OpKind::OneOf(ops) => {
                let choice = rng(ctx.seed).random_range(0..ops.len());
                ops[choice].run(data, &child(ctx, 1), batched, keys)
            }
            OpKind::Fuse(ops) => {
                for (i, op) in ops.iter().enumerate() {
                    let flow = op.run(data, &child(ctx, i as u64 + 1), batched, keys)?;
                    if flow != Flow::Keep {
                        return Ok(flow);
                    }
                }
                Ok(Flow::Keep)
            }
            OpKind::Repeat {
                op,
                times,
                condition,
                max_iter,
            } => self.run_repeat(op, *times, condition, *max_iter, data, ctx, batched, keys),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_plugin(
        &self,
        op: &NumpyOpHandle,
        filter: bool,
        replacement: bool,
        data: &mut Batch,
        ctx: &StepContext<'_>,
        batched: bool,
        keys: &Keys,
    ) -> Result<Flow, OpFailure> {
        let mut inputs = Vec::with_capacity(self.inputs.len());
        for key in &self.inputs {
            match data.get(*key) {
                Some(t) => inputs.push(t),
                None => {
                    return Err(self.failure(format!(
                        "needs key `{}`, which the {} does not have",
                        keys.name(*key),
                        if batched { "batch" } else { "sample" }
                    )))
                }
            }
        }
        if filter {
            let remove = op.remove(&inputs, ctx).map_err(|error| self.wrap(error))?;
            return Ok(if remove {
                Flow::Remove { replacement }
            } else {
                Flow::Keep
            });
        }
        let outputs = if batched {
            op.forward_batch(&inputs, ctx)
        } else {
            op.forward(&inputs, ctx)
        }
        .map_err(|error| self.wrap(error))?;
        if outputs.len() != self.outputs.len() {
            return Err(self.failure(format!(
                "returned {} tensor(s) for {} output key(s)",
                outputs.len(),
                self.outputs.len()
            )));
        }
        for (key, value) in self.outputs.iter().zip(outputs) {
            data.set(*key, value);
        }
        Ok(Flow::Keep)
    }

    #[allow(clippy::too_many_arguments)]
    fn run_repeat(
        &self,
        op: &PipelineOp,
        times: u32,
        condition: &Option<(KeyId, Condition)>,
        max_iter: Option<u32>,
        data: &mut Batch,
        ctx: &StepContext<'_>,
        batched: bool,
        keys: &Keys,
    ) -> Result<Flow, OpFailure> {
        let Some((key, condition)) = condition else {
            for pass in 0..times {
                let flow = op.run(data, &child(ctx, pass as u64 + 1), batched, keys)?;
                if flow != Flow::Keep {
                    return Ok(flow);
                }
            }
            return Ok(Flow::Keep);
        };
        let mut passes = 0u32;
        loop {
            let flow = op.run(data, &child(ctx, passes as u64 + 1), batched, keys)?;
            passes += 1;
            if flow != Flow::Keep || max_iter.is_some_and(|limit| passes >= limit) {
                return Ok(flow);
            }
            let value = data.get(*key).ok_or_else(|| {
                self.failure(format!("`while` key `{}` has no value", keys.name(*key)))
            })?;
            let holds = condition
                .holds(value)
                .map_err(|e| self.failure(crate::tch_message(e)))?;
            if !holds {
                return Ok(Flow::Keep);
            }
        }
    }

    fn failure(&self, message: String) -> OpFailure {
        OpFailure {
            label: self.label.clone(),
            error: {
                let mut error = Error::builtin(&self.label, "forward", message);
                error.plugin = self.provider.as_str().into();
                error
            },
        }
    }

    fn wrap(&self, error: PluginError) -> OpFailure {
        OpFailure {
            label: self.label.clone(),
            error,
        }
    }
}

fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(crate::rng::mix(seed, 0x6d65_7461))
}

/// The context a wrapped op runs in: the same step, its own seed.
fn child<'a>(ctx: &StepContext<'a>, which: u64) -> StepContext<'a> {
    StepContext {
        seed: crate::rng::mix(ctx.seed, which),
        ..*ctx
    }
}

impl OpKind {
    /// Checkpointable state: a plugin op's own, or for a meta op its wrapped ops' states
    /// gathered under their position (`{"children": [...]}`, tensors as `<i>/<name>`).
    pub fn state(&self) -> Result<State, PluginError> {
        match self {
            OpKind::Plugin { op, .. } => op.state(),
            OpKind::Delete | OpKind::Batch(_) => Ok(State::empty()),
            _ => {
                let states = self
                    .children()
                    .into_iter()
                    .map(|c| c.handle.state())
                    .collect::<Result<Vec<_>, _>>()?;
                if states.iter().all(State::is_empty) {
                    return Ok(State::empty());
                }
                let mut jsons = Vec::new();
                let mut tensors = Vec::new();
                for (i, state) in states.into_iter().enumerate() {
                    let (json, named) = state.into_parts();
                    jsons.push(serde_json::Value::String(json));
                    tensors.extend(named.into_iter().map(|(n, t)| (format!("{i}/{n}"), t)));
                }
                let json = serde_json::json!({ "children": jsons }).to_string();
                Ok(State::from_parts(json, tensors))
            }
        }
    }

    /// Restores what [`OpKind::state`] returned.
    pub fn load_state(&self, state: State) -> Result<(), PluginError> {
        let bad = |m: String| Error::builtin("pipeline op", "load_state", m);
        match self {
            OpKind::Plugin { op, .. } => op.load_state(state),
            _ if state.is_empty() => Ok(()),
            OpKind::Delete | OpKind::Batch(_) => Err(bad("this op has no state".into())),
            _ => {
                let children = self.children();
                let (json, tensors) = state.into_parts();
                let parsed: serde_json::Value =
                    serde_json::from_str(&json).map_err(|e| bad(format!("invalid state: {e}")))?;
                let jsons = parsed["children"]
                    .as_array()
                    .filter(|a| a.len() == children.len())
                    .ok_or_else(|| bad(format!("expected {} child states", children.len())))?;
                for (i, (child, json)) in children.iter().zip(jsons).enumerate() {
                    let prefix = format!("{i}/");
                    let named = tensors
                        .iter()
                        .filter_map(|(n, t)| {
                            n.strip_prefix(&prefix)
                                .map(|n| (n.to_owned(), t.shallow_clone()))
                        })
                        .collect();
                    let json = json.as_str().unwrap_or_default().to_owned();
                    child.handle.load_state(State::from_parts(json, named))?;
                }
                Ok(())
            }
        }
    }

    fn children(&self) -> Vec<&PipelineOp> {
        match self {
            OpKind::Sometimes { op, .. } | OpKind::Repeat { op, .. } => vec![op],
            OpKind::OneOf(ops) | OpKind::Fuse(ops) => ops.iter().collect(),
            _ => Vec::new(),
        }
    }
}
