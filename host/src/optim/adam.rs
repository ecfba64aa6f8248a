//! Adam and AdamW.

use serde::{Deserialize, Serialize};
use tch::Tensor;

use super::{no_grad, ops, saved_state, Optimizer, Parameters, PerParameter};

/// `optimizer = { type = "adam", lr = 1e-3, betas = [0.9, 0.999], eps = 1e-8 }`
#[derive(Deserialize, Serialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct AdamConfig {
    /// Learning rate.
    #[serde(default = "default_lr")]
    pub lr: f64,
    /// Decay rates of the first and second moment estimates.
    #[serde(default = "default_betas")]
    pub betas: (f64, f64),
    /// Added to the denominator for numerical stability.
    #[serde(default = "default_eps")]
    pub eps: f64,
    /// Weight decay: L2 penalty for Adam, decoupled decay for AdamW (default 0.01 there).
    #[serde(default)]
    pub weight_decay: Option<f64>,
    /// Use the maximum of past second moments (AMSGrad).
    #[serde(default)]
    pub amsgrad: bool,
    /// Run libtorch's fused kernel (one launch for all parameters), bit-identical to PyTorch's
    /// `fused=True`; `false` runs the per-tensor ops, bit-identical to PyTorch's default
    /// (`foreach=None`, which is `foreach=False` on CPU). The two differ in the last bits.
    #[serde(default = "yes")]
    pub fused: bool,
}

fn yes() -> bool {
    true
}

fn default_lr() -> f64 {
    1e-3
}

fn default_betas() -> (f64, f64) {
    (0.9, 0.999)
}

fn default_eps() -> f64 {
    1e-8
}

/// Adam as `torch.optim.Adam`, or AdamW as `torch.optim.AdamW`.
pub struct Adam {
    config: AdamConfig,
    decoupled: bool,
    step: u64,
    /// The step count on the device, after steps whose skipping only the device knows
    /// ([`Optimizer::step_unless_overflow`]); `step` is stale while it is set.
    device_step: Option<Tensor>,
    exp_avg: PerParameter,
    exp_avg_sq: PerParameter,
    max_exp_avg_sq: PerParameter,
}

impl Adam {
    /// A fresh optimizer; `decoupled` selects AdamW.
    pub fn new(config: AdamConfig, decoupled: bool) -> Self {
        Self {
            config,
            decoupled,
            step: 0,
            device_step: None,
            exp_avg: PerParameter::default(),
            exp_avg_sq: PerParameter::default(),
            max_exp_avg_sq: PerParameter::default(),
        }
    }

    fn weight_decay(&self) -> f64 {
        self.config
            .weight_decay
            .unwrap_or(if self.decoupled { 0.01 } else { 0.0 })
    }
}

/// `grad` in the memory layout of `param`: the fused kernel walks both buffers in step, as
/// if laid out alike. `torch.autograd.grad` (here `run_backward`) hands gradients back as the
/// backward made them, without `AccumulateGrad`'s rule that a `.grad` takes its parameter's
/// strides: a convolution fed channels-last data (a one-channel image after
/// `ChannelTranspose`, whose strides are channels-last) returns its later layers' weight
/// gradients channels-last, and the kernel then paired each weight with another weight's
/// gradient (LeNet on the digits: 0.80 eval accuracy instead of 0.955). A gradient already laid
/// out like its parameter, the usual case, is passed through without a copy.
fn laid_out_like(grad: &Tensor, param: &Tensor) -> Result<Tensor, tch::TchError> {
    if same_layout(grad, param) {
        return Ok(grad.shallow_clone());
    }
    let out = Tensor::f_empty_strided(param.size(), param.stride(), (grad.kind(), grad.device()))?;
    let mut target = out.shallow_clone();
    target.f_copy_(grad)?;
    Ok(out)
}

/// Whether `a` and `b` (of one shape) put every element at the same offset: equal strides on
/// every dimension longer than 1 (a dimension of size 1 is never stepped along).
fn same_layout(a: &Tensor, b: &Tensor) -> bool {
    let (size, a_strides, b_strides) = (a.size(), a.stride(), b.stride());
    size == b.size()
        && size
            .iter()
            .zip(a_strides.iter().zip(&b_strides))
            .all(|(n, (x, y))| *n <= 1 || x == y)
}

