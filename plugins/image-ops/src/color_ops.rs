//! The photometric ops: configs (FastEstimator's names) and their value maps.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{Error, Result};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::{add, lookup, max_value, range, restore, uniform, values, Pixels, ToUint8};
use crate::layout::Spatial;
use crate::Limit;

fn half() -> f64 {
    0.5
}

fn limit(l: f64) -> Limit {
    Limit::Symmetric(l)
}

/// `RandomBrightnessContrast` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct BrightnessContrastConfig {
    /// Brightness shift range, a fraction of the maximum value (default 0.2: [-0.2, 0.2]).
    #[serde(default = "brightness")]
    pub brightness_limit: Limit,
    /// Contrast factor range around 1 (default 0.2: factor in [0.8, 1.2]).
    #[serde(default = "brightness")]
    pub contrast_limit: Limit,
    /// Shift by a fraction of the maximum value (default) or of the image mean.
    #[serde(default = "yes")]
    pub brightness_by_max: bool,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability of adjusting a sample (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn brightness() -> Limit {
    limit(0.2)
}

fn yes() -> bool {
    true
}

/// `x * alpha + beta`, alpha = 1 + contrast draw, beta = brightness draw × max (or mean).
pub(crate) struct BrightnessContrastMap {
    brightness: [f64; 2],
    contrast: [f64; 2],
    by_max: bool,
}

impl TryFrom<BrightnessContrastConfig> for BrightnessContrastMap {
    type Error = Error;
    fn try_from(c: BrightnessContrastConfig) -> Result<Self> {
        Ok(BrightnessContrastMap {
            brightness: range("brightness_limit", c.brightness_limit)?,
            contrast: range("contrast_limit", c.contrast_limit)?,
            by_max: c.brightness_by_max,
        })
    }
}

impl Pixels for BrightnessContrastMap {
    fn draw(&self, rng: &mut ChaCha8Rng, image: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        let alpha = 1.0 + uniform(rng, self.contrast);
        let beta = uniform(rng, self.brightness);
        let scale = if self.by_max {
            max_value(image.kind())?
        } else {
            values(image)?.f_mean(Kind::Double)?.double_value(&[])
        };
        Ok(vec![alpha, beta * scale])
    }

    fn apply(&self, params: &[f64], x: &Tensor, _: &Spatial) -> Result<Tensor> {
        let y = values(x)?
            .f_mul_scalar(params[0])?
            .f_add_scalar(params[1])?;
        restore(&y, x.kind(), ToUint8::Truncate)
    }
}

photometric!(
    RandomBrightnessContrast,
    BrightnessContrastConfig,
    BrightnessContrastMap,
    "Random brightness shift and contrast factor."
);

/// `RandomGamma` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct GammaConfig {
    /// Range of 100 × gamma (default [80, 120]).
    #[serde(default = "gamma")]
    pub gamma_limit: [f64; 2],
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn gamma() -> [f64; 2] {
    [80.0, 120.0]
}

/// `max · (x / max) ^ gamma`.
pub(crate) struct GammaMap([f64; 2]);

impl TryFrom<GammaConfig> for GammaMap {
    type Error = Error;
    fn try_from(c: GammaConfig) -> Result<Self> {
        let [lo, hi] = c.gamma_limit;
        if 0.0 < lo && lo <= hi && hi.is_finite() {
            Ok(GammaMap(c.gamma_limit))
        } else {
            Err(Error::config(
                "gamma_limit",
                format!("needs 0 < lo <= hi, got [{lo}, {hi}]"),
            ))
        }
    }
}

impl Pixels for GammaMap {
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        Ok(vec![uniform(rng, self.0) / 100.0])
    }

    fn apply(&self, params: &[f64], x: &Tensor, _: &Spatial) -> Result<Tensor> {
        if x.kind() == Kind::Uint8 {
            // albumentations' table: (i / 255) ^ gamma * 255, truncated.
            let lut: Vec<f64> = (0..256)
                .map(|i| ((i as f64 * (1.0 / 255.0)).powf(params[0]) * 255.0).floor())
                .collect();
            return lookup(x, &lut);
        }
        restore(
            &values(x)?
                .f_clamp_min(0.0)?
                .f_pow_tensor_scalar(params[0])?,
            x.kind(),
            ToUint8::Truncate,
        )
    }
}

photometric!(RandomGamma, GammaConfig, GammaMap, "Random gamma curve.");

