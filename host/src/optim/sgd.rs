//! Stochastic gradient descent with momentum, dampening, Nesterov and weight decay.

use serde::Deserialize;
use tch::Tensor;

use super::{no_grad, ops, saved_state, Optimizer, Parameters, PerParameter};

/// `optimizer = { type = "sgd", lr = 0.01, momentum = 0.9, nesterov = true }`
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct SgdConfig {
    /// Learning rate.
    #[serde(default = "default_lr")]
    pub lr: f64,
    /// Momentum factor.
    #[serde(default)]
    pub momentum: f64,
    /// Dampening for momentum.
    #[serde(default)]
    pub dampening: f64,
    /// Nesterov momentum.
    #[serde(default)]
    pub nesterov: bool,
    /// L2 penalty.
    #[serde(default)]
    pub weight_decay: f64,
}

fn default_lr() -> f64 {
    0.01
}

/// SGD as `torch.optim.SGD`.
pub struct Sgd {
    config: SgdConfig,
    momentum: PerParameter,
}

impl Sgd {
    /// A fresh optimizer.
    pub fn new(config: SgdConfig) -> Self {
        Self {
            config,
            momentum: PerParameter::default(),
        }
    }
}

impl Optimizer for Sgd {
    fn name(&self) -> &'static str {
        "sgd"
    }

    fn step(&mut self, params: &[Tensor], grads: &[Tensor]) -> Result<(), tch::TchError> {
        let c = self.config.clone();
        // `_single_tensor_sgd` of torch 2.11, op for op (what `foreach=None` runs on CPU).
        no_grad(|| {
            for (i, (param, grad)) in params.iter().zip(grads).enumerate() {
                if !grad.defined() {
                    continue;
                }
                let mut g = if c.weight_decay != 0.0 {
                    ops::add(grad, param, c.weight_decay)?
                } else {
                    grad.shallow_clone()
                };
                if c.momentum != 0.0 {
                    // PyTorch's first buffer is a clone of the gradient: no dampening.
                    let first = !self.momentum.is_set(i);
                    let buf = self.momentum.get_or_zeros(i, param)?;
                    if first {
                        buf.f_copy_(&g)?;
                    } else {
                        let _ = buf.f_mul_scalar_(c.momentum)?;
                        ops::add_(buf, &g, 1.0 - c.dampening)?;
                    }
                    g = if c.nesterov {
                        ops::add(&g, buf, c.momentum)?
                    } else {
                        buf.shallow_clone()
                    };
                }
                ops::add_(param, &g, -c.lr)?;
            }
            Ok(())
        })
    }

    fn lr(&self) -> f64 {
        self.config.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.config.lr = lr;
    }

    fn hyper_state(&self) -> serde_json::Value {
        serde_json::json!({
            "lr": self.config.lr, "momentum": self.config.momentum, "dampening": self.config.dampening,
            "nesterov": self.config.nesterov, "weight_decay": self.config.weight_decay,
        })
    }

    fn tensor_state(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        self.momentum.export("momentum", &mut out);
        out
    }

    fn load_state(
        &mut self,
        hyper: &serde_json::Value,
        tensors: &[(String, Tensor)],
        params: &Parameters<'_>,
    ) -> Result<(), String> {
        let config: SgdConfig = serde_json::from_value(hyper.clone()).map_err(|e| e.to_string())?;
        // Without momentum SGD keeps no state: a momentum buffer saved anyway is refused.
        let kinds: &[&str] = if config.momentum != 0.0 {
            &["momentum"]
        } else {
            &[]
        };
        saved_state::check(kinds, params, tensors)?;
        self.config = config;
        self.momentum.import("momentum", tensors)
    }
}
