//! `MultiplicativeNoise`: the image multiplied by random factors, one for the whole image,
//! one per channel, one per pixel, or one per pixel and channel.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{Error, Result};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::{restore, values, Pixels, ToUint8};
use crate::layout::Spatial;

/// `MultiplicativeNoise` configuration (FastEstimator's and albumentations' names).
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct MultiplicativeNoiseConfig {
    /// Range `[lo, hi]` the factors are drawn from uniformly, or one fixed factor
    /// (default [0.9, 1.1]).
    #[serde(default = "default_multiplier")]
    pub multiplier: Multiplier,
    /// One factor per channel rather than one for all channels (default false).
    #[serde(default)]
    pub per_channel: bool,
    /// One factor per pixel rather than one for the whole image (default false).
    #[serde(default)]
    pub elementwise: bool,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

/// A factor range, or a single factor.
#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(untagged)]
pub enum Multiplier {
    /// Always this factor.
    Fixed(f64),
    /// Uniform in `[lo, hi]`.
    Range([f64; 2]),
}

fn default_multiplier() -> Multiplier {
    Multiplier::Range([0.9, 1.1])
}

fn half() -> f64 {
    0.5
}

/// Multiplies by factors drawn per call.
pub(crate) struct NoiseFactors {
    range: [f64; 2],
    per_channel: bool,
    elementwise: bool,
}

impl TryFrom<MultiplicativeNoiseConfig> for NoiseFactors {
    type Error = Error;
    fn try_from(c: MultiplicativeNoiseConfig) -> Result<Self> {
        let range = match c.multiplier {
            Multiplier::Fixed(m) => [m, m],
            Multiplier::Range(r) => r,
        };
        if !(0.0 <= range[0] && range[0] <= range[1] && range[1].is_finite()) {
            return Err(Error::config(
                "multiplier",
                format!("needs 0 <= lo <= hi, got {range:?}"),
            ));
        }
        Ok(NoiseFactors {
            range,
            per_channel: c.per_channel,
            elementwise: c.elementwise,
        })
    }
}

impl NoiseFactors {
    /// The factor tensor's shape for an image of `layout` and `size`: it broadcasts
    /// against the image, as albumentations' repeated / squeezed `multiplier` does.
    fn shape(&self, layout: &Spatial, size: &[i64]) -> Vec<i64> {
        let channels = if layout.plain { 1 } else { size[2] };
        let c = if self.per_channel { channels } else { 1 };
        let mut shape = if self.elementwise {
            vec![layout.height, layout.width]
        } else {
            vec![1, 1]
        };
        if !layout.plain {
            shape.push(c);
        }
        shape
    }
}

impl Pixels for NoiseFactors {
    /// The factors, row-major in [`NoiseFactors::shape`]; float32 like albumentations'.
    fn draw(&self, rng: &mut ChaCha8Rng, image: &Tensor, layout: &Spatial) -> Result<Vec<f64>> {
        let n: i64 = self.shape(layout, &image.size()).iter().product();
        let [lo, hi] = self.range;
        Ok((0..n)
            .map(|_| f64::from((lo + (hi - lo) * rng.random::<f64>()) as f32))
            .collect())
    }

    /// `x · m` in float32, clipped; uint8 results truncated as albucore's lookup tables
    /// and `clip(...).astype(uint8)` do.
    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let v = values(x)?;
        let m = Tensor::f_from_slice(params)?
            .f_to_kind(v.kind())?
            .f_reshape(self.shape(layout, &x.size()))?
            .f_to_device(x.device())?;
        restore(&v.f_mul(&m)?, x.kind(), ToUint8::Truncate)
    }
}

photometric!(
    MultiplicativeNoise,
    MultiplicativeNoiseConfig,
    NoiseFactors,
    "Multiplies images by random factors: per image, channel, pixel, or pixel and channel."
);
