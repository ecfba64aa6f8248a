//! RMSprop.

use serde::{Deserialize, Serialize};
use tch::Tensor;

use super::{no_grad, ops, saved_state, Optimizer, Parameters, PerParameter};

/// `optimizer = { type = "rmsprop", lr = 0.01, alpha = 0.99, momentum = 0.0, centered = false }`
#[derive(Deserialize, Serialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct RmsPropConfig {
    /// Learning rate.
    #[serde(default = "default_lr")]
    pub lr: f64,
    /// Smoothing constant.
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    /// Added to the denominator for numerical stability.
    #[serde(default = "default_eps")]
    pub eps: f64,
    /// L2 penalty.
    #[serde(default)]
    pub weight_decay: f64,
    /// Momentum factor.
    #[serde(default)]
    pub momentum: f64,
    /// Normalise by the estimated variance of the gradient.
    #[serde(default)]
    pub centered: bool,
}

fn default_lr() -> f64 {
    0.01
}

fn default_alpha() -> f64 {
    0.99
}

fn default_eps() -> f64 {
    1e-8
}

/// RMSprop as `torch.optim.RMSprop`.
pub struct RmsProp {
    config: RmsPropConfig,
    square_avg: PerParameter,
    grad_avg: PerParameter,
    momentum: PerParameter,
}

impl RmsProp {
    /// A fresh optimizer.
    pub fn new(config: RmsPropConfig) -> Self {
        Self {
            config,
            square_avg: PerParameter::default(),
            grad_avg: PerParameter::default(),
            momentum: PerParameter::default(),
        }
    }
}

impl Optimizer for RmsProp {
    fn name(&self) -> &'static str {
        "rmsprop"
    }

    fn step(&mut self, params: &[Tensor], grads: &[Tensor]) -> Result<(), tch::TchError> {
        let c = self.config.clone();
        // `_single_tensor_rmsprop` of torch 2.11, op for op.
        no_grad(|| {
            for (i, (param, grad)) in params.iter().zip(grads).enumerate() {
                if !grad.defined() {
                    continue;
                }
                let g = if c.weight_decay != 0.0 {
                    ops::add(grad, param, c.weight_decay)?
                } else {
                    grad.shallow_clone()
                };
                let square_avg = self.square_avg.get_or_zeros(i, param)?;
                let _ = square_avg.f_mul_scalar_(c.alpha)?;
                ops::addcmul_(square_avg, &g, &g, 1.0 - c.alpha)?;
                let square_avg = square_avg.shallow_clone();
                let mut avg = if c.centered {
                    let grad_avg = self.grad_avg.get_or_zeros(i, param)?;
                    let _ = grad_avg.f_lerp_(&g, 1.0 - c.alpha)?;
                    let mut avg = ops::addcmul(&square_avg, grad_avg, grad_avg, -1.0)?;
                    let _ = avg.f_sqrt_()?;
                    avg
                } else {
                    square_avg.f_sqrt()?
                };
                let _ = avg.f_add_scalar_(c.eps)?;
                if c.momentum > 0.0 {
                    let buf = self.momentum.get_or_zeros(i, param)?;
                    let _ = buf.f_mul_scalar_(c.momentum)?;
                    ops::addcdiv_(buf, &g, &avg, 1.0)?;
                    ops::add_(param, buf, -c.lr)?;
                } else {
                    ops::addcdiv_(param, &g, &avg, -c.lr)?;
                }
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
        serde_json::json!({ "config": self.config })
    }

    fn tensor_state(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        self.square_avg.export("square_avg", &mut out);
        self.grad_avg.export("grad_avg", &mut out);
        self.momentum.export("momentum", &mut out);
        out
    }

    fn load_state(
        &mut self,
        hyper: &serde_json::Value,
        tensors: &[(String, Tensor)],
        params: &Parameters<'_>,
    ) -> Result<(), String> {
        let config: RmsPropConfig =
            serde_json::from_value(hyper["config"].clone()).map_err(|e| e.to_string())?;
        let mut kinds = vec!["square_avg"];
        if config.centered {
            kinds.push("grad_avg");
        }
        if config.momentum > 0.0 {
            kinds.push("momentum");
        }
        saved_state::check(&kinds, params, tensors)?;
        self.config = config;
        self.square_avg.import("square_avg", tensors)?;
        self.grad_avg.import("grad_avg", tensors)?;
        self.momentum.import("momentum", tensors)
    }
}
