//! `ThinPlateSpline` after albumentations 2.0.8: a grid of control points (`tps.rs`) is
//! moved by normal offsets of a standard deviation drawn from `scale_range / 10`, the thin
//! plate spline through the moved points gives every pixel a source point, and every input
//! is resampled through those float32 maps like `cv2.remap` (masks with their own
//! interpolation); boxes and keypoints follow the same maps. The offsets come from our
//! seeded generator, so maps match albumentations' for the same offsets only.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{
    inventory, CreateContext, Error, Field, FromConfig, NumpyOp, Registration, Result, StepContext,
};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::color::uniform;
use crate::distort::{direct_method, MapWarp, TargetConfig};
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::rng;
use crate::remap_targets::SourceMap;
use crate::targets::TARGET_FIELDS;
use crate::tps::{control_points, solvable, tps_maps};
use crate::{BorderMode, Interpolation};

/// `ThinPlateSpline` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ThinPlateSplineConfig {
    /// Range `[lo, hi]` within [0, 1] of the offsets' strength: each call draws `s` from it
    /// and moves control points by `N(0, s / 10)` of the size (default [0.2, 0.4]).
    #[serde(default = "scales")]
    pub scale_range: [f64; 2],
    /// Control points per side, 2..=20: an `n × n` grid, or the corners and the centre for
    /// 2 (default 4).
    #[serde(default = "four")]
    pub num_control_points: i64,
    /// Image sampling: `"bilinear"` (default) or `"nearest"`.
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
    /// Mask sampling: `"nearest"` (default) or `"bilinear"`.
    #[serde(default = "nearest")]
    pub mask_interpolation: Interpolation,
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

fn scales() -> [f64; 2] {
    [0.2, 0.4]
}
fn four() -> i64 {
    4
}
fn bilinear() -> Interpolation {
    Interpolation::Bilinear
}
fn nearest() -> Interpolation {
    Interpolation::Nearest
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

/// Random control-point offsets and the spline warp through them.
pub struct ThinPlateSpline {
    warp: MapWarp,
    scales: [f64; 2],
    points: Vec<[f64; 2]>,
    direct: bool,
}

impl FromConfig for ThinPlateSpline {
    type Config = ThinPlateSplineConfig;
    fn from_config(c: ThinPlateSplineConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let [lo, hi] = c.scale_range;
        if !(0.0 <= lo && lo <= hi && hi <= 1.0) {
            return Err(Error::config(
                "scale_range",
                format!("needs 0 <= lo <= hi <= 1, got [{lo}, {hi}]"),
            ));
        }
        let n = c.num_control_points;
        // Every pixel sums over all n² control points, and the system has n² + 3 unknowns:
        // 20 per side (400 points) is already slow on large images.
        if !(2..=20).contains(&n) || !solvable(n as usize) {
            return Err(Error::config(
                "num_control_points",
                format!("needs 2..=20 (a system OpenCV's LU can solve), got {n}"),
            ));
        }
        let warp = MapWarp::new(
            ctx,
            "ThinPlateSpline",
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
        )?
        .mask_interpolation(c.mask_interpolation)?;
        Ok(ThinPlateSpline {
            warp,
            scales: c.scale_range,
            points: control_points(n as usize),
            direct: direct_method(&c.keypoint_remapping_method)?,
        })
    }
}

impl ThinPlateSpline {
    /// The control-point offsets `(dx, dy)` of the call seeded `seed`, in units of the size,
    /// drawn after their standard deviation; `None` when the `p` draw says skip.
    pub(crate) fn offsets(&self, seed: u64) -> Option<Vec<[f64; 2]>> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.warp.p {
            return None;
        }
        let scale = uniform(&mut rng, self.scales) / 10.0;
        let draws = self.points.iter().map(|_| {
            // Box-Muller: two independent normals from two uniforms in (0, 1].
            let (u1, u2) = (1.0 - rng.random::<f64>(), rng.random::<f64>());
            let r = (-2.0 * u1.ln()).sqrt();
            let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
            [scale * r * c, scale * r * s]
        });
        Some(draws.collect())
    }

    /// The float32 `(map_x, map_y)`, row-major `H × W`, of `offsets`.
    pub(crate) fn maps(&self, offsets: &[[f64; 2]], height: usize, width: usize) -> [Vec<f32>; 2] {
        let dst: Vec<[f64; 2]> = self
            .points
            .iter()
            .zip(offsets)
            .map(|(p, o)| [p[0] + o[0], p[1] + o[1]])
            .collect();
        tps_maps(&self.points, &dst, height, width)
    }
}

impl NumpyOp for ThinPlateSpline {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let (h, w) = self.warp.size(inputs)?;
        let Some(offsets) = self.offsets(ctx.seed) else {
            return self.warp.keep(inputs);
        };
        let [mx, my] = self.maps(&offsets, h as usize, w as usize);
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

inventory::submit! {
    Registration::numpy_op::<ThinPlateSpline>("ThinPlateSpline", "Control points moved at random, a thin plate spline through them (cv2.remap; image and masks alike)")
    .fields(&[
        Field::optional("scale_range", "[float, float]", "[0.2, 0.4]", "Offset strength range in [0, 1]: offsets are N(0, s / 10) of the size"),
        Field::optional("num_control_points", "integer", "4", "Control points per side, 2..=20"),
        Field::optional("interpolation", "\"bilinear\" | \"nearest\"", "\"bilinear\"", "Sampling of images"),
        Field::optional("mask_interpolation", "\"nearest\" | \"bilinear\"", "\"nearest\"", "Sampling of masks"),
        Field::optional("border_mode", "\"constant\" | \"reflect_101\" | \"reflect\" | \"replicate\"", "\"constant\"", "How points from outside the image are filled"),
        Field::optional("fill", "float", "0", "Image fill for border_mode = \"constant\" (alias value)"),
        Field::optional("fill_mask", "float", "0", "Mask fill for border_mode = \"constant\" (alias mask_value)"),
        Field::optional("masks", "[string]", "[]", "Inputs that are label masks (mask_interpolation, mask fill)"),
        Field::optional("p", "float", "0.5", "Probability of transforming a sample, in [0, 1]"),
        Field::optional("keypoint_remapping_method", "\"mask\" | \"direct\"", "\"mask\"", "How keypoints follow the map (albumentations' option)"),
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
