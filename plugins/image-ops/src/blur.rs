//! `GaussianBlur` and `MedianBlur` after albumentations 2.0.8: a separable Gaussian with
//! albumentations' (PIL's) kernel, run like `cv2.sepFilter2D` (border reflect-101), and
//! `cv2.medianBlur` (border replicate; float images through uint8).

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{Error, Result};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::{restore, uniform, values, Pixels, ToUint8};
use crate::color_ops::via_uint8;
use crate::layout::Spatial;
use crate::warp::fold;
use crate::{Bits, BorderMode, Span};

fn half() -> f64 {
    0.5
}

/// `GaussianBlur` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct GaussianBlurConfig {
    /// Kernel size range: `l` for `[0, l]`, or `[lo, hi]`; 0 sizes the kernel from sigma as
    /// `int(3.5 σ) · 2 + 1`, even sizes grow by one (default 0).
    #[serde(default = "no_size")]
    pub blur_limit: Bits,
    /// Sigma range: `s` for `[0, s]`, or `[lo, hi]` (default [0.5, 3.0]).
    #[serde(default = "sigmas")]
    pub sigma_limit: Span,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn no_size() -> Bits {
    Bits::One(0)
}
fn sigmas() -> Span {
    Span::Range([0.5, 3.0])
}

/// Draws `(sigma, kernel size)` and blurs.
pub(crate) struct Gaussian {
    sizes: [i64; 2],
    sigmas: [f64; 2],
}

impl TryFrom<GaussianBlurConfig> for Gaussian {
    type Error = Error;
    fn try_from(c: GaussianBlurConfig) -> Result<Self> {
        let sizes = match c.blur_limit {
            Bits::One(l) => [0, l],
            Bits::Range(r) => r,
        };
        if !(0 <= sizes[0] && sizes[0] <= sizes[1]) {
            return Err(Error::config(
                "blur_limit",
                format!("needs 0 <= lo <= hi, got {sizes:?}"),
            ));
        }
        let sigmas = match c.sigma_limit {
            Span::Value(s) => [0.0, s],
            Span::Range(r) => r,
        };
        if !(0.0 <= sigmas[0] && sigmas[0] <= sigmas[1] && sigmas[1].is_finite()) {
            return Err(Error::config(
                "sigma_limit",
                format!("needs 0 <= lo <= hi, got {sigmas:?}"),
            ));
        }
        Ok(Gaussian { sizes, sigmas })
    }
}

/// albumentations' `create_gaussian_kernel_1d`: PIL's size rule, normalised.
pub(crate) fn gaussian_kernel(sigma: f64, ksize: i64) -> Vec<f64> {
    if sigma <= 0.0 {
        // albumentations divides by zero here (NaN); no blur is the limit σ → 0.
        return vec![1.0];
    }
    let size = if ksize == 0 {
        (sigma * 3.5) as i64 * 2 + 1
    } else {
        ksize
    };
    let size = if size % 2 == 0 { size + 1 } else { size };
    let weights: Vec<f64> = (-(size / 2)..=size / 2)
        .map(|x| (-0.5 * (x as f64 / sigma).powi(2)).exp())
        .collect();
    let sum: f64 = weights.iter().sum();
    weights.iter().map(|w| w / sum).collect()
}

/// `x` with `pad` pixels added on both sides of `axis` by `border`.
pub(crate) fn pad_axis(x: &Tensor, axis: i64, pad: i64, border: BorderMode) -> Result<Tensor> {
    let n = x.size()[axis as usize];
    let index = Tensor::f_arange_start(-pad, n + pad, (Kind::Int64, x.device()))?;
    Ok(x.f_index_select(axis, &fold(&index, n, border)?)?)
}

/// 1-D correlation of `x` with `kernel` along `axis`, reflect-101 border.
pub(crate) fn convolve_axis(x: &Tensor, axis: i64, kernel: &[f64]) -> Result<Tensor> {
    let n = x.size()[axis as usize];
    let r = kernel.len() as i64 / 2;
    let padded = pad_axis(x, axis, r, BorderMode::Reflect101)?;
    let mut out = x.f_zeros_like()?;
    for (k, &w) in kernel.iter().enumerate() {
        out = out.f_add(&padded.f_narrow(axis, k as i64, n)?.f_mul_scalar(w)?)?;
    }
    Ok(out)
}

impl Pixels for Gaussian {
    /// `[sigma, kernel size]`, drawn in that order as albumentations does.
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        let sigma = uniform(rng, self.sigmas);
        let size = rng.random_range(self.sizes[0]..=self.sizes[1]);
        Ok(vec![sigma, size as f64])
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let kernel = gaussian_kernel(params[0], params[1] as i64);
        let v = values(x)?.f_to_kind(Kind::Double)?;
        let y = convolve_axis(&v, layout.w_axis(), &kernel)?;
        let y = convolve_axis(&y, layout.h_axis, &kernel)?;
        restore(&y, x.kind(), ToUint8::Round)
    }
}

photometric!(
    GaussianBlur,
    GaussianBlurConfig,
    Gaussian,
    "Gaussian blur of random sigma (and kernel size)."
);

/// `MedianBlur` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct MedianBlurConfig {
    /// Odd aperture range: `l` for `[3, l]`, or `[lo, hi]` (default [3, 7]); values below 3
    /// become 3 and even ones the next odd number, as albumentations does.
    #[serde(default = "apertures")]
    pub blur_limit: Bits,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn apertures() -> Bits {
    Bits::Range([3, 7])
}

/// A `blur_limit` as albumentations reads it for odd apertures: `l` means `[3, l]`, each bound
/// raised to the next odd size of at least 3.
pub(crate) fn odd_blur_limit(limit: Bits) -> Result<[i64; 2]> {
    let [lo, hi] = match limit {
        Bits::One(l) => [3, l],
        Bits::Range(r) => r,
    };
    let odd = |v: i64| (v + i64::from(v % 2 == 0)).max(3);
    let (lo, hi) = (odd(lo), odd(hi));
    if lo > hi {
        return Err(Error::config(
            "blur_limit",
            format!("needs lo <= hi, got [{lo}, {hi}]"),
        ));
    }
    Ok([lo, hi])
}

/// Draws an odd aperture and takes the median of each window.
pub(crate) struct Median([i64; 2]);

impl TryFrom<MedianBlurConfig> for Median {
    type Error = Error;
    fn try_from(c: MedianBlurConfig) -> Result<Self> {
        let [lo, hi] = odd_blur_limit(c.blur_limit)?;
        Ok(Median([lo, hi]))
    }
}

impl Pixels for Median {
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        let steps = (self.0[1] - self.0[0]) / 2;
        Ok(vec![(self.0[0] + 2 * rng.random_range(0..=steps)) as f64])
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let k = params[0] as i64;
        via_uint8(x, |b| {
            let r = k / 2;
            let (h, w) = (layout.h_axis, layout.w_axis());
            let padded = pad_axis(
                &pad_axis(b, h, r, BorderMode::Replicate)?,
                w,
                r,
                BorderMode::Replicate,
            )?;
            let mut windows = Vec::new();
            for dy in 0..k {
                for dx in 0..k {
                    windows.push(padded.f_narrow(h, dy, layout.height)?.f_narrow(
                        w,
                        dx,
                        layout.width,
                    )?);
                }
            }
            let (median, _) = Tensor::f_stack(&windows, -1)?.f_median_dim(-1, false)?;
            Ok(median.f_contiguous()?)
        })
    }
}

photometric!(
    MedianBlur,
    MedianBlurConfig,
    Median,
    "Median of a random odd k x k window."
);