/// Configuration of the ops with only `masks` and `p`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct PlainConfig {
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

/// `PosterizeMap` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct PosterizeConfig {
    /// Bits kept per channel: `n` or a range `[lo, hi]` drawn uniformly (default 4).
    #[serde(default = "four")]
    pub num_bits: Bits,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

/// A bit count or a range of them.
#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(untagged)]
pub enum Bits {
    /// Exactly this many bits.
    One(i64),
    /// Uniformly from `[lo, hi]`.
    Range([i64; 2]),
}

fn four() -> Bits {
    Bits::One(4)
}

/// Keeps the top `bits` bits of every uint8 value (floats go through uint8).
pub(crate) struct PosterizeMap([i64; 2]);

impl TryFrom<PosterizeConfig> for PosterizeMap {
    type Error = Error;
    fn try_from(c: PosterizeConfig) -> Result<Self> {
        let [lo, hi] = match c.num_bits {
            Bits::One(n) => [n, n],
            Bits::Range(r) => r,
        };
        if 0 <= lo && lo <= hi && hi <= 8 {
            Ok(PosterizeMap([lo, hi]))
        } else {
            Err(Error::config(
                "num_bits",
                format!("needs 0 <= lo <= hi <= 8, got [{lo}, {hi}]"),
            ))
        }
    }
}

/// `f` applied to `x` as uint8: float images are scaled by 255 and rounded first, and
/// scaled back after, as albumentations' `uint8_io` does.
pub(crate) fn via_uint8(x: &Tensor, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    if x.kind() == Kind::Uint8 {
        return f(x);
    }
    max_value(x.kind())?;
    let bytes = x
        .f_mul_scalar(255.0)?
        .f_round()?
        .f_clamp(0.0, 255.0)?
        .f_to_kind(Kind::Uint8)?;
    Ok(f(&bytes)?.f_to_kind(x.kind())?.f_div_scalar(255.0)?)
}

impl Pixels for PosterizeMap {
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        Ok(vec![rng.random_range(self.0[0]..=self.0[1]) as f64])
    }

    fn apply(&self, params: &[f64], x: &Tensor, _: &Spatial) -> Result<Tensor> {
        let keep = 255 - ((1i64 << (8 - params[0] as i64)) - 1);
        via_uint8(x, |b| Ok(b.f_bitwise_and(keep)?))
    }
}

photometric!(
    Posterize,
    PosterizeConfig,
    PosterizeMap,
    "Keeps the top bits of every value."
);

/// `Solarize` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct SolarizeConfig {
    /// Values at or above it are inverted; in uint8 units (float images: /255). `t` or a
    /// range `[lo, hi]` drawn uniformly (default 128).
    #[serde(default = "threshold")]
    pub threshold: Threshold,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

/// A threshold or a range of them.
#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(untagged)]
pub enum Threshold {
    /// Exactly this threshold.
    One(f64),
    /// Uniformly from `[lo, hi]`.
    Range([f64; 2]),
}

fn threshold() -> Threshold {
    Threshold::One(128.0)
}

/// `max - x` where `x >= threshold`.
pub(crate) struct SolarizeMap([f64; 2]);

impl TryFrom<SolarizeConfig> for SolarizeMap {
    type Error = Error;
    fn try_from(c: SolarizeConfig) -> Result<Self> {
        let [lo, hi] = match c.threshold {
            Threshold::One(t) => [t, t],
            Threshold::Range(r) => r,
        };
        if lo <= hi && lo.is_finite() && hi.is_finite() {
            Ok(SolarizeMap([lo, hi]))
        } else {
            Err(Error::config(
                "threshold",
                format!("needs finite lo <= hi, got [{lo}, {hi}]"),
            ))
        }
    }
}

impl Pixels for SolarizeMap {
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        Ok(vec![uniform(rng, self.0)])
    }

    fn apply(&self, params: &[f64], x: &Tensor, _: &Spatial) -> Result<Tensor> {
        let max = max_value(x.kind())?;
        let v = values(x)?;
        let above = v.f_ge(params[0] * max / 255.0)?;
        let y = v.f_neg()?.f_add_scalar(max)?.f_where_self(&above, &v)?;
        restore(&y, x.kind(), ToUint8::Truncate)
    }
}

photometric!(
    Solarize,
    SolarizeConfig,
    SolarizeMap,
    "Inverts values above a threshold."
);

/// Histogram equalization of every channel, as `cv2.equalizeHist` (uint8; floats go
/// through uint8).
pub(crate) struct EqualizeMap;

