//! Models: the plugin object plus what the host owns for it (parameters, optimizer, scaler).

use tch::{Device, Tensor};

use super::precision::GradScaler;
use crate::optim::{Clip, Optimizer};
use crate::plugins::handles::ModelHandle;
use crate::schedule::{InForce, LrSchedule};

/// A model of the run.
pub struct ModelSlot {
    /// Its unique name.
    pub name: String,
    /// The architecture's name, for messages.
    pub architecture: String,
    /// The plugin object.
    pub handle: ModelHandle,
    /// Trainable parameters (sorted by name), sharing storage with the plugin's.
    pub params: Vec<Tensor>,
    /// Names of `params`.
    pub param_names: Vec<String>,
    /// Everything else the model holds (buffers, frozen parameters), by name.
    pub buffers: Vec<(String, Tensor)>,
    /// Names under which the model holds a variable a second time (tied weights: a
    /// TorchScript module whose `out.weight` is its `inp.weight`), with that variable. They are
    /// saved and loaded under every name, as PyTorch's `state_dict` does, but the optimizer,
    /// the gradient all-reduce and the buffer broadcast see each tensor once — as PyTorch's
    /// `parameters()` does — or a tied weight would be stepped twice per update.
    pub aliases: Vec<(String, Tensor)>,
    /// The optimizers it trains with, each in force in its own epochs (one, unless the
    /// manifest schedules them). Each keeps its own state across the epochs it is not used.
    pub optimizers: Vec<OptimizerSlot>,
    /// Index into `optimizers` of the one in force this epoch.
    pub current_optimizer: Option<usize>,
    /// `false` when the manifest froze it.
    pub trainable: bool,
    /// Runs under autocast.
    pub mixed_precision: bool,
    /// Loss scaling for float16 mixed precision (CUDA); `None` otherwise.
    pub scaler: Option<GradScaler>,
    /// For a TorchScript architecture: its file and `forward` signature.
    pub torchscript: Option<TorchScriptSource>,
    /// In a data-parallel run: its parameters hooked so that an update's gradients are
    /// averaged while its backward pass runs (see [`crate::dist::Overlap`]).
    pub overlap: Option<crate::dist::Overlap>,
}

/// Where a TorchScript model came from and what its `forward` takes.
#[derive(Debug, Clone)]
pub struct TorchScriptSource {
    /// The TorchScript file, resolved against the manifest's directory.
    pub file: std::path::PathBuf,
    /// The signature of `forward`.
    pub signature: super::torchscript::Signature,
    /// The dict entries taken as outputs, when `forward` returns a dict.
    pub outputs: Option<Vec<String>>,
    /// sha256 of the file as loaded: checkpoints keep it, so a resume with another
    /// architecture under the same name is refused.
    pub sha256: String,
}

/// One optimizer of a model, and when it is in force.
pub struct OptimizerSlot {
    /// The optimizer with its state.
    pub optimizer: Box<dyn Optimizer>,
    /// The schedule its learning rate follows, if `lr` was given as one.
    pub lr_schedule: Option<LrSchedule>,
    /// The epochs it is in force.
    pub epochs: InForce,
    /// How the manifest describes it (`sgd { lr = 0.1 }`), for logs.
    pub summary: String,
    /// Where the manifest writes it (`models[0].optimizer`, `models[0].optimizer.epoch.3`).
    pub path: crate::manifest::KeyPath,
}

/// What a model is made of when it is created.
pub struct ModelParts {
    /// Unique name.
    pub name: String,
    /// Architecture name.
    pub architecture: String,
    /// The plugin object.
    pub handle: ModelHandle,
    /// Its variables by name.
    pub variables: Vec<(String, Tensor)>,
    /// Its optimizers.
    pub optimizers: Vec<OptimizerSlot>,
    /// Trainable.
    pub trainable: bool,
    /// Mixed precision.
    pub mixed_precision: bool,
    /// For a TorchScript architecture: its file and `forward` signature.
    pub torchscript: Option<TorchScriptSource>,
}

/// Whether `a` and `b` are one variable under two names: the same memory seen the same way.
fn same_variable(a: &Tensor, b: &Tensor) -> bool {
    a.numel() > 0
        && a.data_ptr() == b.data_ptr()
        && a.device() == b.device()
        && a.kind() == b.kind()
        && a.size() == b.size()
        && a.stride() == b.stride()
}

