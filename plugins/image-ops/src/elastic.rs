//! `ElasticTransform` after albumentations 2.0.8: random noise fields (normal, scaled to
//! a largest magnitude of 1, or uniform in [-1, 1]) smoothed by a Gaussian of `sigma`,
//! scaled by `alpha` and added to every pixel's coordinates; image and masks are resampled
//! through the same displacement like `cv2.remap`. The noise comes from our seeded
//! generator, not numpy's, so fields match albumentations' for the same noise only.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::distort::{direct_method, MapWarp, TargetConfig};
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::rng;
use crate::remap_targets::SourceMap;
use crate::{BorderMode, Interpolation};

/// `ElasticTransform` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ElasticTransformConfig {
    /// Displacement scale in pixels (default 1).
    #[serde(default = "one")]
    pub alpha: f64,
    /// Smoothing of the noise, the Gaussian's sigma in pixels (default 50).
    #[serde(default = "fifty")]
    pub sigma: f64,
    /// A 17 × 17 smoothing kernel instead of one sized from sigma (default false).
    #[serde(default)]
    pub approximate: bool,
    /// One field for both axes (default false).
    #[serde(default)]
    pub same_dxdy: bool,
    /// `"gaussian"` (default) or `"uniform"` noise.
    #[serde(default = "gaussian")]
    pub noise_distribution: String,
    /// Image sampling: `"bilinear"` (default) or `"nearest"`; masks always use nearest.
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
    /// What fills points from outside the image (default `"constant"`).
    #[serde(default = "constant")]
    pub border_mode: BorderMode,
    /// Image fill for `"constant"` (default 0).
    #[serde(default, alias = "value")]
    pub fill: f64,
    /// Mask fill for `"constant"` (default 0).
    #[serde(default, alias = "mask_value")]
    pub fill_mask: f64,
    /// Inputs that are label masks.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
    /// How keypoints follow the map: `"mask"` (default) or `"direct"`, albumentations'
    /// `keypoint_remapping_method`.
    #[serde(default = "mask_method")]
    pub keypoint_remapping_method: String,
    /// Inputs that are bounding boxes: `[N, 4 + k]` rows in `bbox_params`' format.
    #[serde(default)]
    pub bboxes: Vec<String>,
    /// Box format and filter thresholds (albumentations' `BboxParams`); required with `bboxes`.
    pub bbox_params: Option<BboxParamsConfig>,
    /// Inputs that are keypoints: `[N, 2 + k]` rows `x, y, ...` in pixels.
    #[serde(default)]
    pub keypoints: Vec<String>,
    /// Keypoint format and filter (albumentations' `KeypointParams`, default `"xy"`).
    pub keypoint_params: Option<KeypointParamsConfig>,
}

fn one() -> f64 {
    1.0
}
fn fifty() -> f64 {
    50.0
}
fn gaussian() -> String {
    "gaussian".to_owned()
}
fn bilinear() -> Interpolation {
    Interpolation::Bilinear
}
fn constant() -> BorderMode {
    BorderMode::Constant
}
fn half() -> f64 {
    0.5
}
fn mask_method() -> String {
    "mask".to_owned()
}

/// Smoothed random displacements and the warp through them.
pub struct ElasticTransform {
    warp: MapWarp,
    alpha: f64,
    sigma: f64,
    approximate: bool,
    same: bool,
    normal: bool,
    direct: bool,
}

impl FromConfig for ElasticTransform {
    type Config = ElasticTransformConfig;
    fn from_config(c: ElasticTransformConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let normal = match c.noise_distribution.as_str() {
            "gaussian" => true,
            "uniform" => false,
            other => {
                return Err(Error::config(
                    "noise_distribution",
                    format!("expected \"gaussian\" or \"uniform\", got {other:?}"),
                ))
            }
        };
        if !(c.sigma > 0.0 && c.sigma.is_finite() && c.alpha.is_finite()) {
            return Err(Error::config(
                "sigma",
                format!(
                    "needs a finite sigma > 0 and a finite alpha, got sigma {} alpha {}",
                    c.sigma, c.alpha
                ),
            ));
        }
        let warp = MapWarp::new(
            ctx,
            "ElasticTransform",
            c.interpolation,
            c.border_mode,
            [c.fill, c.fill_mask],
            &c.masks,
            c.p,
            TargetConfig {
                bboxes: &c.bboxes,
                bbox_params: c.bbox_params,
                keypoints: &c.keypoints,
                keypoint_params: c.keypoint_params,
            },
        )?;
        Ok(ElasticTransform {
            warp,
            alpha: c.alpha,
            sigma: c.sigma,
            approximate: c.approximate,
            same: c.same_dxdy,
            normal,
            direct: direct_method(&c.keypoint_remapping_method)?,
        })
    }
}

