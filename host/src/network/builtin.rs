//! The ops that need the host's models and optimizers: `ModelOp`, `UpdateOp` (as FastEstimator's `fe.op.tensorop.UpdateOp` documents it) and
//! `GradientOp`.

use serde::Deserialize;
use tch::Tensor;

use super::model::ModelSlot;
use crate::optim::Clip;

/// `[[network.ops]] op = "ModelOp"`
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ModelOpConfig {
    /// The model to run (`[[models]] name`).
    pub model: String,
    /// Intermediate layers to expose, written after the model's outputs in `outputs`.
    #[serde(default)]
    pub intermediate_layers: Vec<String>,
    /// `false` runs the model in inference behaviour (dropout off, batch-norm statistics
    /// frozen) even while training.
    #[serde(default = "yes")]
    pub trainable: bool,
}

fn yes() -> bool {
    true
}

/// Runs a model.
pub struct ModelOp {
    /// Index of the model in the network.
    pub model: usize,
    /// Intermediate layers requested.
    pub layers: Vec<String>,
    /// Whether training behaviour is used in train mode.
    pub trainable: bool,
}

/// `[[network.ops]] op = "UpdateOp"`
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct UpdateOpConfig {
    /// The model to update.
    pub model: String,
    /// The key holding the loss (mean-reduced before differentiating).
    #[serde(default)]
    pub loss: Option<String>,
    /// The model's gradients to apply instead of differentiating `loss` (which is then only
    /// the model's loss for logging): one key per trainable parameter, in the model's parameter
    /// order, each shaped like its parameter (what a `GradientOp` with `model` and as many
    /// outputs writes), or one key holding them all flattened and concatenated.
    #[serde(default)]
    pub gradients: Option<GradientKeys>,
    /// Accumulate gradients over this many calls and apply their average.
    #[serde(default = "one")]
    pub merge_grad: u32,
    /// Apply the update after every op of the step has run.
    #[serde(default)]
    pub defer: bool,
    /// Clip the gradients' total norm to this (`torch.nn.utils.clip_grad_norm_`).
    #[serde(default)]
    pub clip_norm: Option<f64>,
    /// The p of `clip_norm`'s p-norm (default 2; `inf` for the largest magnitude).
    #[serde(default)]
    pub norm_type: Option<f64>,
    /// Clamp every gradient element into `[-clip_value, clip_value]` (`clip_grad_value_`).
    #[serde(default)]
    pub clip_value: Option<f64>,
}

/// `gradients = "g"` or `gradients = ["g_bias", "g_weight"]`.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum GradientKeys {
    /// One key: every gradient flattened and concatenated.
    Flat(String),
    /// One key per trainable parameter.
    PerParameter(Vec<String>),
}

fn one() -> u32 {
    1
}

/// Backpropagates a loss into a model (or takes given gradients) and updates it.
pub struct UpdateOp {
    /// Index of the model in the network.
    pub model: usize,
    /// The input is gradients rather than a loss.
    pub gradients_input: bool,
    /// The model's loss key (what it trains on, or with given gradients what it logs).
    pub loss: crate::batch::KeyId,
    /// The name of `loss`, for messages.
    pub loss_name: String,
    /// The keys of given per-parameter gradients, for messages.
    pub gradient_keys: Vec<String>,
    /// Accumulation count.
    pub merge_grad: u32,
    /// Manifest value of `defer` (the network may defer trailing updates regardless).
    pub defer: bool,
    /// Gradient clipping, applied to what the optimizer steps with.
    pub clip: Option<Clip>,
    /// Calls so far (for `merge_grad`).
    pub calls: u64,
    /// Accumulated gradients (for `merge_grad`).
    pub grad_sum: Vec<Tensor>,
    /// Overflow flags of the micro-steps accumulated so far (mixed precision, `merge_grad`),
    /// summed on the device: one overflowing micro-step skips the merged step.
    pub found_inf_sum: Option<Tensor>,
}

/// Gradients with their mixed-precision overflow flag (see [`Deferred::found_inf`]).
type Flagged = (Vec<Tensor>, Option<Tensor>);

/// An update waiting to be applied: at the end of the step (deferred), or now.
pub struct Deferred {
    /// The model.
    pub model: usize,
    /// Its gradients (already unscaled).
    pub grads: Vec<Tensor>,
    /// Mixed precision: a device flag, non-zero when the gradients overflowed (skip the step,
    /// back the scale off). Read once, when the update is applied.
    pub found_inf: Option<Tensor>,
    /// The gradients are already averaged over the ranks (during the backward pass).
    pub averaged: bool,
    /// Clipping of the update's op (the same for every update of a model, checked at build).
    pub clip: Option<Clip>,
}

