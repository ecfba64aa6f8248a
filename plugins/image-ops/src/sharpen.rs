//! `Sharpen` (albumentations 2.0.8, `method = "kernel"`): the 3×3 kernel
//! `(1 - α) · identity + α · [[-1, -1, -1], [-1, 8 + L, -1], [-1, -1, -1]]` in float32, α and the
//! lightness L drawn uniformly, applied as `cv2.filter2D` does (float32 sums over the taps,
//! border reflect-101, uint8 rounded half to even and saturated, floats clipped to [0, 1]).

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{Error, Result};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::{uniform, values, Pixels};
use crate::layout::Spatial;

/// `Sharpen` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct SharpenConfig {
    /// Range of the blend α of the sharpening kernel (default [0.2, 0.5]).
    #[serde(default = "alpha")]
    pub alpha: [f64; 2],
    /// Range of the kernel's centre lightness (default [0.5, 1.0]).
    #[serde(default = "lightness")]
    pub lightness: [f64; 2],
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn alpha() -> [f64; 2] {
    [0.2, 0.5]
}

fn lightness() -> [f64; 2] {
    [0.5, 1.0]
}

fn half() -> f64 {
    0.5
}

/// The op's ranges.
pub(crate) struct SharpenKernel {
    alpha: [f64; 2],
    lightness: [f64; 2],
}

impl TryFrom<SharpenConfig> for SharpenKernel {
    type Error = Error;
    fn try_from(c: SharpenConfig) -> Result<Self> {
        if !(0.0 <= c.alpha[0] && c.alpha[0] <= c.alpha[1] && c.alpha[1] <= 1.0) {
            return Err(Error::config("alpha", "must be [lo, hi] within [0, 1]"));
        }
        if !(0.0 <= c.lightness[0] && c.lightness[0] <= c.lightness[1]) {
            return Err(Error::config(
                "lightness",
                "must be [lo, hi] with 0 <= lo <= hi",
            ));
        }
        Ok(Self {
            alpha: c.alpha,
            lightness: c.lightness,
        })
    }
}

/// albumentations' sharpening matrix for `alpha` and `lightness`, row-major, float32 as numpy
/// computes it (float32 arrays times a Python float).
pub(crate) fn sharpening_matrix(alpha: f64, lightness: f64) -> [f32; 9] {
    let (keep, blend) = ((1.0 - alpha) as f32, alpha as f32);
    let centre = (8.0 + lightness) as f32;
    std::array::from_fn(|i| {
        let (identity, effect) = if i == 4 { (1.0, centre) } else { (0.0, -1.0) };
        keep * identity + blend * effect
    })
}

/// reflect-101 index of `i` in `0..n`.
fn reflect(i: i64, n: i64) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n - 1);
    let i = i.rem_euclid(period);
    (if i < n { i } else { period - i }) as usize
}

/// `cv2.filter2D` of an `(h, w, c)` float32 image with the 3×3 `kernel`.
fn filter(data: &[f32], (h, w, c): (usize, usize, usize), kernel: &[f32; 9]) -> Vec<f32> {
    let mut out = vec![0f32; data.len()];
    for y in 0..h {
        for x in 0..w {
            for ch in 0..c {
                let mut sum = 0f32;
                for (k, &weight) in kernel.iter().enumerate() {
                    let sy = reflect(y as i64 + k as i64 / 3 - 1, h as i64);
                    let sx = reflect(x as i64 + k as i64 % 3 - 1, w as i64);
                    sum += weight * data[(sy * w + sx) * c + ch];
                }
                out[(y * w + x) * c + ch] = sum;
            }
        }
    }
    out
}

impl Pixels for SharpenKernel {
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        let alpha = uniform(rng, self.alpha);
        Ok(vec![alpha, uniform(rng, self.lightness)])
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let kernel = sharpening_matrix(params[0], params[1]);
        let size = x.size();
        let (h, w) = (size[0] as usize, size[1] as usize);
        let c = if layout.plain { 1 } else { size[2] as usize };
        if layout.h_axis != 0 {
            return Err(Error::msg(
                "Sharpen takes one image at a time, (H, W) or (H, W, C)",
            ));
        }
        let float = values(x)?
            .f_to_kind(Kind::Float)?
            .f_to_device(Device::Cpu)?
            .f_contiguous()?
            .f_view([-1])?;
        let numel = float.numel();
        let mut data = vec![0f32; numel];
        float.f_copy_data(&mut data, numel)?;
        let out = filter(&data, (h, w, c), &kernel);
        let max = if x.kind() == Kind::Uint8 { 255.0 } else { 1.0 };
        let out: Vec<f32> = out
            .iter()
            .map(|&v| {
                let v = if x.kind() == Kind::Uint8 {
                    v.round_ties_even()
                } else {
                    v
                };
                v.clamp(0.0, max)
            })
            .collect();
        Ok(Tensor::f_from_slice(&out)?
            .f_view(size.as_slice())?
            .f_to_kind(x.kind())?
            .f_to_device(x.device())?)
    }
}

photometric!(
    Sharpen,
    SharpenConfig,
    SharpenKernel,
    "Sharpens with a random blend of the identity and a Laplacian-like kernel."
);
