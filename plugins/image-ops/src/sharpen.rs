//! `Sharpen` (albumentations 2.0.8). `method = "kernel"`: the 3×3 kernel
//! `(1 - α) · identity + α · [[-1, -1, -1], [-1, 8 + L, -1], [-1, -1, -1]]` in float32, α and the
//! lightness L drawn uniformly, applied as `cv2.filter2D` does (float32 sums over the taps,
//! border reflect-101, uint8 rounded half to even and saturated, floats clipped to [0, 1]).
//! `method = "gaussian"`: the unsharp mask `x + α (x - GaussianBlur(x))`, α drawn.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{Error, Result};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::{uniform, values, Pixels};
use crate::cv_gaussian::Plane;
use crate::layout::Spatial;

/// How `Sharpen` sharpens.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SharpenMethod {
    /// The 3×3 Laplacian-like kernel.
    Kernel,
    /// Unsharp masking with a Gaussian blur.
    Gaussian,
}

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
    /// `"kernel"` (default) or `"gaussian"`.
    #[serde(default = "kernel_method")]
    pub method: SharpenMethod,
    /// Gaussian kernel size for `"gaussian"`, odd, at least 3 (default 5).
    #[serde(default = "five")]
    pub kernel_size: i64,
    /// Gaussian sigma for `"gaussian"`, above 0 (default 1).
    #[serde(default = "one")]
    pub sigma: f64,
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

fn kernel_method() -> SharpenMethod {
    SharpenMethod::Kernel
}

fn five() -> i64 {
    5
}

fn one() -> f64 {
    1.0
}

/// The op's ranges and method.
pub(crate) struct SharpenKernel {
    alpha: [f64; 2],
    lightness: [f64; 2],
    method: SharpenMethod,
    kernel_size: usize,
    sigma: f64,
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
        // albumentations means to make even sizes odd, but its validator never runs and
        // OpenCV then refuses the even kernel; refused here when the config is read.
        if c.kernel_size < 3 || c.kernel_size % 2 == 0 {
            return Err(Error::config(
                "kernel_size",
                format!("must be odd and at least 3, got {}", c.kernel_size),
            ));
        }
        if !(c.sigma > 0.0 && c.sigma.is_finite()) {
            return Err(Error::config(
                "sigma",
                format!("must be above 0, got {}", c.sigma),
            ));
        }
        Ok(Self {
            alpha: c.alpha,
            lightness: c.lightness,
            method: c.method,
            kernel_size: c.kernel_size as usize,
            sigma: c.sigma,
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
pub(crate) fn reflect(i: i64, n: i64) -> usize {
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
    /// `[α, L]` for `"kernel"`, `[α]` for `"gaussian"` (albumentations draws no lightness).
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        let alpha = uniform(rng, self.alpha);
        if self.method == SharpenMethod::Gaussian {
            return Ok(vec![alpha]);
        }
        Ok(vec![alpha, uniform(rng, self.lightness)])
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        if self.method == SharpenMethod::Gaussian {
            return self.unsharp(params[0], x, layout);
        }
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

impl SharpenKernel {
    /// albumentations' `sharpen_gaussian`: `x + α (x - blurred)`, clipped; uint8 computes in
    /// float64 and truncates (`astype`), floats stay in their own precision.
    fn unsharp(&self, alpha: f64, x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let (plane, dims) = Plane::of(x, layout, "Sharpen")?;
        let blurred = plane.blurred(dims, self.kernel_size, self.sigma);
        let out = match (&plane, &blurred) {
            // albumentations subtracts in uint8, so `x - blurred` wraps below zero and a pixel
            // darker than its surroundings turns bright; the difference is taken signed here.
            (Plane::U8(v), Plane::U8(b)) => Plane::U8(
                v.iter()
                    .zip(b)
                    .map(|(&v, &b)| {
                        let v = f64::from(v);
                        (v + alpha * (v - f64::from(b))).clamp(0.0, 255.0) as u8
                    })
                    .collect(),
            ),
            (Plane::F32(v), Plane::F32(b)) => Plane::F32(
                v.iter()
                    .zip(b)
                    .map(|(&v, &b)| (v + alpha as f32 * (v - b)).clamp(0.0, 1.0))
                    .collect(),
            ),
            (Plane::F64(v), Plane::F64(b)) => Plane::F64(
                v.iter()
                    .zip(b)
                    .map(|(&v, &b)| (v + alpha * (v - b)).clamp(0.0, 1.0))
                    .collect(),
            ),
            _ => return Err(Error::msg("Sharpen: the blur changed the pixel kind")),
        };
        out.to_tensor(x)
    }
}

photometric!(
    Sharpen,
    SharpenConfig,
    SharpenKernel,
    "Sharpens with a random blend of the identity and a Laplacian-like kernel."
);
