//! FastEstimator's LeNet (`fastestimator.architecture.pytorch.LeNet`).

use fe_plugin_api::tch::{nn, nn::Module, Tensor};
use fe_plugin_api::{Error, Result};
use serde::Deserialize;

use crate::input::{Images, Sides};

/// Layers whose outputs `forward_with_layers` can return.
pub(crate) const LAYERS: [&str; 4] = ["conv1", "conv2", "conv3", "fc1"];

/// LeNet's configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct LeNetConfig {
    /// Channels, height, width of one input.
    pub input_shape: [i64; 3],
    /// Number of classes.
    pub classes: i64,
    /// End with a softmax, as FastEstimator's LeNet does; `false` gives logits.
    pub softmax: bool,
}

impl Default for LeNetConfig {
    fn default() -> Self {
        Self {
            input_shape: [1, 28, 28],
            classes: 10,
            softmax: true,
        }
    }
}

/// conv(32) → relu → pool → conv(64) → relu → pool → conv(64) → flatten → fc(64) → relu → fc.
pub struct LeNet {
    pub(crate) vs: nn::VarStore,
    conv1: nn::Conv2D,
    conv2: nn::Conv2D,
    conv3: nn::Conv2D,
    fc1: nn::Linear,
    fc2: nn::Linear,
    softmax: bool,
    input: Images,
}

const KERNEL: i64 = 3;
const POOL: i64 = 2;

impl LeNet {
    pub(crate) fn new(vs: nn::VarStore, config: LeNetConfig) -> Result<Self> {
        let [channels, height, width] = config.input_shape;
        let after = |side: i64| ((side - (KERNEL - 1)) / POOL - (KERNEL - 1)) / POOL - (KERNEL - 1);
        let (flat_h, flat_w) = (after(height), after(width));
        if flat_h < 1 || flat_w < 1 || channels < 1 {
            return Err(Error::config(
                "input_shape",
                format!(
                    "{:?} is too small for LeNet (needs at least 1x14x14)",
                    config.input_shape
                ),
            ));
        }
        if config.classes < 1 {
            return Err(Error::config("classes", "must be at least 1"));
        }
        let root = vs.root();
        let conv = Default::default();
        let net = Self {
            conv1: nn::conv2d(&root / "conv1", channels, 32, KERNEL, conv),
            conv2: nn::conv2d(&root / "conv2", 32, 64, KERNEL, conv),
            conv3: nn::conv2d(&root / "conv3", 64, 64, KERNEL, conv),
            fc1: nn::linear(&root / "fc1", flat_h * flat_w * 64, 64, Default::default()),
            fc2: nn::linear(&root / "fc2", 64, config.classes, Default::default()),
            softmax: config.softmax,
            input: Images {
                model: "LeNet",
                field: format!("input_shape = {:?}", config.input_shape),
                channels,
                sides: Sides::Exactly(height, width),
            },
            vs,
        };
        Ok(net)
    }

    /// Runs the network, calling `tap(layer, output)` after each named layer.
    pub(crate) fn run(&self, x: &Tensor, tap: &mut dyn FnMut(&str, &Tensor)) -> Result<Tensor> {
        self.input.check(x)?;
        let x = self.conv1.forward(x).f_relu()?.f_max_pool2d(
            [POOL, POOL],
            [POOL, POOL],
            [0, 0],
            [1, 1],
            false,
        )?;
        tap("conv1", &x);
        let x = self.conv2.forward(&x).f_relu()?.f_max_pool2d(
            [POOL, POOL],
            [POOL, POOL],
            [0, 0],
            [1, 1],
            false,
        )?;
        tap("conv2", &x);
        let x = self.conv3.forward(&x);
        tap("conv3", &x);
        let x = x.f_flatten(1, -1)?;
        let x = self.fc1.forward(&x).f_relu()?;
        tap("fc1", &x);
        let x = super::apply_linear(&self.fc2, &x);
        Ok(if self.softmax {
            x.f_softmax(-1, x.kind())?
        } else {
            x
        })
    }
}
