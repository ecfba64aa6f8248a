//! The ops that need the host's models and optimizers: `ModelOp` and `UpdateOp` (seed 003).

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

/// Backpropagates a loss into a model and updates it.
pub struct UpdateOp {
    /// Index of the model in the network.
    pub model: usize,
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
    /// Its gradients.
    pub grads: Vec<Tensor>,
}

impl UpdateOp {
    /// Computes gradients of the (mean-reduced) loss and applies, accumulates or defers them.
    pub fn forward(
        &mut self,
        model: &mut ModelSlot,
        loss: &Tensor,
        retain_graph: bool,
        defer: bool,
        deferred: &mut Vec<Deferred>,
    ) -> Result<(), String> {
        let loss = if loss.numel() == 1 {
            loss.f_reshape([]).map_err(first_line)?
        } else {
            loss.f_mean(loss.kind()).map_err(first_line)?
        };
        if !loss.requires_grad() {
            return Err(format!(
                "the loss does not depend on any trainable parameter of model `{}` (is it computed from the model's output?)",
                model.name
            ));
        }
        let grads = gradients(&loss, model, retain_graph)?;
        let grads = if self.merge_grad > 1 {
            match self.accumulate(grads)? {
                Some(average) => average,
                None => return Ok(()),
            }
        } else {
            grads
        };
        if defer {
            deferred.push(Deferred {
                model: self.model,
                grads,
            });
            Ok(())
        } else {
            model.apply(&grads)
        }
    }

    /// Adds `grads` to the running sum; every `merge_grad` calls returns the average and clears
    /// the sum.
    fn accumulate(&mut self, grads: Vec<Tensor>) -> Result<Option<Vec<Tensor>>, String> {
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
                .map_err(first_line)?;
        }
        for (sum, grad) in self.grad_sum.iter_mut().zip(&grads) {
            if grad.defined() && sum.defined() {
                let _ = sum.f_add_(grad).map_err(first_line)?;
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
            .map_err(first_line)?;
        for sum in &mut self.grad_sum {
            if sum.defined() {
                let _ = sum.f_zero_().map_err(first_line)?;
            }
        }
        Ok(Some(average))
    }
}

fn gradients(loss: &Tensor, model: &ModelSlot, retain_graph: bool) -> Result<Vec<Tensor>, String> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Tensor::run_backward(&[loss], &model.params, retain_graph, false)
    }));
    outcome.map_err(|payload| {
        let message = fe_plugin_api::panic_message(payload.as_ref());
        if message.starts_with("one of the variables needed for gradient computation has been modified by an inplace operation") {
            format!(
                "when computing gradients for `{}`, some variables it relied on during the forward pass had been \
                 updated; consider setting defer = true in earlier UpdateOps of models that interact with this one",
                model.name
            )
        } else {
            message
        }
    })
}

fn first_line(error: tch::TchError) -> String {
    crate::tch_message(error)
}