impl Adam {
    /// Brings the device's step count back to the host (a sync), for the host-side paths.
    fn take_device_step(&mut self) -> Result<(), tch::TchError> {
        if let Some(step) = self.device_step.take() {
            self.step = step.f_double_value(&[])? as u64;
        }
        Ok(())
    }

    fn can_fuse(&self, params: &[Tensor], grads: &[Tensor]) -> bool {
        self.config.fused && !params.is_empty() && grads.iter().all(Tensor::defined)
    }

    /// One fused kernel launch; `step` is the already incremented step count (a float scalar
    /// on the parameters' device) and `found_inf`, when given, skips the update on the device.
    fn fused_step(
        &mut self,
        params: &[Tensor],
        grads: &[Tensor],
        step: &Tensor,
        found_inf: Option<&Tensor>,
    ) -> Result<(), tch::TchError> {
        let torch_error = |message: String| tch::TchError::Torch(message);
        let laid_out: Vec<Tensor> = params
            .iter()
            .zip(grads)
            .map(|(param, grad)| laid_out_like(grad, param))
            .collect::<Result<_, _>>()?;
        let grads = &laid_out[..];
        let amsgrad = self.config.amsgrad;
        let mut m = Vec::with_capacity(params.len());
        let mut v = Vec::with_capacity(params.len());
        let mut vmax = Vec::new();
        for (i, param) in params.iter().enumerate() {
            m.push(self.exp_avg.get_or_zeros(i, param)?.shallow_clone());
            v.push(self.exp_avg_sq.get_or_zeros(i, param)?.shallow_clone());
            if amsgrad {
                vmax.push(self.max_exp_avg_sq.get_or_zeros(i, param)?.shallow_clone());
            }
        }
        // The kernel reads (never writes) the step count; one scalar serves every parameter.
        let steps: Vec<Tensor> = params.iter().map(|_| step.shallow_clone()).collect();
        let state = crate::shim::FusedAdam {
            params,
            grads,
            exp_avgs: &m,
            exp_avg_sqs: &v,
            max_exp_avg_sqs: &vmax,
            steps: &steps,
            found_inf,
        };
        no_grad(|| {
            crate::shim::fused_adam(
                state,
                self.config.lr,
                self.config.betas,
                self.weight_decay(),
                self.config.eps,
                amsgrad,
                self.decoupled,
            )
        })
        .map_err(torch_error)
    }
}

