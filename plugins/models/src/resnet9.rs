//! FastEstimator's ResNet9 (`fastestimator.architecture.pytorch.ResNet9`, after
//! davidcpage/cifar10-fast), with its variable names.

use fe_plugin_api::tch::{nn, Tensor};
use fe_plugin_api::{Error, Result};
use serde::Deserialize;

use crate::input::{Images, Sides};

use crate::layers::{leaky_relu, BatchNorm, Conv2d, ConvSpec, Linear};

/// ResNet9's configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct ResNet9Config {
    /// Channels, height, width of one input (height and width at least 16).
    pub input_shape: [i64; 3],
    /// Number of classes.
    pub classes: i64,
    /// Channels of the first convolution (FastEstimator: 64); the stages have 2×, 4×, 8×.
    pub width: i64,
    /// End with a softmax, as FastEstimator's ResNet9 does; `false` gives logits.
    pub softmax: bool,
}

impl Default for ResNet9Config {
    fn default() -> Self {
        Self {
            input_shape: [3, 32, 32],
            classes: 10,
            width: 64,
            softmax: true,
        }
    }
}

const SLOPE: f64 = 0.1;

/// conv → bn → leaky relu, twice; added to its input by the caller.
struct Residual {
    conv1: Conv2d,
    conv1_bn: BatchNorm,
    conv2: Conv2d,
    conv2_bn: BatchNorm,
}

impl Residual {
    fn new(path: nn::Path<'_>, channels: i64) -> Self {
        Self {
            conv1: Conv2d::new(&path / "conv1", channels, channels, ConvSpec::same(3)),
            conv1_bn: BatchNorm::new(&path / "conv1_bn", channels),
            conv2: Conv2d::new(&path / "conv2", channels, channels, ConvSpec::same(3)),
            conv2_bn: BatchNorm::new(&path / "conv2_bn", channels),
        }
    }

    fn forward(&mut self, x: &Tensor, train: bool) -> Result<Tensor> {
        let y = self.conv1_bn.forward(&self.conv1.forward(x)?, train)?;
        let y = leaky_relu(&y, SLOPE)?;
        let y = self.conv2_bn.forward(&self.conv2.forward(&y)?, train)?;
        leaky_relu(&y, SLOPE)
    }
}

/// A stage: conv → max-pool 2 → bn → leaky relu, then `x + residual(x)`.
struct Stage {
    conv: Conv2d,
    bn: BatchNorm,
    residual: Option<Residual>,
}

impl Stage {
    fn forward(&mut self, x: &Tensor, train: bool, pool: bool) -> Result<Tensor> {
        let mut y = self.conv.forward(x)?;
        if pool {
            y = y.f_max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], false)?;
        }
        let y = leaky_relu(&self.bn.forward(&y, train)?, SLOPE)?;
        match &mut self.residual {
            Some(residual) => Ok(y.f_add(&residual.forward(&y, train)?)?),
            None => Ok(y),
        }
    }
}

/// The 9-layer ResNet.
pub struct ResNet9 {
    pub(crate) vs: nn::VarStore,
    stages: Vec<Stage>,
    fc1: Linear,
    softmax: bool,
    input: Images,
}

impl ResNet9 {
    pub(crate) fn new(vs: nn::VarStore, config: ResNet9Config) -> Result<Self> {
        let [channels, height, width] = config.input_shape;
        if channels < 1 || height < 16 || width < 16 {
            return Err(Error::config(
                "input_shape",
                format!(
                    "{:?}: ResNet9 needs at least 1 channel and height and width of at least 16",
                    config.input_shape
                ),
            ));
        }
        if config.classes < 1 {
            return Err(Error::config("classes", "must be at least 1"));
        }
        if config.width < 1 {
            return Err(Error::config("width", "must be at least 1"));
        }
        let root = vs.root();
        let w = config.width;
        let widths = [(channels, w), (w, 2 * w), (2 * w, 4 * w), (4 * w, 8 * w)];
        let stages = widths
            .iter()
            .enumerate()
            .map(|(i, &(input, output))| Stage {
                conv: Conv2d::new(&root / format!("conv{i}"), input, output, ConvSpec::same(3)),
                bn: BatchNorm::with_momentum(&root / format!("conv{i}_bn"), output, 0.2),
                residual: (i > 0).then(|| Residual::new(&root / format!("residual{i}"), output)),
            })
            .collect();
        let fc1 = Linear::new(&root / "fc1", 8 * w, config.classes);
        Ok(Self {
            vs,
            stages,
            fc1,
            softmax: config.softmax,
            input: Images {
                model: "ResNet9",
                field: format!("input_shape = {:?}", config.input_shape),
                channels,
                sides: Sides::Any,
            },
        })
    }

    pub(crate) fn run(&mut self, x: &Tensor, train: bool) -> Result<Tensor> {
        self.input.check(x)?;
        let mut x = x.shallow_clone();
        for (i, stage) in self.stages.iter_mut().enumerate() {
            x = stage.forward(&x, train, i > 0)?;
        }
        let x = x.f_adaptive_max_pool2d([1, 1])?.0.f_flatten(1, -1)?;
        let x = self.fc1.forward(&x)?;
        Ok(if self.softmax {
            x.f_softmax(-1, x.kind())?
        } else {
            x
        })
    }
}