impl ModelSlot {
    /// Wraps a freshly created model: splits its variables into trainable parameters and the
    /// rest, freezes them when not trainable, and moves everything to `device`.
    pub fn new(parts: ModelParts, device: Device) -> Result<Self, tch::TchError> {
        let mut params = Vec::new();
        let mut param_names = Vec::new();
        let mut buffers = Vec::new();
        let mut aliases = Vec::new();
        for (var_name, mut tensor) in parts.variables {
            if let Some(original) = params
                .iter()
                .chain(buffers.iter().map(|(_, t)| t))
                .find(|seen| same_variable(seen, &tensor))
            {
                aliases.push((var_name, original.shallow_clone()));
                continue;
            }
            if tensor.device() != device {
                // set_data keeps the tensor object, so the plugin's copy moves too.
                let _guard = tch::no_grad_guard();
                let moved = tensor.f_to_device(device)?;
                tensor.f_set_data(&moved)?;
            }
            if tensor.requires_grad() && parts.trainable {
                params.push(tensor);
                param_names.push(var_name);
            } else {
                if tensor.requires_grad() {
                    let _ = tensor.f_requires_grad_(false)?;
                }
                buffers.push((var_name, tensor));
            }
        }
        let current_optimizer = parts.optimizers.iter().position(|o| o.epochs.at(1));
        Ok(Self {
            name: parts.name,
            architecture: parts.architecture,
            handle: parts.handle,
            params,
            param_names,
            buffers,
            aliases,
            optimizers: parts.optimizers,
            current_optimizer,
            trainable: parts.trainable,
            mixed_precision: parts.mixed_precision,
            scaler: (parts.mixed_precision && device.is_cuda()).then(GradScaler::default),
            torchscript: parts.torchscript,
            overlap: None,
        })
    }

    /// The optimizer in force.
    pub fn optimizer(&self) -> Option<&dyn Optimizer> {
        self.current_optimizer
            .and_then(|i| self.optimizers.get(i))
            .map(|slot| slot.optimizer.as_ref())
    }

    /// The optimizer in force, mutably.
    pub fn optimizer_mut(&mut self) -> Option<&mut (dyn Optimizer + 'static)> {
        self.current_optimizer
            .and_then(|i| self.optimizers.get_mut(i))
            .map(|slot| slot.optimizer.as_mut())
    }

    /// The optimizer slot in force.
    pub fn current_slot(&self) -> Option<&OptimizerSlot> {
        self.current_optimizer.and_then(|i| self.optimizers.get(i))
    }

    /// The index of the optimizer in force in `epoch`.
    pub fn optimizer_at(&self, epoch: u32) -> Option<usize> {
        self.optimizers.iter().position(|o| o.epochs.at(epoch))
    }

    /// Puts the optimizer of `epoch` in force (a model with scheduled optimizers switches;
    /// each optimizer keeps its own state, so one that returns resumes where it was).
    pub fn enter_epoch(&mut self, epoch: u32) {
        self.current_optimizer = self.optimizer_at(epoch);
    }

    /// Every variable by name: parameters then buffers.
    pub fn named_variables(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.param_names
            .iter()
            .map(String::as_str)
            .zip(&self.params)
            .chain(self.buffers.iter().map(|(n, t)| (n.as_str(), t)))
            .chain(self.aliases.iter().map(|(n, t)| (n.as_str(), t)))
    }

