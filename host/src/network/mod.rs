//! The Network executor: runs the ops of a step over a batch of named tensors.
//!
//! Per step: slicers (if any) cut the batch; for each (mini)batch only the keys the ops need are
//! moved to the device, the ops run in order (each reads its input keys and writes its output
//! keys), deferred updates are applied, and only the keys traces and post-processing want come
//! back to the CPU; slicers join the minibatches; post-processing runs on the whole batch.

pub mod build;
pub mod builtin;
pub mod execute;
pub mod meta;
pub mod model;
pub mod node;
pub mod plan;
pub mod post;
pub mod precision;
pub mod regularize;
pub mod slicing;
pub mod state;
pub mod torchscript;

use fe_plugin_api::{PluginError, StepContext};
use rand_chacha::rand_core::SeedableRng;
use tch::{Device, Tensor};

pub use crate::batch::{Batch, KeyId, Keys};
pub use builtin::{Deferred, GradientOp, ModelOp, UpdateOp};
pub use execute::Flags;
pub use model::{ModelParts, ModelSlot};
pub use node::{OpKind, OpNode};
pub use plan::StepPlan;
pub use post::PostOp;
pub use slicing::SlicerNode;

use crate::error::{During, Error, Result};

/// The network: ops, slicers and post-processing, and the models they use, on one device.
pub struct Network {
    /// Ops in manifest order.
    pub ops: Vec<OpNode>,
    /// Models in manifest order.
    pub models: Vec<ModelSlot>,
    /// Slicers in manifest order.
    pub slicers: Vec<SlicerNode>,
    /// Post-processing ops in manifest order.
    pub post: Vec<PostOp>,
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
            slicers: Vec::new(),
            post: Vec::new(),
            device,
            keys,
            work: Vec::new(),
        }
    }

    /// Makes the models train under a data-parallel `strategy`: every model starts from rank
    /// 0's variables (parameters and buffers, broadcast), and is hooked so that its gradients
    /// are averaged over the ranks during the backward pass where it can (parameters on one
    /// device: Gloo's for the CPU, NCCL's for this rank's GPU).
    pub fn join(&mut self, strategy: &crate::dist::Strategy) -> Result<()> {
        for model in &mut self.models {
            let variables: Vec<Tensor> = model
                .named_variables()
                .map(|(_, t)| t.shallow_clone())
                .collect();
            strategy.broadcast_from_rank_zero(&variables)?;
            let one_device = model
                .params
                .first()
                .is_some_and(|first| model.params.iter().all(|p| p.device() == first.device()));
            if one_device {
                model.overlap = strategy.hook(&model.params).map_err(Error::Run)?;
            }
        }
        Ok(())
    }

    /// Gives every rank rank 0's floating-point buffers (batch norm's running statistics,
    /// which each rank updated from its own samples), as DDP does before a forward, so that
    /// evaluation runs the same model on every rank. Nothing in a single process.
    pub fn sync_buffers(&mut self, strategy: &crate::dist::Strategy) -> Result<()> {
        if !strategy.is_data_parallel() {
            return Ok(());
        }
        let buffers: Vec<Tensor> = self
            .models
            .iter()
            .flat_map(|m| &m.buffers)
            .filter(|(_, t)| t.is_floating_point())
            .map(|(_, t)| t.shallow_clone())
            .collect();
        strategy.broadcast_from_rank_zero(&buffers)
    }

    /// A copy of every model's buffers (what a forward in training behaviour may change
    /// without an update: batch norm's running statistics), for [`Network::restore_buffers`].
    pub fn snapshot_buffers(&self) -> std::result::Result<Vec<Tensor>, String> {
        let _no_grad = tch::no_grad_guard();
        self.models
            .iter()
            .flat_map(|m| &m.buffers)
            .map(|(_, t)| t.f_detach_copy().map_err(crate::tch_message))
            .collect()
    }

    /// Puts back the buffers [`Network::snapshot_buffers`] copied.
    pub fn restore_buffers(&mut self, saved: &[Tensor]) -> std::result::Result<(), String> {
        let _no_grad = tch::no_grad_guard();
        let buffers = self.models.iter().flat_map(|m| &m.buffers);
        for ((_, buffer), copy) in buffers.zip(saved) {
            buffer
                .shallow_clone()
                .f_copy_(copy)
                .map_err(crate::tch_message)?;
        }
        Ok(())
    }

    /// Keys that are losses, as FastEstimator's `Network.get_loss_keys`: the loss key of every
    /// `UpdateOp` (inside meta ops too), whatever its mode, dataset or epochs.
    pub fn loss_keys(&self) -> Vec<KeyId> {
        let mut keys: Vec<KeyId> = self.ops.iter().flat_map(OpNode::loss_keys).collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Whether some op writes `key` in `mode`.
    pub fn writes_in(&self, key: KeyId, mode: fe_plugin_api::Mode) -> bool {
        self.ops
            .iter()
            .any(|op| op.outputs.contains(&key) && op.modes.contains(mode))
    }

    /// The loss keys some op writes in `mode`: what the essential traces read from that mode's
    /// batches. FastEstimator monitors every loss key and skips those absent from the batch,
    /// which logs the same values; declaring only these keeps the others out of the keys a
    /// mode's step must return.
    pub fn loss_keys_written_in(&self, mode: fe_plugin_api::Mode) -> Vec<KeyId> {
        let mut keys = self.loss_keys();
        keys.retain(|&k| self.writes_in(k, mode));
        keys
    }

    /// The loss keys of the `UpdateOp`s that train `model` (FastEstimator's `model.loss_name`),
    /// in the order the ops appear.
    pub fn model_loss_keys(&self, model: usize) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for op in &self.ops {
            for (updated, loss) in op.update_losses() {
                let name = self.keys.name(loss);
                if updated == model && !names.iter().any(|n| n == name) {
                    names.push(name.to_owned());
                }
            }
        }
        names
    }

    /// Puts each model's optimizer for `epoch` in force.
    pub fn enter_epoch(&mut self, epoch: u32) {
        for model in &mut self.models {
            model.enter_epoch(epoch);
        }
    }

    /// Runs one step of `plan` on `batch` in a process training alone; the plan's outputs are
    /// written back into the batch.
    pub fn run_step(
        &mut self,
        plan: &StepPlan,
        batch: &mut Batch,
        step: &StepContext<'_>,
    ) -> Result<()> {
        self.run_step_in(plan, batch, step, &crate::dist::Strategy::single())
    }

    /// [`Network::run_step`] under `strategy`, which averages the updates' gradients over the
    /// ranks of a data-parallel run.
    pub fn run_step_in(
        &mut self,
        plan: &StepPlan,
        batch: &mut Batch,
        step: &StepContext<'_>,
        strategy: &crate::dist::Strategy,
    ) -> Result<()> {
        let Network {
            ops,
            models,
            slicers,
            post,
            device,
            keys,
            work,
            ..
        } = self;
        let mut exec = Exec {
            ops,
            models,
            work,
            keys,
            device: *device,
            strategy,
        };
        if plan.slicers.is_empty() {
            exec.run_minibatch(plan, batch, step)?;
        } else {
            let mut active: Vec<&mut SlicerNode> = slicers
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| plan.slicers.contains(i))
                .map(|(_, s)| s)
                .collect();
            let mut minibatches =
                slicing::forward(&mut active, batch, keys).map_err(|e| step_error(e, step))?;
            for minibatch in &mut minibatches {
                exec.run_minibatch(plan, minibatch, step)?;
            }
            *batch = slicing::reverse(&mut active, &minibatches, batch, keys)
                .map_err(|e| step_error(e, step))?;
        }
        for &index in &plan.post {
            post[index]
                .run(batch, step, keys)
                .map_err(|error| step_error(error, step))?;
        }
        Ok(())
    }
}