impl Optimizer for Adam {
    fn name(&self) -> &'static str {
        if self.decoupled {
            "adamw"
        } else {
            "adam"
        }
    }

    fn step(&mut self, params: &[Tensor], grads: &[Tensor]) -> Result<(), tch::TchError> {
        self.take_device_step()?;
        self.step += 1;
        if self.can_fuse(params, grads) {
            // `full` fills it on the device: uploading a host scalar would be a blocking
            // host-to-device copy, a stream sync on every step on CUDA.
            let step = Tensor::f_full(
                [] as [i64; 0],
                self.step as f64,
                (tch::Kind::Float, params[0].device()),
            )?;
            return self.fused_step(params, grads, &step, None);
        }
        let (beta1, beta2) = self.config.betas;
        let (lr, eps, amsgrad) = (self.config.lr, self.config.eps, self.config.amsgrad);
        let weight_decay = self.weight_decay();
        // `_single_tensor_adam` of torch 2.11 (not capturable), op for op and scalar for scalar:
        // the step count is a float there, and `**` is C's `pow`.
        let step = self.step as f64;
        let bias_correction1 = 1.0 - ops::py_pow(beta1, step);
        let bias_correction2 = 1.0 - ops::py_pow(beta2, step);
        let step_size = lr / bias_correction1;
        let bias_correction2_sqrt = ops::py_pow(bias_correction2, 0.5);
        no_grad(|| {
            for (i, (param, grad)) in params.iter().zip(grads).enumerate() {
                if !grad.defined() {
                    continue;
                }
                let mut g = grad.shallow_clone();
                if weight_decay != 0.0 {
                    if self.decoupled {
                        let _ = param
                            .shallow_clone()
                            .f_mul_scalar_(1.0 - lr * weight_decay)?;
                    } else {
                        g = ops::add(grad, param, weight_decay)?;
                    }
                }
                let m = self.exp_avg.get_or_zeros(i, param)?;
                let _ = m.f_lerp_(&g, 1.0 - beta1)?;
                let m = m.shallow_clone();
                let v = self.exp_avg_sq.get_or_zeros(i, param)?;
                let _ = v.f_mul_scalar_(beta2)?;
                ops::addcmul_(v, &g, &g, 1.0 - beta2)?;
                let second = if amsgrad {
                    let max = self.max_exp_avg_sq.get_or_zeros(i, param)?;
                    let _ = max.f_maximum_out(&max.shallow_clone(), v)?;
                    max.shallow_clone()
                } else {
                    v.shallow_clone()
                };
                let mut denom = second.f_sqrt()?.f_div_scalar(bias_correction2_sqrt)?;
                let _ = denom.f_add_scalar_(eps)?;
                ops::addcdiv_(param, &m, &denom, -step_size)?;
            }
            Ok(())
        })
    }

    fn step_unless_overflow(
        &mut self,
        params: &[Tensor],
        grads: &[Tensor],
        found_inf: &Tensor,
    ) -> Result<bool, tch::TchError> {
        if !self.can_fuse(params, grads) {
            return Ok(false);
        }
        // PyTorch's fused Adam under GradScaler: count the step, let the kernel skip it when
        // the flag is set, and take the skipped step back off the count, all on the device.
        let step = match &self.device_step {
            Some(step) => step.shallow_clone(),
            None => Tensor::f_full(
                [] as [i64; 0],
                self.step as f64,
                (tch::Kind::Float, params[0].device()),
            )?,
        };
        let flag = found_inf.f_reshape([] as [i64; 0])?;
        no_grad(|| {
            let _ = step.shallow_clone().f_add_scalar_(1.0)?;
            self.fused_step(params, grads, &step, Some(found_inf))?;
            let _ = step.shallow_clone().f_sub_(&flag)?;
            Ok::<(), tch::TchError>(())
        })?;
        self.device_step = Some(step);
        Ok(true)
    }

    fn lr(&self) -> f64 {
        self.config.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.config.lr = lr;
    }

    fn hyper_state(&self) -> serde_json::Value {
        // A step count still on the device is read here: checkpoints and logs, not every step.
        let step = self
            .device_step
            .as_ref()
            .and_then(|t| t.f_double_value(&[]).ok())
            .map_or(self.step, |s| s as u64);
        serde_json::json!({ "config": self.config, "decoupled": self.decoupled, "step": step })
    }

    fn tensor_state(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        self.exp_avg.export("exp_avg", &mut out);
        self.exp_avg_sq.export("exp_avg_sq", &mut out);
        self.max_exp_avg_sq.export("max_exp_avg_sq", &mut out);
        out
    }

    fn load_state(
        &mut self,
        hyper: &serde_json::Value,
        tensors: &[(String, Tensor)],
        params: &Parameters<'_>,
    ) -> Result<(), String> {
        let config: AdamConfig =
            serde_json::from_value(hyper["config"].clone()).map_err(|e| e.to_string())?;
        let step = hyper["step"]
            .as_u64()
            .ok_or("optimizer state has no step count")?;
        let mut kinds = vec!["exp_avg", "exp_avg_sq"];
        if config.amsgrad {
            kinds.push("max_exp_avg_sq");
        }
        saved_state::check(&kinds, params, tensors)?;
        self.config = config;
        self.decoupled = hyper["decoupled"].as_bool().unwrap_or(self.decoupled);
        self.step = step;
        self.device_step = None;
        self.exp_avg.import("exp_avg", tensors)?;
        self.exp_avg_sq.import("exp_avg_sq", tensors)?;
        self.max_exp_avg_sq.import("max_exp_avg_sq", tensors)
    }
}
