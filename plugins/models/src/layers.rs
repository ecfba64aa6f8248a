//! The building blocks of the zoo, with PyTorch's variable names, shapes and default
//! initialisation, so a model's variables are exactly its PyTorch reference's `state_dict`.
//!
//! tch's own layers differ where that matters: its batch norm has no `num_batches_tracked`
//! buffer and starts its scale uniform in [0, 1) instead of at 1, and its LSTM may re-bind its
//! weights to a flat cuDNN buffer the host does not know about.

use fe_plugin_api::tch::nn::{self, init, Init};
use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::Result;

/// PyTorch's default for conv and linear weights: kaiming uniform with `a = sqrt(5)`, i.e.
/// uniform in ±1/sqrt(fan_in).
fn default_weight(fan_in: i64) -> Init {
    let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
    Init::Uniform {
        lo: -bound,
        up: bound,
    }
}

/// He-normal (`kaiming_normal_`), fan-in or fan-out, for ReLU networks.
pub(crate) fn he_normal(fan_out: bool) -> Init {
    Init::Kaiming {
        dist: init::NormalOrUniform::Normal,
        fan: if fan_out {
            init::FanInOut::FanOut
        } else {
            init::FanInOut::FanIn
        },
        non_linearity: init::NonLinearity::ReLU,
    }
}

/// `nn.Conv2d`: `weight` `[out, in, k, k]` and, when `bias`, `bias` `[out]`.
pub(crate) struct Conv2d {
    weight: Tensor,
    bias: Option<Tensor>,
    stride: i64,
    padding: i64,
}

/// How a [`Conv2d`] is made.
#[derive(Clone, Copy)]
pub(crate) struct ConvSpec {
    pub kernel: i64,
    pub stride: i64,
    pub padding: i64,
    pub bias: bool,
    /// Weight initialisation; `None` is PyTorch's default.
    pub init: Option<Init>,
    /// Zero the bias instead of PyTorch's default uniform.
    pub zero_bias: bool,
}

impl ConvSpec {
    /// A `k`×`k` convolution, stride 1, "same" padding, with bias, PyTorch's init.
    pub(crate) fn same(kernel: i64) -> Self {
        Self {
            kernel,
            stride: 1,
            padding: kernel / 2,
            bias: true,
            init: None,
            zero_bias: false,
        }
    }

    /// Without a bias.
    pub(crate) fn no_bias(self) -> Self {
        Self {
            bias: false,
            ..self
        }
    }

    /// With this stride.
    pub(crate) fn stride(self, stride: i64) -> Self {
        Self { stride, ..self }
    }

    /// He-normal weights and a zero bias (FastEstimator's UNet, torchvision's ResNet).
    pub(crate) fn he(self, fan_out: bool) -> Self {
        Self {
            init: Some(he_normal(fan_out)),
            zero_bias: true,
            ..self
        }
    }
}

impl Conv2d {
    pub(crate) fn new(path: nn::Path<'_>, input: i64, output: i64, spec: ConvSpec) -> Self {
        let fan_in = input * spec.kernel * spec.kernel;
        let weight = path.var(
            "weight",
            &[output, input, spec.kernel, spec.kernel],
            spec.init.unwrap_or_else(|| default_weight(fan_in)),
        );
        let bias = spec.bias.then(|| {
            let init = if spec.zero_bias {
                Init::Const(0.0)
            } else {
                default_weight(fan_in)
            };
            path.var("bias", &[output], init)
        });
        Self {
            weight,
            bias,
            stride: spec.stride,
            padding: spec.padding,
        }
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.f_conv2d(
            &self.weight,
            self.bias.as_ref(),
            [self.stride, self.stride],
            [self.padding, self.padding],
            [1, 1],
            1,
        )?)
    }
}

/// `nn.BatchNorm2d` (also used for 1-d inputs): `weight`, `bias`, and the buffers
/// `running_mean`, `running_var`, `num_batches_tracked`.
pub(crate) struct BatchNorm {
    weight: Tensor,
    bias: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    num_batches_tracked: Tensor,
    momentum: f64,
}

