//! The Network executor: runs the ops of a step over a batch of named tensors.
//!
//! Per step: the keys the ops need are moved to the device, the ops run in order (each reads
//! its input keys and writes its output keys), deferred updates are applied, and only the keys
//! the traces want come back to the CPU batch.

pub mod build;
pub mod builtin;
pub mod keys;
pub mod model;
pub mod plan;

use std::panic::{catch_unwind, AssertUnwindSafe};

use abi_stable::std_types::RStr;
use fe_plugin_api::{Mode, PluginError, StepContext};
use smallvec::SmallVec;
use tch::{Device, Tensor};

pub use builtin::{Deferred, ModelOp, UpdateOp};
pub use keys::{Batch, KeyId, Keys};
pub use model::ModelSlot;
pub use plan::StepPlan;

use crate::error::{During, Error, Result};
use crate::plugins::handles::TensorOpHandle;
use crate::schedule::{DsFilter, ModeFilter};

/// What an op is.
pub enum OpKind {
    /// A plugin tensor op.
    Plugin(TensorOpHandle),
    /// The built-in `ModelOp`.
    Model(ModelOp),
    /// The built-in `UpdateOp`.
    Update(UpdateOp),
}

/// One op of the network with its keys and filters.
pub struct OpNode {
    /// `Name (network.ops[i])`, for messages.
    pub label: String,
    /// The component name.
    pub name: String,
    /// Keys read.
    pub inputs: Vec<KeyId>,
    /// Keys written.
    pub outputs: Vec<KeyId>,
    /// Modes it runs in.
    pub modes: ModeFilter,
    /// Dataset ids it runs for.
    pub ds_ids: DsFilter,
    /// The op itself.
    pub kind: OpKind,
}

/// The network: ops and the models they use, on one device.
pub struct Network {
    /// Ops in manifest order.
    pub ops: Vec<OpNode>,
    /// Models in manifest order.
    pub models: Vec<ModelSlot>,
    /// Where models live and batches go.
    pub device: Device,
    /// Names of keys, for messages.
    pub keys: Keys,
    /// Per-step scratch: the device-side values of every key.
    work: Vec<Option<Tensor>>,
}

impl Network {
    /// A network of `ops` over `models` on `device`.
    pub fn new(ops: Vec<OpNode>, models: Vec<ModelSlot>, device: Device, keys: Keys) -> Self {
        Self {
            ops,
            models,
            device,
            keys,
            work: Vec::new(),
        }
    }

    /// Keys that are losses: the inputs of every `UpdateOp` running in `mode`.
    pub fn loss_keys(&self, mode: Mode) -> Vec<KeyId> {
        let mut keys: Vec<KeyId> = self
            .ops
            .iter()
            .filter(|op| matches!(op.kind, OpKind::Update(_)))
            .flat_map(|op| op.inputs.iter().copied())
            .collect();
        // Losses are logged in every mode their producer runs in, not only where updates run.
        keys.retain(|k| {
            self.ops
                .iter()
                .any(|op| op.outputs.contains(k) && op.modes.contains(mode))
        });
        keys.sort();
        keys.dedup();
        keys
    }

    /// Runs one step of `plan` on `batch`; the plan's outputs are written back into the batch.
    pub fn run_step(
        &mut self,
        plan: &StepPlan,
        batch: &mut Batch,
        step: &StepContext<'_>,
    ) -> Result<()> {
        let device = self.device;
        let mut work = std::mem::take(&mut self.work);
        work.clear();
        work.resize_with(plan.width, || None);
        for &key in &plan.inputs {
            if let Some(tensor) = batch.get(key) {
                work[key.0 as usize] = Some(to_device(tensor, device)?);
            }
        }
        let result = self.run_ops(plan, &mut work, step);
        if result.is_ok() {
            for &key in &plan.outputs {
                if let Some(tensor) = work[key.0 as usize].take() {
                    let value = tensor.detach();
                    let value = if device == Device::Cpu {
                        value
                    } else {
                        to_device(&value, Device::Cpu)?
                    };
                    batch.set(key, value);
                }
            }
        }
        work.clear();
        self.work = work;
        result
    }

