//! ResNet-18/34/50 in torchvision's layout (`torchvision.models.resnet18/34/50`): the same
//! modules, names, shapes and initialisation, so torchvision weights load as they are.

use fe_plugin_api::tch::{nn, Tensor};
use fe_plugin_api::{Error, Result};
use serde::Deserialize;

use crate::input::{Images, Sides};

use crate::layers::{BatchNorm, Conv2d, ConvSpec, Linear};

/// ResNet's configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct ResNetConfig {
    /// Channels of the input (torchvision: 3). Any height and width of at least 1 work: the
    /// network ends with global average pooling.
    pub in_channels: i64,
    /// Number of outputs (torchvision: 1000).
    pub classes: i64,
    /// Channels of the stem and first stage (torchvision: 64); later stages double it.
    /// Anything but 64 is no longer torchvision's network, but keeps its names.
    pub width: i64,
}

impl Default for ResNetConfig {
    fn default() -> Self {
        Self {
            in_channels: 3,
            classes: 1000,
            width: 64,
        }
    }
}

/// Which ResNet: blocks per stage and whether they are bottlenecks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// ResNet-18: basic blocks [2, 2, 2, 2].
    D18,
    /// ResNet-34: basic blocks [3, 4, 6, 3].
    D34,
    /// ResNet-50: bottlenecks [3, 4, 6, 3].
    D50,
}

impl Depth {
    /// The architecture's name in a manifest.
    fn name(self) -> &'static str {
        match self {
            Depth::D18 => "ResNet18",
            Depth::D34 => "ResNet34",
            Depth::D50 => "ResNet50",
        }
    }

    fn blocks(self) -> [usize; 4] {
        match self {
            Depth::D18 => [2, 2, 2, 2],
            Depth::D34 | Depth::D50 => [3, 4, 6, 3],
        }
    }

    fn expansion(self) -> i64 {
        if self == Depth::D50 {
            4
        } else {
            1
        }
    }
}

fn conv(path: nn::Path<'_>, input: i64, output: i64, kernel: i64, stride: i64) -> Conv2d {
    // torchvision: kaiming_normal_(mode="fan_out", nonlinearity="relu"), no bias.
    let spec = ConvSpec::same(kernel).no_bias().stride(stride).he(true);
    Conv2d::new(path, input, output, spec)
}

/// A basic block (two 3×3 convolutions) or a bottleneck (1×1, 3×3, 1×1), with its
/// projection shortcut when the shape changes.
struct Block {
    convs: Vec<(Conv2d, BatchNorm)>,
    downsample: Option<(Conv2d, BatchNorm)>,
}

impl Block {
    fn new(path: nn::Path<'_>, depth: Depth, input: i64, planes: i64, stride: i64) -> Self {
        let output = planes * depth.expansion();
        let shapes: Vec<(i64, i64, i64, i64)> = if depth == Depth::D50 {
            vec![
                (input, planes, 1, 1),
                (planes, planes, 3, stride),
                (planes, output, 1, 1),
            ]
        } else {
            vec![(input, planes, 3, stride), (planes, planes, 3, 1)]
        };
        let convs = shapes
            .into_iter()
            .enumerate()
            .map(|(i, (cin, cout, kernel, s))| {
                (
                    conv(&path / format!("conv{}", i + 1), cin, cout, kernel, s),
                    BatchNorm::new(&path / format!("bn{}", i + 1), cout),
                )
            })
            .collect();
        let downsample = (stride != 1 || input != output).then(|| {
            let shortcut = &path / "downsample";
            (
                conv(&shortcut / "0", input, output, 1, stride),
                BatchNorm::new(&shortcut / "1", output),
            )
        });
        Self { convs, downsample }
    }

    fn forward(&mut self, x: &Tensor, train: bool) -> Result<Tensor> {
        let last = self.convs.len() - 1;
        let mut y = x.shallow_clone();
        for (i, (conv, bn)) in self.convs.iter_mut().enumerate() {
            y = bn.forward(&conv.forward(&y)?, train)?;
            if i < last {
                y = y.f_relu()?;
            }
        }
        let identity = match &mut self.downsample {
            Some((conv, bn)) => bn.forward(&conv.forward(x)?, train)?,
            None => x.shallow_clone(),
        };
        Ok(y.f_add(&identity)?.f_relu()?)
    }
}

/// torchvision's ResNet.
pub struct ResNet {
    pub(crate) vs: nn::VarStore,
    conv1: Conv2d,
    bn1: BatchNorm,
    layers: Vec<Vec<Block>>,
    fc: Linear,
    input: Images,
}

/// Names accepted as intermediate layers.
pub(crate) const LAYERS: [&str; 4] = ["layer1", "layer2", "layer3", "layer4"];

impl ResNet {
    pub(crate) fn new(vs: nn::VarStore, depth: Depth, config: ResNetConfig) -> Result<Self> {
        for (field, value) in [
            ("in_channels", config.in_channels),
            ("classes", config.classes),
            ("width", config.width),
        ] {
            if value < 1 {
                return Err(Error::config(field, "must be at least 1"));
            }
        }
        let root = vs.root();
        let w = config.width;
        let conv1 = Conv2d::new(
            &root / "conv1",
            config.in_channels,
            w,
            ConvSpec {
                padding: 3,
                ..ConvSpec::same(7).no_bias().stride(2).he(true)
            },
        );
        let bn1 = BatchNorm::new(&root / "bn1", w);
        let mut input = w;
        let mut layers = Vec::new();
        for (stage, &count) in depth.blocks().iter().enumerate() {
            let planes = w << stage;
            let stride = if stage == 0 { 1 } else { 2 };
            let path = &root / format!("layer{}", stage + 1);
            let blocks = (0..count)
                .map(|i| {
                    let block = Block::new(
                        &path / i,
                        depth,
                        input,
                        planes,
                        if i == 0 { stride } else { 1 },
                    );
                    input = planes * depth.expansion();
                    block
                })
                .collect();
            layers.push(blocks);
        }
        let fc = Linear::new(&root / "fc", input, config.classes);
        Ok(Self {
            vs,
            conv1,
            bn1,
            layers,
            fc,
            input: Images {
                model: depth.name(),
                field: format!("in_channels = {}", config.in_channels),
                channels: config.in_channels,
                sides: Sides::Any,
            },
        })
    }

    /// Runs the network, calling `tap(layer, output)` after each stage.
    pub(crate) fn run(
        &mut self,
        x: &Tensor,
        train: bool,
        tap: &mut dyn FnMut(&str, &Tensor),
    ) -> Result<Tensor> {
        self.input.check(x)?;
        let x = self.bn1.forward(&self.conv1.forward(x)?, train)?.f_relu()?;
        let mut x = x.f_max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false)?;
        for (name, blocks) in LAYERS.iter().zip(&mut self.layers) {
            for block in blocks {
                x = block.forward(&x, train)?;
            }
            tap(name, &x);
        }
        let x = x.f_adaptive_avg_pool2d([1, 1])?.f_flatten(1, -1)?;
        self.fc.forward(&x)
    }
}
