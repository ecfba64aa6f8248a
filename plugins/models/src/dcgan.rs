//! FastEstimator's DCGAN pair for 28×28 single-channel images (the apphub's
//! `image_generation/dcgan`, PyTorch version), with its variable names: a generator from a
//! 100-d noise vector to an image in [-1, 1] (tanh), and a discriminator giving one logit.

use fe_plugin_api::tch::nn::{self, Init};
use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{Error, Result};

use crate::layers::{BatchNorm, Conv2d, ConvSpec, Linear};

/// Length of the generator's noise input.
pub const LATENT: i64 = 100;

/// PyTorch's default weight init for a layer whose fan-in is `fan_in` (see `layers`).
fn default_weight(fan_in: i64) -> Init {
    let bound = 1.0 / (fan_in as f64).sqrt();
    Init::Uniform {
        lo: -bound,
        up: bound,
    }
}

/// `nn.ConvTranspose2d(input, output, 5, bias=False, ...)`: `weight` `[input, output, 5, 5]`,
/// whose fan-in PyTorch takes from dimension 1.
struct ConvTranspose {
    weight: Tensor,
    stride: i64,
    output_padding: i64,
}

impl ConvTranspose {
    fn new(path: nn::Path<'_>, input: i64, output: i64, stride: i64) -> Self {
        Self {
            weight: path.var(
                "weight",
                &[input, output, 5, 5],
                default_weight(output * 25),
            ),
            stride,
            output_padding: stride - 1,
        }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.f_conv_transpose2d(
            &self.weight,
            None::<Tensor>,
            [self.stride, self.stride],
            [2, 2],
            [self.output_padding, self.output_padding],
            1,
            [1, 1],
        )?)
    }
}

/// The generator: `fc1` (no bias) → `bn1d` → leaky ReLU → `[256, 7, 7]` → three transposed
/// convolutions (`conv_tran1..3`, to 128, 64, 1 channels; 7 → 7 → 14 → 28) with `bn2d1`,
/// `bn2d2` and leaky ReLUs between them → tanh.
pub struct Generator {
    pub(crate) vs: nn::VarStore,
    fc1: Tensor,
    bn1d: BatchNorm,
    conv_tran1: ConvTranspose,
    bn2d1: BatchNorm,
    conv_tran2: ConvTranspose,
    bn2d2: BatchNorm,
    conv_tran3: ConvTranspose,
}

impl Generator {
    pub(crate) fn new(vs: nn::VarStore) -> Self {
        let root = vs.root();
        let fc1 = (&root / "fc1").var("weight", &[7 * 7 * 256, LATENT], default_weight(LATENT));
        Self {
            fc1,
            bn1d: BatchNorm::new(&root / "bn1d", 7 * 7 * 256),
            conv_tran1: ConvTranspose::new(&root / "conv_tran1", 256, 128, 1),
            bn2d1: BatchNorm::new(&root / "bn2d1", 128),
            conv_tran2: ConvTranspose::new(&root / "conv_tran2", 128, 64, 2),
            bn2d2: BatchNorm::new(&root / "bn2d2", 64),
            conv_tran3: ConvTranspose::new(&root / "conv_tran3", 64, 1, 2),
            vs,
        }
    }

    /// `z` `[B, 100]` → images `[B, 1, 28, 28]` in [-1, 1].
    pub(crate) fn run(&mut self, z: &Tensor, train: bool) -> Result<Tensor> {
        let size = z.size();
        if size.len() != 2 || size[1] != LATENT {
            return Err(Error::msg(format!(
                "DCGANGenerator takes noise of shape [batch, {LATENT}], got {size:?}"
            )));
        }
        let x = z.f_linear(&self.fc1, None::<Tensor>)?;
        let x = self.bn1d.forward(&x, train)?.f_leaky_relu()?;
        let x = x.f_view([-1, 256, 7, 7])?;
        let x = self.conv_tran1.forward(&x)?;
        let x = self.bn2d1.forward(&x, train)?.f_leaky_relu()?;
        let x = self.conv_tran2.forward(&x)?;
        let x = self.bn2d2.forward(&x, train)?.f_leaky_relu()?;
        Ok(self.conv_tran3.forward(&x)?.f_tanh()?)
    }
}

/// The discriminator: `conv1` (1 → 64, 5×5, stride 2) → leaky ReLU → channel dropout 0.3 →
/// `conv2` (→ 128, stride 2) → leaky ReLU → channel dropout 0.3 → `fc1` to one logit.
pub struct Discriminator {
    pub(crate) vs: nn::VarStore,
    conv1: Conv2d,
    conv2: Conv2d,
    fc1: Linear,
}

impl Discriminator {
    pub(crate) fn new(vs: nn::VarStore) -> Self {
        let root = vs.root();
        let spec = ConvSpec::same(5).stride(2);
        Self {
            conv1: Conv2d::new(&root / "conv1", 1, 64, spec),
            conv2: Conv2d::new(&root / "conv2", 64, 128, spec),
            fc1: Linear::new(&root / "fc1", 7 * 7 * 128, 1),
            vs,
        }
    }

    /// Images `[B, 1, 28, 28]` → logits `[B, 1]`.
    pub(crate) fn run(&mut self, x: &Tensor, train: bool) -> Result<Tensor> {
        let size = x.size();
        if size.len() != 4 || size[1..] != [1, 28, 28] {
            return Err(Error::msg(format!(
                "DCGANDiscriminator takes images of shape [batch, 1, 28, 28], got {size:?}"
            )));
        }
        let x = self.conv1.forward(x)?.f_leaky_relu()?;
        let x = x.f_feature_dropout(0.3, train)?;
        let x = self.conv2.forward(&x)?.f_leaky_relu()?;
        let x = x.f_feature_dropout(0.3, train)?;
        self.fc1.forward(&x.f_flatten(1, -1)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe_plugin_api::tch::{Device, Kind};

    #[test]
    fn noise_becomes_images_in_range_that_the_discriminator_scores() {
        let mut generator = Generator::new(nn::VarStore::new(Device::Cpu));
        let mut discriminator = Discriminator::new(nn::VarStore::new(Device::Cpu));
        let z = Tensor::randn([4, LATENT], (Kind::Float, Device::Cpu));
        let images = generator.run(&z, true).unwrap();
        assert_eq!(images.size(), [4, 1, 28, 28]);
        assert!(images.abs().max().double_value(&[]) <= 1.0);
        let scores = discriminator.run(&images, true).unwrap();
        assert_eq!(scores.size(), [4, 1]);
        // PyTorch's parameter counts for the apphub's modules.
        let count = |vs: &nn::VarStore| -> i64 {
            vs.trainable_variables()
                .iter()
                .map(|t| t.numel() as i64)
                .sum()
        };
        assert_eq!(count(&generator.vs), 2_305_472);
        assert_eq!(count(&discriminator.vs), 212_865);
    }

    #[test]
    fn wrong_shapes_are_refused_naming_the_expected_one() {
        let mut generator = Generator::new(nn::VarStore::new(Device::Cpu));
        let z = Tensor::zeros([2, 10], (Kind::Float, Device::Cpu));
        let error = generator.run(&z, false).unwrap_err().to_string();
        assert!(error.contains("[batch, 100]"), "{error}");
    }
}