/// `cv::getGaussianKernel(n, sigma)`: float64 weights, normalised, then float32.
fn kernel(n: usize, sigma: f64) -> Vec<f64> {
    let centre = (n as f64 - 1.0) / 2.0;
    let w: Vec<f64> = (0..n)
        .map(|i| (-(i as f64 - centre).powi(2) / (2.0 * sigma * sigma)).exp())
        .collect();
    let sum: f64 = w.iter().sum();
    w.iter().map(|v| f64::from((v / sum) as f32)).collect()
}

/// `cv2.GaussianBlur(rows × cols, ksize, sigma, BORDER_REPLICATE)` of float32 values.
fn blur(values: &[f32], rows: usize, cols: usize, n: usize, sigma: f64) -> Vec<f32> {
    let k = kernel(n, sigma);
    let r = (n / 2) as i64;
    let clamp = |i: i64, len: usize| i.clamp(0, len as i64 - 1) as usize;
    let mut tmp = vec![0f32; rows * cols];
    for y in 0..rows {
        for x in 0..cols {
            let s: f64 = (0..n)
                .map(|t| k[t] * f64::from(values[y * cols + clamp(x as i64 + t as i64 - r, cols)]))
                .sum();
            tmp[y * cols + x] = s as f32;
        }
    }
    let mut out = vec![0f32; rows * cols];
    for y in 0..rows {
        for x in 0..cols {
            let s: f64 = (0..n)
                .map(|t| k[t] * f64::from(tmp[clamp(y as i64 + t as i64 - r, rows) * cols + x]))
                .sum();
            out[y * cols + x] = s as f32;
        }
    }
    out
}

impl ElasticTransform {
    /// The raw noise of the call seeded `seed` (`fields × height × width` float32, before
    /// any normalisation), or `None` when `p` says skip.
    pub(crate) fn noise(&self, height: i64, width: i64, seed: u64) -> Option<Vec<f32>> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.warp.p {
            return None;
        }
        let n = (if self.same { 1 } else { 2 }) * (height * width) as usize;
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            if self.normal {
                // Box-Muller: two independent normals from two uniforms in (0, 1].
                let (u1, u2) = (1.0 - rng.random::<f64>(), rng.random::<f64>());
                let r = (-2.0 * u1.ln()).sqrt();
                let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
                out.extend([r * c, r * s].map(|z| z as f32));
            } else {
                out.push((rng.random::<f64>() * 2.0 - 1.0) as f32);
            }
        }
        out.truncate(n);
        Some(out)
    }

    /// albumentations' `generate_displacement_fields` and maps for `noise`: `(map_x, map_y)`
    /// as float32, row-major `height × width`.
    pub(crate) fn maps(&self, mut noise: Vec<f32>, height: usize, width: usize) -> [Vec<f32>; 2] {
        if self.normal {
            let top = noise.iter().fold(0f32, |m, v| m.max(v.abs()));
            if top > 1e-6 {
                noise.iter_mut().for_each(|v| *v /= top);
            }
        }
        // OpenCV sizes float kernels as 8 sigma + 1, odd.
        let n = if self.approximate {
            17
        } else {
            ((self.sigma * 8.0 + 1.0).round_ties_even() as usize) | 1
        };
        // The fields are blurred stacked as one (fields · height) × width image.
        let fields = blur(&noise, noise.len() / width, width, n, self.sigma);
        let alpha = self.alpha as f32;
        let plane = height * width;
        let dy = if self.same { 0 } else { plane };
        let map = |offset: usize, coord: &dyn Fn(usize) -> usize| -> Vec<f32> {
            (0..plane)
                .map(|i| (coord(i) as f64 + f64::from(fields[offset + i] * alpha)) as f32)
                .collect()
        };
        [map(0, &|i| i % width), map(dy, &|i| i / width)]
    }
}

impl NumpyOp for ElasticTransform {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let (h, w) = self.warp.size(inputs)?;
        let Some(noise) = self.noise(h, w, ctx.seed) else {
            return self.warp.keep(inputs);
        };
        let [mx, my] = self.maps(noise, h as usize, w as usize);
        let device = inputs[0].device();
        let as_tensor = |m: &[f32]| -> Result<Tensor> {
            let v: Vec<f64> = m.iter().map(|&v| f64::from(v)).collect();
            Ok(Tensor::f_from_slice(&v)?
                .f_view([h, w])?
                .f_to_device(device)?)
        };
        let (src_x, src_y) = (as_tensor(&mx)?, as_tensor(&my)?);
        let g = Geometry::Remap(SourceMap {
            height: h,
            width: w,
            map_x: mx,
            map_y: my,
            direct: self.direct,
        });
        self.warp.warp(inputs, &src_x, &src_y, &g)
    }
}