    fn run_ops(
        &mut self,
        plan: &StepPlan,
        work: &mut [Option<Tensor>],
        step: &StepContext<'_>,
    ) -> Result<()> {
        let _no_grad = (!plan.requires_grad || step.warmup).then(tch::no_grad_guard);
        let mut deferred: Vec<Deferred> = Vec::new();
        let Network {
            ops, models, keys, ..
        } = self;
        for (position, &index) in plan.ops.iter().enumerate() {
            let op = &mut ops[index];
            let outputs = {
                let mut inputs: SmallVec<[&Tensor; 4]> = SmallVec::new();
                for key in &op.inputs {
                    match work.get(key.0 as usize).and_then(Option::as_ref) {
                        Some(tensor) => inputs.push(tensor),
                        None => {
                            return Err(step_error(
                                Error::builtin(
                                    &op.name,
                                    "forward",
                                    format!(
                                        "input key `{}` has no value ({})",
                                        keys.name(*key),
                                        op.label
                                    ),
                                ),
                                step,
                            ))
                        }
                    }
                }
                let run = RunOp {
                    retain_graph: plan.retain_graph[position],
                    defer: plan.defer[position],
                };
                run.call(op, models, &inputs, step, &mut deferred)
                    .map_err(|error| step_error(error, step))?
            };
            if outputs.len() != op.outputs.len() {
                return Err(step_error(
                    Error::builtin(
                        &op.name,
                        "forward",
                        format!(
                            "returned {} tensor(s) for {} output key(s) ({})",
                            outputs.len(),
                            op.outputs.len(),
                            op.label
                        ),
                    ),
                    step,
                ));
            }
            for (key, tensor) in op.outputs.iter().zip(outputs) {
                work[key.0 as usize] = Some(tensor);
            }
        }
        for update in deferred {
            let model = &mut models[update.model];
            let name = model.name.clone();
            model.apply(&update.grads).map_err(|message| {
                step_error(
                    Error::builtin("UpdateOp", "forward", format!("{name}: {message}")),
                    step,
                )
            })?;
        }
        Ok(())
    }
}

/// How one op is called within a plan.
struct RunOp {
    retain_graph: bool,
    defer: bool,
}

impl RunOp {
    fn call(
        &self,
        op: &mut OpNode,
        models: &mut [ModelSlot],
        inputs: &[&Tensor],
        step: &StepContext<'_>,
        deferred: &mut Vec<Deferred>,
    ) -> std::result::Result<Vec<Tensor>, PluginError> {
        match &mut op.kind {
            OpKind::Plugin(handle) => handle.forward(inputs, step),
            OpKind::Model(model_op) => {
                let model = &mut models[model_op.model];
                let train = step.mode == Mode::Train && model_op.trainable && !step.warmup;
                let layers: SmallVec<[RStr<'_>; 4]> =
                    model_op.layers.iter().map(|l| RStr::from_str(l)).collect();
                model.handle.forward(inputs, train, &layers)
            }
            OpKind::Update(update) => {
                if step.warmup {
                    return Ok(Vec::new());
                }
                let Some(loss) = inputs.first() else {
                    return Err(Error::builtin("UpdateOp", "forward", "no loss given"));
                };
                let model = &mut models[update.model];
                // Host code calling libtorch can panic (tch's non-`f_` methods); keep it an error.
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    update.forward(model, loss, self.retain_graph, self.defer, deferred)
                }));
                match outcome {
                    Ok(Ok(())) => Ok(Vec::new()),
                    Ok(Err(message)) => Err(Error::builtin("UpdateOp", "forward", message)),
                    Err(payload) => Err(Error::builtin(
                        "UpdateOp",
                        "forward",
                        fe_plugin_api::panic_message(payload.as_ref()),
                    )),
                }
            }
        }
    }
}

/// Moves a tensor to `device` (a no-op sharing storage when it is already there). Copies from
/// pinned host memory to CUDA are asynchronous.
pub fn to_device(tensor: &Tensor, device: Device) -> Result<Tensor> {
    if tensor.device() == device {
        return Ok(tensor.shallow_clone());
    }
    tensor
        .f_to_device_(device, tensor.kind(), true, false)
        .map_err(|e| {
            Error::Run(format!(
                "cannot move a batch to {device:?}: {}",
                crate::tch_message(e)
            ))
        })
}

/// Stamps a component failure with where in the run it happened.
pub fn step_error(error: PluginError, step: &StepContext<'_>) -> Error {
    let during = During {
        mode: step.mode,
        epoch: step.epoch,
        step: step.global_step,
        batch: step.batch_idx,
        ds_id: step.ds_id.as_str(),
        warmup: step.warmup,
    };
    Error::Component {
        error,
        during: during.to_string(),
    }
}