/// The parts of the network one (mini)batch needs.
struct Exec<'a> {
    ops: &'a mut [OpNode],
    models: &'a mut [ModelSlot],
    work: &'a mut Vec<Option<Tensor>>,
    keys: &'a Keys,
    device: Device,
    strategy: &'a crate::dist::Strategy,
}

impl Exec<'_> {
    /// Moves the plan's device inputs of `batch` to the device, runs the ops, applies deferred
    /// updates, and brings the plan's outputs back into `batch`.
    fn run_minibatch(
        &mut self,
        plan: &StepPlan,
        batch: &mut Batch,
        step: &StepContext<'_>,
    ) -> Result<()> {
        let device = self.device;
        let mut work = std::mem::take(self.work);
        work.clear();
        work.resize_with(plan.width, || None);
        for &key in &plan.device_inputs {
            if let Some(tensor) = batch.get(key) {
                work[key.0 as usize] = Some(to_device(tensor, device)?);
            }
        }
        let mut result = self.run_ops(plan, &mut work, step);
        if result.is_ok() {
            let mut copied = false;
            for &key in &plan.outputs {
                if let Some(tensor) = work[key.0 as usize].take() {
                    let value = tensor.detach();
                    let value = if device == Device::Cpu {
                        value
                    } else {
                        copied = true;
                        to_device(&value, Device::Cpu)?
                    };
                    batch.set(key, value);
                }
            }
            if copied {
                result = wait_for_copies(device);
            }
        }
        work.clear();
        *self.work = work;
        result
    }

    fn run_ops(
        &mut self,
        plan: &StepPlan,
        work: &mut [Option<Tensor>],
        step: &StepContext<'_>,
    ) -> Result<()> {
        let _no_grad = (!plan.requires_grad).then(tch::no_grad_guard);
        let _autocast = if plan.autocast {
            Some(
                precision::Autocast::enable(self.device)
                    .map_err(|e| Error::Run(format!("cannot enable autocast: {e}")))?,
            )
        } else {
            None
        };
        let mut deferred: Vec<Deferred> = Vec::new();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(step.seed);
        let mut env = execute::StepEnv {
            models: self.models,
            keys: self.keys,
            strategy: self.strategy,
            step,
            deferred: &mut deferred,
            rng: &mut rng,
        };
        for (position, &index) in plan.ops.iter().enumerate() {
            let flags = Flags {
                retain_graph: plan.retain_graph[position],
                defer: plan.defer[position],
                sole_update: plan.sole_update[position],
            };
            execute::run_node(&mut self.ops[index], work, &mut env, flags)
                .map_err(|error| step_error(error, step))?;
        }
        execute::apply_deferred(self.models, deferred, self.strategy)
            .map_err(|error| step_error(error, step))
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

/// Waits until the device has finished everything queued so far, the device-to-host copies of
/// a step's outputs included. Those are asynchronous (into pinned memory), and traces, the loss
/// log and TerminateOnNaN read them on the host right after the step: without this wait they
/// could read memory the copy has not written yet. One wait per step covers every output.
fn wait_for_copies(device: Device) -> Result<()> {
    if let Device::Cuda(index) = device {
        std::panic::catch_unwind(|| tch::Cuda::synchronize(index as i64)).map_err(|payload| {
            Error::Run(format!(
                "cannot wait for {device:?}: {}",
                fe_plugin_api::panic_message(payload.as_ref())
            ))
        })?;
    }
    Ok(())
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