impl Deferred {
    /// Adds `other`'s gradients (of the same model) to these, as FastEstimator accumulates
    /// every UpdateOp's gradients into `.grad` before the model's single step.
    fn absorb(&mut self, other: Deferred) -> Result<(), String> {
        if self.averaged != other.averaged {
            // Cannot happen: only a model's sole update is averaged during backward.
            return Err(format!(
                "internal error: an update averaged over the ranks joined with one that is not (model {})",
                self.model
            ));
        }
        if self.clip != other.clip {
            // Cannot happen either: the network refuses a model whose updates clip differently.
            return Err(format!(
                "internal error: updates of model {} that clip differently joined into one step",
                self.model
            ));
        }
        let _guard = tch::no_grad_guard();
        for (mine, theirs) in self.grads.iter_mut().zip(other.grads) {
            if !theirs.defined() {
                continue;
            }
            if mine.defined() {
                *mine = mine.f_add(&theirs).map_err(crate::tch_message)?;
            } else {
                *mine = theirs;
            }
        }
        self.found_inf = match (self.found_inf.take(), other.found_inf) {
            (Some(a), Some(b)) => Some(a.f_add(&b).map_err(crate::tch_message)?),
            (a, b) => a.or(b),
        };
        Ok(())
    }
}

impl UpdateOp {
    /// Applies, accumulates or defers one update from `inputs` (a loss, or gradients).
    /// Deferred updates of one model are summed into one step at the end of the step; a
    /// non-deferred update of a model with a deferred one pending takes it along (its gradients
    /// were already in `.grad` in FastEstimator, and the step clears them).
    pub fn forward(
        &mut self,
        model: &mut ModelSlot,
        inputs: &[&Tensor],
        flags: super::execute::Flags,
        deferred: &mut Vec<Deferred>,
        strategy: &crate::dist::Strategy,
    ) -> Result<(), String> {
        let super::execute::Flags {
            retain_graph,
            defer,
            sole_update,
        } = flags;
        let pending = deferred.iter().position(|d| d.model == self.model);
        // Gradients that nothing joins before the update (no merging, no deferred update of
        // the model pending, and, when deferred, no later update of the model in the step) can
        // be averaged over the ranks during their own backward pass.
        let overlap = self.merge_grad <= 1 && pending.is_none() && (!defer || sole_update);
        let mut averaged = false;
        let (grads, found_inf) = match (self.gradients_input, inputs) {
            (_, []) => return Err("no input given".into()),
            (true, [flat]) => (weighed(strategy, model.split_flat_gradients(flat)?)?, None),
            (true, many) => (weighed(strategy, self.per_parameter(model, many)?)?, None),
            (false, [loss, ..]) => {
                let loss = (self.loss_name.as_str(), *loss);
                let computed = loss_gradients(model, loss, retain_graph, overlap, strategy)?;
                averaged = computed.averaged;
                (computed.grads, computed.found_inf)
            }
        };
        let (grads, found_inf) = if self.merge_grad > 1 {
            match self.accumulate(grads, found_inf)? {
                Some(average) => average,
                None => return Ok(()),
            }
        } else {
            (grads, found_inf)
        };
        let mut update = Deferred {
            model: self.model,
            grads,
            found_inf,
            averaged,
            clip: self.clip,
        };
        match (defer, pending) {
            (true, Some(index)) => deferred[index].absorb(update),
            (true, None) => {
                deferred.push(update);
                Ok(())
            }
            (false, pending) => {
                if let Some(index) = pending {
                    update.absorb(deferred.remove(index))?;
                }
                model.apply(
                    &update.grads,
                    update.found_inf.as_ref(),
                    averaged,
                    self.clip,
                    strategy,
                )
            }
        }
    }

    /// Given per-parameter gradients, checked against the parameters' shapes.
    fn per_parameter(&self, model: &ModelSlot, grads: &[&Tensor]) -> Result<Vec<Tensor>, String> {
        if grads.len() != model.params.len() {
            return Err(format!(
                "{} gradients for the {} trainable parameters of model `{}`",
                grads.len(),
                model.params.len(),
                model.name
            ));
        }
        let names = self.gradient_keys.iter().map(String::as_str);
        let params = model.params.iter().zip(&model.param_names);
        grads
            .iter()
            .zip(params)
            .zip(names.chain(std::iter::repeat("?")))
            .map(|((grad, (param, param_name)), key)| {
                if grad.size() != param.size() {
                    return Err(format!(
                        "gradient `{key}` has shape {:?}, but parameter `{param_name}` of model `{}` has {:?}",
                        grad.size(),
                        model.name,
                        param.size()
                    ));
                }
                Ok(grad.shallow_clone())
            })
            .collect()
    }