impl BatchNorm {
    /// PyTorch's defaults: momentum 0.1, eps 1e-5, scale 1, shift 0.
    pub(crate) fn new(path: nn::Path<'_>, channels: i64) -> Self {
        Self::with_momentum(path, channels, 0.1)
    }

    pub(crate) fn with_momentum(path: nn::Path<'_>, channels: i64, momentum: f64) -> Self {
        let counter = Tensor::zeros([], (Kind::Int64, path.device()));
        Self {
            weight: path.var("weight", &[channels], Init::Const(1.0)),
            bias: path.var("bias", &[channels], Init::Const(0.0)),
            running_mean: path.zeros_no_train("running_mean", &[channels]),
            running_var: path.ones_no_train("running_var", &[channels]),
            num_batches_tracked: path.add("num_batches_tracked", counter, false),
            momentum,
        }
    }

    /// Batch statistics (and a running-statistics update) in training, running statistics
    /// otherwise.
    pub(crate) fn forward(&mut self, x: &Tensor, train: bool) -> Result<Tensor> {
        if train {
            let _ = self.num_batches_tracked.f_add_scalar_(1)?;
        }
        Ok(Tensor::f_batch_norm(
            x,
            Some(&self.weight),
            Some(&self.bias),
            Some(&self.running_mean),
            Some(&self.running_var),
            train,
            self.momentum,
            1e-5,
            true,
        )?)
    }
}

/// `nn.Linear`: `weight` `[out, in]`, `bias` `[out]`.
pub(crate) struct Linear {
    weight: Tensor,
    bias: Tensor,
}

impl Linear {
    pub(crate) fn new(path: nn::Path<'_>, input: i64, output: i64) -> Self {
        Self {
            weight: path.var("weight", &[output, input], default_weight(input)),
            bias: path.var("bias", &[output], default_weight(input)),
        }
    }

    /// With a zero bias (FastEstimator's WideResNet).
    pub(crate) fn zero_bias(path: nn::Path<'_>, input: i64, output: i64) -> Self {
        Self {
            weight: path.var("weight", &[output, input], default_weight(input)),
            bias: path.var("bias", &[output], Init::Const(0.0)),
        }
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.f_linear(&self.weight, Some(&self.bias))?)
    }
}

/// `nn.LayerNorm` over the last dimension: `weight`, `bias`.
pub(crate) struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    width: i64,
}

impl LayerNorm {
    pub(crate) fn new(path: nn::Path<'_>, width: i64) -> Self {
        Self {
            weight: path.var("weight", &[width], Init::Const(1.0)),
            bias: path.var("bias", &[width], Init::Const(0.0)),
            width,
        }
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.f_layer_norm(
            [self.width],
            Some(&self.weight),
            Some(&self.bias),
            1e-5,
            true,
        )?)
    }
}

/// `nn.Embedding`: `weight` `[count, width]`, standard normal.
pub(crate) struct Embedding {
    weight: Tensor,
}

impl Embedding {
    pub(crate) fn new(path: nn::Path<'_>, count: i64, width: i64) -> Self {
        Self {
            weight: path.var(
                "weight",
                &[count, width],
                Init::Randn {
                    mean: 0.0,
                    stdev: 1.0,
                },
            ),
        }
    }

    /// Looks up integer `ids` (any integer dtype). libtorch itself refuses an id outside
    /// `0..count`; checking here would cost a device sync every step.
    pub(crate) fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let ids = ids.f_to_kind(Kind::Int64)?;
        Ok(Tensor::f_embedding(&self.weight, &ids, -1, false, false)?)
    }
}

/// Leaky ReLU with any slope. tch exposes leaky ReLU only with the default slope, so this is
/// PReLU with a constant one-element weight (no gradient): one kernel each way, as PyTorch's
/// `leaky_relu`. `max(x, slope·x)` computes the same values but costs three kernels forward
/// and a slow `maximum` backward: ResNet9 trained 20% slower than PyTorch eager with it.
pub(crate) fn leaky_relu(x: &Tensor, slope: f64) -> Result<Tensor> {
    let weight = Tensor::f_full([1], slope, (x.kind(), x.device()))?;
    Ok(x.f_prelu(&weight)?)
}
