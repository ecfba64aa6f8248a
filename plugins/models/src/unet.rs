//! FastEstimator's UNet (`fastestimator.architecture.pytorch.UNet`) with its variable names
//! (`enc1.layers.0.weight`, `bottle_neck.layers.5.bias`, `dec1.4.weight`, ...).

use fe_plugin_api::tch::{nn, Tensor};
use fe_plugin_api::{Error, Result};
use serde::Deserialize;

use crate::input::{Images, Sides};

use crate::layers::{Conv2d, ConvSpec};

/// UNet's configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct UNetConfig {
    /// Channels, height, width of one input; height and width multiples of 16.
    pub input_shape: [i64; 3],
    /// Channels of the output mask (sigmoid per channel).
    pub output_channel: i64,
    /// Channels of the first encoder (FastEstimator: 64); each level doubles it.
    pub width: i64,
}

impl Default for UNetConfig {
    fn default() -> Self {
        Self {
            input_shape: [1, 128, 128],
            output_channel: 1,
            width: 64,
        }
    }
}

/// Convolutions (3×3 + ReLU unless 1×1) at their index in a PyTorch `nn.Sequential`, with
/// an optional nearest 2× upsampling before the conv at `upsample_before`.
struct Sequence {
    convs: Vec<Conv2d>,
    upsample_before: Option<usize>,
    last_relu: bool,
}

/// He-normal weights, zero bias, as FastEstimator initialises every UNet conv.
fn he(path: nn::Path<'_>, input: i64, output: i64, kernel: i64) -> Conv2d {
    Conv2d::new(path, input, output, ConvSpec::same(kernel).he(false))
}

impl Sequence {
    /// `UNetEncoderBlock.layers`: conv(0) relu conv(2) relu.
    fn encoder(path: nn::Path<'_>, input: i64, output: i64) -> Self {
        let layers = &path / "layers";
        Self {
            convs: vec![
                he(&layers / 0, input, output, 3),
                he(&layers / 2, output, output, 3),
            ],
            upsample_before: None,
            last_relu: true,
        }
    }

    /// `UNetDecoderBlock.layers`: conv(0) relu conv(2) relu upsample(4) conv(5) relu.
    fn decoder(path: nn::Path<'_>, input: i64, mid: i64, output: i64) -> Self {
        let layers = &path / "layers";
        Self {
            convs: vec![
                he(&layers / 0, input, mid, 3),
                he(&layers / 2, mid, mid, 3),
                he(&layers / 5, mid, output, 3),
            ],
            upsample_before: Some(2),
            last_relu: true,
        }
    }

    /// `dec1`: conv(0) relu conv(2) relu conv 1×1 (4), then the sigmoid (applied by the caller).
    fn head(path: nn::Path<'_>, input: i64, mid: i64, output: i64) -> Self {
        Self {
            convs: vec![
                he(&path / 0, input, mid, 3),
                he(&path / 2, mid, mid, 3),
                he(&path / 4, mid, output, 1),
            ],
            upsample_before: None,
            last_relu: false,
        }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let last = self.convs.len() - 1;
        let mut x = x.shallow_clone();
        for (i, conv) in self.convs.iter().enumerate() {
            if self.upsample_before == Some(i) {
                // By scale, not by an output size read from the shape: ONNX cannot translate
                // the upsample given both, and a trace would fix the size.
                x = x.f_upsample_nearest2d_vec(None::<&[i64]>, [2.0, 2.0].as_slice())?;
            }
            x = conv.forward(&x)?;
            if i < last || self.last_relu {
                x = x.f_relu()?;
            }
        }
        Ok(x)
    }
}

/// The UNet: four encoders, a bottleneck, four decoders with skip connections, sigmoid.
pub struct UNet {
    pub(crate) vs: nn::VarStore,
    encoders: Vec<Sequence>,
    bottle_neck: Sequence,
    decoders: Vec<Sequence>,
    head: Sequence,
    input: Images,
}

impl UNet {
    pub(crate) fn new(vs: nn::VarStore, config: UNetConfig) -> Result<Self> {
        let [channels, height, width] = config.input_shape;
        if channels < 1 || height < 16 || width < 16 || height % 16 != 0 || width % 16 != 0 {
            return Err(Error::config(
                "input_shape",
                format!(
                    "{:?}: UNet needs at least 1 channel, and height and width multiples of 16",
                    config.input_shape
                ),
            ));
        }
        if config.output_channel < 1 {
            return Err(Error::config("output_channel", "must be at least 1"));
        }
        if config.width < 1 {
            return Err(Error::config("width", "must be at least 1"));
        }
        let w = config.width;
        let root = vs.root();
        let encoders = [(channels, w), (w, 2 * w), (2 * w, 4 * w), (4 * w, 8 * w)]
            .iter()
            .enumerate()
            .map(|(i, &(input, output))| {
                Sequence::encoder(&root / format!("enc{}", i + 1), input, output)
            })
            .collect();
        let bottle_neck = Sequence::decoder(&root / "bottle_neck", 8 * w, 16 * w, 8 * w);
        // dec4, dec3, dec2: (concatenated input, mid, output).
        let decoders = [
            (4, 16 * w, 8 * w, 4 * w),
            (3, 8 * w, 4 * w, 2 * w),
            (2, 4 * w, 2 * w, w),
        ]
        .iter()
        .map(|&(level, input, mid, output)| {
            Sequence::decoder(&root / format!("dec{level}"), input, mid, output)
        })
        .collect();
        let head = Sequence::head(&root / "dec1", 2 * w, w, config.output_channel);
        Ok(Self {
            vs,
            encoders,
            bottle_neck,
            decoders,
            head,
            input: Images {
                model: "UNet",
                field: format!("input_shape = {:?}", config.input_shape),
                channels,
                sides: Sides::MultipleOf(16),
            },
        })
    }

    pub(crate) fn run(&self, x: &Tensor) -> Result<Tensor> {
        self.input.check(x)?;
        let mut skips = Vec::with_capacity(self.encoders.len());
        let mut x = x.shallow_clone();
        for encoder in &self.encoders {
            let out = encoder.forward(&x)?;
            x = out.f_max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], false)?;
            skips.push(out);
        }
        let mut x = self.bottle_neck.forward(&x)?;
        for decoder in &self.decoders {
            let skip = skips
                .pop()
                .ok_or_else(|| Error::msg("UNet: missing skip"))?;
            x = decoder.forward(&Tensor::f_cat(&[&x, &skip], 1)?)?;
        }
        let skip = skips
            .pop()
            .ok_or_else(|| Error::msg("UNet: missing skip"))?;
        Ok(self
            .head
            .forward(&Tensor::f_cat(&[&x, &skip], 1)?)?
            .f_sigmoid()?)
    }
}