impl TryFrom<PlainConfig> for EqualizeMap {
    type Error = Error;
    fn try_from(_: PlainConfig) -> Result<Self> {
        Ok(EqualizeMap)
    }
}

/// `cv2.equalizeHist`'s table for one channel's histogram.
fn equalize_table(hist: &[i64]) -> Vec<f64> {
    let total: i64 = hist.iter().sum();
    let first = hist.iter().position(|&h| h > 0).unwrap_or(255);
    if total == hist[first] {
        return vec![first as f64; 256];
    }
    let scale = 255.0 / (total - hist[first]) as f64;
    let mut sum = 0;
    (0..256)
        .map(|i| {
            if i > first {
                sum += hist[i];
            }
            (sum as f64 * scale).round_ties_even().clamp(0.0, 255.0)
        })
        .collect()
}

impl Pixels for EqualizeMap {
    fn draw(&self, _: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        Ok(Vec::new())
    }

    fn apply(&self, _: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        via_uint8(x, |b| {
            let planes: Vec<Tensor> = if layout.plain {
                vec![b.shallow_clone()]
            } else {
                (0..b.size()[2]).map(|c| b.select(2, c)).collect()
            };
            let mapped = planes
                .iter()
                .map(|plane| {
                    let hist = plane
                        .f_flatten(0, -1)?
                        .f_to_kind(Kind::Int64)?
                        .f_bincount(None::<Tensor>, 256)?;
                    let hist =
                        Vec::<i64>::try_from(&hist).map_err(|e| Error::msg(e.to_string()))?;
                    lookup(plane, &equalize_table(&hist))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(if layout.plain {
                mapped
                    .into_iter()
                    .next()
                    .unwrap_or_else(|| b.shallow_clone())
            } else {
                Tensor::f_stack(&mapped, 2)?
            })
        })
    }
}

photometric!(
    Equalize,
    PlainConfig,
    EqualizeMap,
    "Equalizes the histogram of every channel."
);

/// `GaussNoise` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct GaussNoiseConfig {
    /// Range of the noise variance, in uint8 units squared (default [10, 50]).
    #[serde(default = "variance")]
    pub var_limit: [f64; 2],
    /// Mean of the noise, in uint8 units (default 0).
    #[serde(default)]
    pub mean: f64,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn variance() -> [f64; 2] {
    [10.0, 50.0]
}

/// Adds per-pixel, per-channel normal noise of a random variance.
pub(crate) struct NoiseMap {
    var: [f64; 2],
    mean: f64,
}

impl TryFrom<GaussNoiseConfig> for NoiseMap {
    type Error = Error;
    fn try_from(c: GaussNoiseConfig) -> Result<Self> {
        let [lo, hi] = c.var_limit;
        if 0.0 <= lo && lo <= hi && hi.is_finite() {
            Ok(NoiseMap {
                var: c.var_limit,
                mean: c.mean,
            })
        } else {
            Err(Error::config(
                "var_limit",
                format!("needs 0 <= lo <= hi, got [{lo}, {hi}]"),
            ))
        }
    }
}

impl Pixels for NoiseMap {
    /// `[sigma, noise...]`: the noise in the image's value scale, one value per element.
    fn draw(&self, rng: &mut ChaCha8Rng, image: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        let scale = max_value(image.kind())? / 255.0;
        let sigma = uniform(rng, self.var).sqrt();
        let n = image.numel();
        let mut out = Vec::with_capacity(n + 1);
        out.push(sigma);
        while out.len() < n + 1 {
            // Box-Muller: two independent normals from two uniforms in (0, 1].
            let (u1, u2) = (1.0 - rng.random::<f64>(), rng.random::<f64>());
            let r = (-2.0 * u1.ln()).sqrt();
            let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
            for z in [r * c, r * s] {
                if out.len() < n + 1 {
                    out.push((self.mean + sigma * z) * scale);
                }
            }
        }
        Ok(out)
    }

    fn apply(&self, params: &[f64], x: &Tensor, _: &Spatial) -> Result<Tensor> {
        let noise = Tensor::f_from_slice(&params[1..])?
            .f_to_kind(Kind::Float)?
            .f_reshape(x.size())?
            .f_to_device(x.device())?;
        add(x, &noise)
    }
}

photometric!(
    GaussNoise,
    GaussNoiseConfig,
    NoiseMap,
    "Adds normal noise of a random variance."
);