    /// Steps the optimizer with `grads`, or skips the step when `found_inf` (mixed precision)
    /// says they overflowed; then updates the loss scale. In a data-parallel run the gradients
    /// are first averaged over the ranks and an overflow on any rank skips the step on all, so
    /// the replicas stay equal. `clip` applies to the gradients the optimizer steps with:
    /// unscaled and averaged, as Lightning clips after `unscale_` and DDP's all-reduce.
    pub fn apply(
        &mut self,
        grads: &[Tensor],
        found_inf: Option<&Tensor>,
        averaged_already: bool,
        clip: Option<Clip>,
        strategy: &crate::dist::Strategy,
    ) -> Result<(), String> {
        let mut clip = clip;
        let mut grads = grads;
        let clipped_first;
        if let (false, Some(flag)) = (strategy.is_data_parallel(), found_inf) {
            // The device decides the skip here, so clipping cannot wait for the flag; the
            // gradients of a skipped step are discarded, clipped or not.
            if let Some(c) = clip.take() {
                clipped_first = c.apply(grads)?;
                grads = &clipped_first;
            }
            if self.step_deciding_on_device(grads, flag)? {
                return Ok(());
            }
        }
        let mut overflow = match found_inf {
            Some(flag) => super::precision::overflowed(flag)?,
            None => false,
        };
        let averaged;
        // Alone, the average of one process's gradients is those gradients: no copy per step.
        let grads = if averaged_already || !strategy.is_data_parallel() {
            grads
        } else {
            let update = strategy.average_gradients(&self.params, grads, overflow)?;
            overflow = update.overflow;
            averaged = update.grads;
            &averaged[..]
        };
        let clipped;
        let grads = match clip {
            Some(c) if !overflow => {
                clipped = c.apply(grads)?;
                &clipped[..]
            }
            _ => grads,
        };
        let name = &self.name;
        let Some(optimizer) = self
            .current_optimizer
            .and_then(|i| self.optimizers.get_mut(i))
            .map(|slot| &mut slot.optimizer)
        else {
            return Err(format!(
                "model `{name}` has no optimizer in force to apply an update with"
            ));
        };
        if !overflow {
            optimizer
                .step(&self.params, grads)
                .map_err(crate::tch_message)?;
        }
        if let Some(scaler) = self.scaler.as_mut() {
            scaler.update(overflow)?;
        }
        Ok(())
    }

    /// Mixed precision in one process with an optimizer that can skip on the device (fused
    /// Adam/AdamW, as PyTorch's fused optimizers under GradScaler): the step, its skipping and
    /// the scale update all happen there, and the host never waits for the overflow flag.
    /// `false` when the optimizer in force cannot; [`ModelSlot::apply`] then reads the flag.
    fn step_deciding_on_device(
        &mut self,
        grads: &[Tensor],
        found_inf: &Tensor,
    ) -> Result<bool, String> {
        let (Some(scaler), Some(slot)) = (
            self.scaler.as_mut(),
            self.current_optimizer
                .and_then(|i| self.optimizers.get_mut(i)),
        ) else {
            return Ok(false);
        };
        // Summed over `merge_grad` micro-steps the flag can exceed 1; the kernels skip at 1.
        let flag = found_inf.f_clamp_max(1.0).map_err(crate::tch_message)?;
        if !slot
            .optimizer
            .step_unless_overflow(&self.params, grads, &flag)
            .map_err(crate::tch_message)?
        {
            return Ok(false);
        }
        scaler.update_on_device(&flag)?;
        Ok(true)
    }

    /// Gradients of every trainable parameter flattened into one vector (undefined → zeros).
    pub fn flatten_gradients(&self, grads: &[Tensor]) -> Result<Tensor, String> {
        let pieces = grads
            .iter()
            .zip(&self.params)
            .map(|(g, p)| {
                if g.defined() {
                    g.f_flatten(0, -1)
                } else {
                    p.f_zeros_like()?.f_flatten(0, -1)
                }
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(crate::tch_message)?;
        Tensor::f_cat(&pieces, 0).map_err(crate::tch_message)
    }

    /// The inverse of [`ModelSlot::flatten_gradients`].
    pub fn split_flat_gradients(&self, flat: &Tensor) -> Result<Vec<Tensor>, String> {
        let total: i64 = self.params.iter().map(|p| p.numel() as i64).sum();
        if flat.numel() as i64 != total {
            return Err(format!(
                "gradients for `{}` must hold {total} values (its trainable parameters, flattened), got shape {:?}",
                self.name,
                flat.size()
            ));
        }
        let flat = flat.f_flatten(0, -1).map_err(crate::tch_message)?;
        let mut offset = 0;
        self.params
            .iter()
            .map(|p| {
                let n = p.numel() as i64;
                let piece = flat.f_narrow(0, offset, n)?.f_reshape(p.size());
                offset += n;
                piece
            })
            .collect::<Result<_, _>>()
            .map_err(crate::tch_message)
    }
}
