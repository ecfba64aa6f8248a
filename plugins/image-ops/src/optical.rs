//! `OpticalDistortion` after albumentations 2.0.8: barrel / pincushion distortion by one
//! drawn coefficient `k`. `"camera"` builds `cv2.initUndistortRectifyMap`'s maps for the
//! camera matrix `[[W, 0, W/2], [0, H, H/2]]` and distortion `(k, k, 0, 0, 0)` (the new
//! camera centred at `((W-1)/2, (H-1)/2)`, as OpenCV defaults); `"fisheye"` scales each
//! pixel's radius from the centre by `1 + k · (r / r_max)²` in float32. Every input is
//! resampled through the float32 maps like `cv2.remap` (masks nearest).

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::color::{range, uniform};
use crate::distort::{direct_method, MapWarp, TargetConfig};
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::rng;
use crate::remap_targets::SourceMap;
use crate::{BorderMode, Interpolation, Limit};

/// `OpticalDistortion` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct OpticalDistortionConfig {
    /// Range of `k`: `l` means `[-l, l]` (default 0.05); negative is pincushion in
    /// `"camera"` mode.
    #[serde(default = "limit")]
    pub distort_limit: Limit,
    /// `"camera"` (default) or `"fisheye"`: albumentations' `mode`, renamed because the
    /// pipeline reads an op's `mode` as the execution modes it runs in.
    #[serde(default = "camera")]
    pub distortion_mode: String,
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

fn limit() -> Limit {
    Limit::Symmetric(0.05)
}
fn camera() -> String {
    "camera".to_owned()
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

/// A random lens distortion and the warp through it.
pub struct OpticalDistortion {
    warp: MapWarp,
    limit: [f64; 2],
    fisheye: bool,
    direct: bool,
}

impl FromConfig for OpticalDistortion {
    type Config = OpticalDistortionConfig;
    fn from_config(c: OpticalDistortionConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let fisheye = match c.distortion_mode.as_str() {
            "camera" => false,
            "fisheye" => true,
            other => {
                return Err(Error::config(
                    "distortion_mode",
                    format!("expected \"camera\" or \"fisheye\", got {other:?}"),
                ))
            }
        };
        let warp = MapWarp::new(
            ctx,
            "OpticalDistortion",
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
        Ok(OpticalDistortion {
            warp,
            limit: range("distort_limit", c.distort_limit)?,
            fisheye,
            direct: direct_method(&c.keypoint_remapping_method)?,
        })
    }
}

impl OpticalDistortion {
    /// The `k` of the call seeded `seed`; `None` when the `p` draw says skip.
    pub(crate) fn k(&self, seed: u64) -> Option<f64> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.warp.p {
            return None;
        }
        Some(uniform(&mut rng, self.limit))
    }

    /// The float32 `(map_x, map_y)`, row-major `H × W`, of `k`.
    pub(crate) fn maps(&self, k: f64, height: usize, width: usize) -> [Vec<f32>; 2] {
        if self.fisheye {
            fisheye_maps(k, height, width)
        } else {
            camera_maps(k, height, width)
        }
    }
}

/// `cv2.initUndistortRectifyMap` for albumentations' camera matrix and `(k, k, 0, 0, 0)`.
fn camera_maps(k: f64, height: usize, width: usize) -> [Vec<f32>; 2] {
    let (fx, fy) = (width as f64, height as f64);
    // The camera matrix is float32: W / 2 and H / 2 are exact; k is rounded to float32.
    let (u0, v0) = (fx / 2.0, fy / 2.0);
    let k = f64::from(k as f32);
    // The new camera matrix's centre: getDefaultNewCameraMatrix(centerPrincipalPoint).
    let (cx, cy) = ((fx - 1.0) * 0.5, (fy - 1.0) * 0.5);
    let (mut map_x, mut map_y) = (Vec::new(), Vec::new());
    for i in 0..height {
        let y = (i as f64 - cy) / fy;
        for j in 0..width {
            let x = (j as f64 - cx) / fx;
            let r2 = x * x + y * y;
            let kr = 1.0 + (k * r2 + k) * r2;
            map_x.push((fx * (x * kr) + u0) as f32);
            map_y.push((fy * (y * kr) + v0) as f32);
        }
    }
    [map_x, map_y]
}

/// albumentations' `get_fisheye_distortion_maps`, in float32 as numpy runs it.
fn fisheye_maps(k: f64, height: usize, width: usize) -> [Vec<f32>; 2] {
    let (cx, cy) = (width as f64 / 2.0, height as f64 / 2.0);
    let max_radius =
        (cx.max(width as f64 - cx).powi(2) + cy.max(height as f64 - cy).powi(2)).sqrt();
    let (cx32, cy32, rmax, k32) = (cx as f32, cy as f32, max_radius as f32, k as f32);
    let (mut map_x, mut map_y) = (Vec::new(), Vec::new());
    for i in 0..height {
        let y = i as f32 - cy32;
        for j in 0..width {
            let x = j as f32 - cx32;
            let r = (x * x + y * y).sqrt();
            let theta = y.atan2(x);
            let norm = r / rmax;
            let r_dist = r * (1.0 + k32 * norm * norm);
            map_x.push(r_dist * theta.cos() + cx32);
            map_y.push(r_dist * theta.sin() + cy32);
        }
    }
    [map_x, map_y]
}

impl NumpyOp for OpticalDistortion {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let (h, w) = self.warp.size(inputs)?;
        let Some(k) = self.k(ctx.seed) else {
            return self.warp.keep(inputs);
        };
        let [mx, my] = self.maps(k, h as usize, w as usize);
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