    /// Adds `grads` to the running sum; every `merge_grad` calls returns the average and clears
    /// the sum, with the micro-steps' overflow flags combined (PyTorch's GradScaler skips the
    /// merged step when any accumulated gradient is infinite).
    fn accumulate(
        &mut self,
        grads: Vec<Tensor>,
        found_inf: Option<Tensor>,
    ) -> Result<Option<Flagged>, String> {
        let _guard = tch::no_grad_guard();
        if self.grad_sum.is_empty() {
            self.grad_sum = grads
                .iter()
                .map(|g| {
                    if g.defined() {
                        g.f_zeros_like()
                    } else {
                        Ok(Tensor::new())
                    }
                })
                .collect::<Result<_, _>>()
                .map_err(crate::tch_message)?;
        }
        for (sum, grad) in self.grad_sum.iter_mut().zip(&grads) {
            if grad.defined() && sum.defined() {
                let _ = sum.f_add_(grad).map_err(crate::tch_message)?;
            }
        }
        if let Some(flag) = found_inf {
            self.found_inf_sum = Some(match self.found_inf_sum.take() {
                Some(sum) => sum.f_add(&flag).map_err(crate::tch_message)?,
                None => flag,
            });
        }
        self.calls += 1;
        if self.calls % self.merge_grad as u64 != 0 {
            return Ok(None);
        }
        let average = self
            .grad_sum
            .iter()
            .map(|s| {
                if s.defined() {
                    s.f_div_scalar(self.merge_grad as f64)
                } else {
                    Ok(Tensor::new())
                }
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(crate::tch_message)?;
        for sum in &mut self.grad_sum {
            if sum.defined() {
                let _ = sum.f_zero_().map_err(crate::tch_message)?;
            }
        }
        Ok(Some((average, self.found_inf_sum.take())))
    }
}

/// Gradients an update was given (not computed from a loss), weighed by this rank's share of
/// the step's samples, as [`loss_gradients`] weighs a loss (see `Strategy::contribution`).
fn weighed(strategy: &crate::dist::Strategy, grads: Vec<Tensor>) -> Result<Vec<Tensor>, String> {
    match strategy.contribution() {
        weight if weight != 1.0 => grads
            .iter()
            .map(|g| {
                if g.defined() {
                    g.f_mul_scalar(weight).map_err(crate::tch_message)
                } else {
                    Ok(Tensor::new())
                }
            })
            .collect(),
        _ => Ok(grads),
    }
}

/// What [`loss_gradients`] computed.
struct LossGradients {
    grads: Vec<Tensor>,
    /// Mixed precision: the overflow flag.
    found_inf: Option<Tensor>,
    /// Whether `grads` are already the average over the ranks of a data-parallel run.
    averaged: bool,
}

/// Gradients of the mean of `loss` with respect to the model's trainable parameters, scaled and
/// unscaled around the backward pass when the model uses a gradient scaler. In a data-parallel
/// run and when `overlap` allows, averaged over the ranks during the backward pass; the scaled
/// gradients are averaged, as DDP under PyTorch's GradScaler does, so every rank then finds
/// the same overflow.
fn loss_gradients(
    model: &mut ModelSlot,
    (loss_key, loss): (&str, &Tensor),
    retain_graph: bool,
    overlap: bool,
    strategy: &crate::dist::Strategy,
) -> Result<LossGradients, String> {
    let loss = if loss.numel() == 1 {
        loss.f_reshape([]).map_err(crate::tch_message)?
    } else {
        loss.f_mean(loss.kind()).map_err(crate::tch_message)?
    };
    if !loss.requires_grad() {
        return Err(unreached(&format!("the loss `{loss_key}`"), &model.name));
    }
    // Data parallel with ranks holding different numbers of samples this step (the end of
    // an epoch that filters shortened): each rank's mean counts by its samples.
    let loss = match strategy.contribution() {
        weight if weight != 1.0 => loss.f_mul_scalar(weight).map_err(crate::tch_message)?,
        _ => loss,
    };
    let scaled = match &model.scaler {
        Some(scaler) => scaler.scale_loss(&loss).map_err(crate::tch_message)?,
        None => loss,
    };
    // Checked on this rank's own gradients, before a data-parallel all-reduce fills the
    // unreached ones with zeros; every rank builds the same graph, so every rank refuses.
    let backward = || {
        let grads = gradients(&scaled, &model.params, retain_graph, &model.name)?;
        if reached_none(&grads) {
            return Err(unreached(&format!("the loss `{loss_key}`"), &model.name));
        }
        Ok(grads)
    };
    // Only a data-parallel strategy hooks a model (see `Network::join`).
    let (mut grads, averaged) = match (overlap, &mut model.overlap) {
        (true, Some(hooked)) => match strategy.average_during_backward(hooked, backward) {
            Some(averaged) => (averaged?, true),
            None => return Err("a model hooked for averaging, but no process group".into()),
        },
        _ => (backward()?, false),
    };
    let found_inf = match &model.scaler {
        Some(scaler) => Some(scaler.unscale(&mut grads)?),
        None => None,
    };
    Ok(LossGradients {
        grads,
        found_inf,
        averaged,
    })
}

/// Whether a backward pass reached none of a model's trainable parameters: the target was
/// computed from other models or constants only (PyTorch: "One of the differentiated Tensors
/// appears to not have been used in the graph"). An update would then train nothing and the
/// run would go on with the weights it started with. A definedness test per parameter, no
/// device work, so it runs on every step. A model with no trainable parameter at all is left
/// alone: nothing could reach it.
fn reached_none(grads: &[Tensor]) -> bool {
    !grads.is_empty() && grads.iter().all(|g| !g.defined())
}

/// The error for a target (`the loss `ce``, `finals `x``) that reaches no parameter of `model`.
fn unreached(target: &str, model: &str) -> String {
    format!(
        "{target} does not depend on any trainable parameter of model `{model}`: none would receive a gradient \
         (is it computed from the model's output?)"
    )
}

/// `d sum(target) / d sources`, keeping the graph when `retain_graph`. Undefined gradients mean
/// a source the target does not depend on.
pub fn gradients(
    target: &Tensor,
    sources: &[Tensor],
    retain_graph: bool,
    model: &str,
) -> Result<Vec<Tensor>, String> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Tensor::run_backward(&[target], sources, retain_graph, false)
    }));
    outcome.map_err(|payload| {
        let message = fe_plugin_api::panic_message(payload.as_ref());
        if message.starts_with("one of the variables needed for gradient computation has been modified by an inplace operation") {
            format!(
                "when computing gradients for `{model}`, some variables it relied on during the forward pass had been \
                 updated; consider setting defer = true in earlier UpdateOps of models that interact with this one"
            )
        } else if message.contains("does not require grad") || message.contains("does not use set_requires_grad") {
            format!("cannot differentiate: {message} (is the target computed with gradients enabled, from the sources?)")
        } else {
            message
        }
    })
}

