//! FastEstimator's Wide Residual Network (`fastestimator.architecture.pytorch.WideResidualNetwork`),
//! WRN-depth-k, with its variable names (`block1.layer.0.convShortcut.weight`, ...).

use fe_plugin_api::tch::{nn, Tensor};
use fe_plugin_api::{Error, Result};
use serde::Deserialize;

use crate::input::{Images, Sides};

use crate::layers::{BatchNorm, Conv2d, ConvSpec, Linear};

/// WideResNet's configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct WideResNetConfig {
    /// Depth; `(depth - 4)` must be a multiple of 6 (28 gives 4 blocks per group).
    pub depth: i64,
    /// The width multiplier k.
    pub widen_factor: i64,
    /// Number of outputs (logits).
    pub classes: i64,
    /// Dropout between the two convolutions of a block, in training.
    pub dropout: f64,
    /// Channels of the input (FastEstimator: 3).
    pub in_channels: i64,
}

impl Default for WideResNetConfig {
    fn default() -> Self {
        Self {
            depth: 28,
            widen_factor: 10,
            classes: 10,
            dropout: 0.0,
            in_channels: 3,
        }
    }
}

fn conv(path: nn::Path<'_>, input: i64, output: i64, kernel: i64, stride: i64) -> Conv2d {
    let spec = ConvSpec::same(kernel).no_bias().stride(stride).he(true);
    Conv2d::new(path, input, output, spec)
}

/// Pre-activation block: bn → relu → conv → bn → relu → (dropout) → conv, plus the
/// input (or its 1×1 projection, taken after the first activation, as FastEstimator does).
struct Block {
    bn1: BatchNorm,
    conv1: Conv2d,
    bn2: BatchNorm,
    conv2: Conv2d,
    shortcut: Option<Conv2d>,
    dropout: f64,
}

impl Block {
    fn new(path: nn::Path<'_>, input: i64, output: i64, stride: i64, dropout: f64) -> Self {
        Self {
            bn1: BatchNorm::new(&path / "bn1", input),
            conv1: conv(&path / "conv1", input, output, 3, stride),
            bn2: BatchNorm::new(&path / "bn2", output),
            conv2: conv(&path / "conv2", output, output, 3, 1),
            shortcut: (input != output)
                .then(|| conv(&path / "convShortcut", input, output, 1, stride)),
            dropout,
        }
    }

    fn forward(&mut self, x: &Tensor, train: bool) -> Result<Tensor> {
        let activated = self.bn1.forward(x, train)?.f_relu()?;
        let y = self.conv1.forward(&activated)?;
        let mut y = self.bn2.forward(&y, train)?.f_relu()?;
        if self.dropout > 0.0 {
            y = y.f_dropout(self.dropout, train)?;
        }
        let y = self.conv2.forward(&y)?;
        let shortcut = match &self.shortcut {
            Some(projection) => projection.forward(&activated)?,
            None => x.shallow_clone(),
        };
        Ok(shortcut.f_add(&y)?)
    }
}

/// WRN-depth-k.
pub struct WideResNet {
    pub(crate) vs: nn::VarStore,
    conv1: Conv2d,
    groups: Vec<Vec<Block>>,
    bn1: BatchNorm,
    fc: Linear,
    input: Images,
}

impl WideResNet {
    pub(crate) fn new(vs: nn::VarStore, config: WideResNetConfig) -> Result<Self> {
        if config.depth < 10 || (config.depth - 4) % 6 != 0 {
            return Err(Error::config(
                "depth",
                format!(
                    "{}: (depth - 4) must be a positive multiple of 6 (16, 22, 28, 40, ...)",
                    config.depth
                ),
            ));
        }
        for (field, value) in [
            ("widen_factor", config.widen_factor),
            ("classes", config.classes),
            ("in_channels", config.in_channels),
        ] {
            if value < 1 {
                return Err(Error::config(field, "must be at least 1"));
            }
        }
        if !(0.0..1.0).contains(&config.dropout) {
            return Err(Error::config("dropout", "must lie in [0, 1)"));
        }
        let per_group = ((config.depth - 4) / 6) as usize;
        let k = config.widen_factor;
        let widths = [16, 16 * k, 32 * k, 64 * k];
        let root = vs.root();
        let conv1 = conv(&root / "conv1", config.in_channels, widths[0], 3, 1);
        let groups = (0..3)
            .map(|g| {
                let path = &root / format!("block{}", g + 1) / "layer";
                let stride = if g == 0 { 1 } else { 2 };
                (0..per_group)
                    .map(|i| {
                        let input = if i == 0 { widths[g] } else { widths[g + 1] };
                        let s = if i == 0 { stride } else { 1 };
                        Block::new(&path / i, input, widths[g + 1], s, config.dropout)
                    })
                    .collect()
            })
            .collect();
        Ok(Self {
            bn1: BatchNorm::new(&root / "bn1", widths[3]),
            fc: Linear::zero_bias(&root / "fc", widths[3], config.classes),
            conv1,
            groups,
            vs,
            input: Images {
                model: "WideResNet",
                field: format!("in_channels = {}", config.in_channels),
                channels: config.in_channels,
                sides: Sides::Any,
            },
        })
    }

    pub(crate) fn run(&mut self, x: &Tensor, train: bool) -> Result<Tensor> {
        self.input.check(x)?;
        let mut x = self.conv1.forward(x)?;
        for group in &mut self.groups {
            for block in group {
                x = block.forward(&x, train)?;
            }
        }
        let x = self.bn1.forward(&x, train)?.f_relu()?;
        let x = x.f_adaptive_avg_pool2d([1, 1])?.f_flatten(1, -1)?;
        self.fc.forward(&x)
    }
}
