//! The ops that need the host's models and optimizers: `ModelOp`, `UpdateOp` (seed 003) and
//! `GradientOp`.

use serde::Deserialize;
use tch::Tensor;

use super::model::ModelSlot;

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
    /// Instead of a loss: the key holding the model's gradients, as written by a `GradientOp`
    /// with `model = ...` (all trainable parameters, flattened and concatenated).
    #[serde(default)]
    pub gradients: Option<String>,
    /// Accumulate gradients over this many calls and apply their average.
    #[serde(default = "one")]
    pub merge_grad: u32,
    /// Apply the update after every op of the step has run.
    #[serde(default)]
    pub defer: bool,
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
    /// Accumulation count.
    pub merge_grad: u32,
    /// Manifest value of `defer` (the network may defer trailing updates regardless).
    pub defer: bool,
    /// Calls so far (for `merge_grad`).
    pub calls: u64,
    /// Accumulated gradients (for `merge_grad`).
    pub grad_sum: Vec<Tensor>,
}

/// An update waiting for the end of the step.
pub struct Deferred {
    /// The model.
    pub model: usize,
    /// Its gradients (already unscaled).
    pub grads: Vec<Tensor>,
    /// The gradients overflowed (mixed precision): skip the step, back the scale off.
    pub overflow: bool,
}

impl UpdateOp {
    /// Applies, accumulates or defers one update from `input` (a loss, or flat gradients).
    pub fn forward(
        &mut self,
        model: &mut ModelSlot,
        input: &Tensor,
        retain_graph: bool,
        defer: bool,
        deferred: &mut Vec<Deferred>,
    ) -> Result<(), String> {
        let (grads, overflow) = if self.gradients_input {
            (model.split_flat_gradients(input)?, false)
        } else {
            loss_gradients(model, input, retain_graph)?
        };
        let (grads, overflow) = if self.merge_grad > 1 {
            match self.accumulate(grads, overflow)? {
                Some(average) => (average, false),
                None => return Ok(()),
            }
        } else {
            (grads, overflow)
        };
        if defer {
            deferred.push(Deferred {
                model: self.model,
                grads,
                overflow,
            });
            Ok(())
        } else {
            model.apply(&grads, overflow)
        }
    }

    /// Adds `grads` to the running sum; every `merge_grad` calls returns the average and clears
    /// the sum. A call whose gradients overflowed (mixed precision) adds nothing.
    fn accumulate(
        &mut self,
        grads: Vec<Tensor>,
        overflow: bool,
    ) -> Result<Option<Vec<Tensor>>, String> {
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
        if !overflow {
            for (sum, grad) in self.grad_sum.iter_mut().zip(&grads) {
                if grad.defined() && sum.defined() {
                    let _ = sum.f_add_(grad).map_err(crate::tch_message)?;
                }
            }
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
        Ok(Some(average))
    }
}

/// Gradients of the mean of `loss` with respect to the model's trainable parameters, scaled and
/// unscaled around the backward pass when the model uses a gradient scaler.
fn loss_gradients(
    model: &ModelSlot,
    loss: &Tensor,
    retain_graph: bool,
) -> Result<(Vec<Tensor>, bool), String> {
    let loss = if loss.numel() == 1 {
        loss.f_reshape([]).map_err(crate::tch_message)?
    } else {
        loss.f_mean(loss.kind()).map_err(crate::tch_message)?
    };
    if !loss.requires_grad() {
        return Err(format!(
            "the loss does not depend on any trainable parameter of model `{}` (is it computed from the model's output?)",
            model.name
        ));
    }
    let scaled = match &model.scaler {
        Some(scaler) => scaler.scale_loss(&loss).map_err(crate::tch_message)?,
        None => loss,
    };
    let mut grads = gradients(&scaled, &model.params, retain_graph, &model.name)?;
    let overflow = match &model.scaler {
        Some(scaler) => scaler.unscale(&mut grads).map_err(crate::tch_message)?,
        None => false,
    };
    Ok((grads, overflow))
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
    /// Differentiate with respect to this model's trainable parameters: one output, all
    /// gradients flattened and concatenated (what `UpdateOp`'s `gradients` takes). Without it,
    /// the op differentiates with respect to its `inputs`, one output per input.
    #[serde(default)]
    pub model: Option<String>,
}

/// Gradients of a key with respect to a model's weights or to other keys.
pub struct GradientOp {
    /// With respect to this model's parameters, if set.
    pub model: Option<usize>,
}

impl GradientOp {
    /// Runs the op: `inputs[0]` is the target, the rest the sources (none for a model).
    pub fn forward(
        &self,
        models: &[ModelSlot],
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