/// `[[network.ops]] op = "GradientOp"`
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct GradientOpConfig {
    /// The key to differentiate (its sum, as FastEstimator does).
    pub finals: String,
    /// Differentiate with respect to this model's trainable parameters: one output per
    /// parameter (as FastEstimator's GradientOp gives), or a single output holding them all
    /// flattened and concatenated; either is what `UpdateOp`'s `gradients` takes. Without it,
    /// the op differentiates with respect to its `inputs`, one output per input.
    #[serde(default)]
    pub model: Option<String>,
}

/// Gradients of a key with respect to a model's weights or to other keys.
pub struct GradientOp {
    /// With respect to this model's parameters, if set.
    pub model: Option<usize>,
    /// With a model: one output per trainable parameter rather than one flattened vector.
    pub per_parameter: bool,
    /// The differentiated key, for messages.
    pub finals: crate::batch::KeyId,
}

impl GradientOp {
    /// Runs the op: `inputs[0]` is the target, the rest the sources (none for a model).
    pub fn forward(
        &self,
        models: &[ModelSlot],
        finals: &str,
        inputs: &[&Tensor],
        retain_graph: bool,
    ) -> Result<Vec<Tensor>, String> {
        let Some((target, sources)) = inputs.split_first() else {
            return Err("GradientOp has no target".into());
        };
        match self.model {
            Some(index) => {
                let model = &models[index];
                let grads = gradients(target, &model.params, retain_graph, &model.name)?;
                // Zeros for every parameter would look like a converged model, not a mistake.
                if reached_none(&grads) {
                    return Err(unreached(&format!("finals `{finals}`"), &model.name));
                }
                if self.per_parameter {
                    return grads
                        .into_iter()
                        .zip(&model.params)
                        .map(|(g, p)| {
                            if g.defined() {
                                Ok(g)
                            } else {
                                p.f_zeros_like().map_err(crate::tch_message)
                            }
                        })
                        .collect();
                }
                Ok(vec![model.flatten_gradients(&grads)?])
            }
            None => {
                let owned: Vec<Tensor> = sources.iter().map(|t| t.shallow_clone()).collect();
                let grads = gradients(target, &owned, retain_graph, "inputs")?;
                grads
                    .into_iter()
                    .zip(&owned)
                    .map(|(g, s)| {
                        if g.defined() {
                            Ok(g)
                        } else {
                            s.f_zeros_like().map_err(crate::tch_message)
                        }
                    })
                    .collect()
            }
        }
    }
}
