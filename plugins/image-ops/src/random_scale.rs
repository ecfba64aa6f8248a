//! `RandomScale`: every input rescaled by one random factor, so the output size differs
//! from sample to sample.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{mask_flags, paired_keys, probability, resize, rng, same_size, Interpolation};
use crate::targets::Targets;
use crate::Limit;

/// `RandomScale` configuration (FastEstimator's and albumentations' names).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RandomScaleConfig {
    /// Range of the factor minus 1: `l` means `[-l, l]`, `[lo, hi]` scales by `1 + lo` to
    /// `1 + hi` (default 0.1).
    #[serde(default = "tenth")]
    pub scale_limit: Limit,
    /// Sampling of images (default `"bilinear"`); masks always use nearest.
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
    /// Inputs that are label masks (nearest-neighbour sampling).
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability of rescaling a sample (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
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

fn tenth() -> Limit {
    Limit::Symmetric(0.1)
}

fn bilinear() -> Interpolation {
    Interpolation::Bilinear
}

fn half() -> f64 {
    0.5
}

/// Rescales by a factor drawn uniformly from `1 + scale_limit`.
pub struct RandomScale {
    keys: Vec<String>,
    targets: Targets,
    masks: Vec<bool>,
    range: [f64; 2],
    interpolation: Interpolation,
    p: f64,
}

impl FromConfig for RandomScale {
    type Config = RandomScaleConfig;
    fn from_config(c: RandomScaleConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let [lo, hi] = match c.scale_limit {
            Limit::Symmetric(l) => [-l, l],
            Limit::Range(r) => r,
        };
        if !(-1.0 < lo && lo <= hi && hi.is_finite()) {
            return Err(Error::config(
                "scale_limit",
                format!("needs -1 < lo <= hi (factors 1 + lo > 0), got [{lo}, {hi}]"),
            ));
        }
        let keys = paired_keys(ctx)?;
        Ok(RandomScale {
            masks: mask_flags(&keys, &c.masks)?,
            targets: Targets::new(
                &keys,
                &c.bboxes,
                c.bbox_params,
                &c.keypoints,
                c.keypoint_params,
            )?,
            keys,
            range: [1.0 + lo, 1.0 + hi],
            interpolation: c.interpolation,
            p: probability("p", c.p)?,
        })
    }
}

impl RandomScale {
    /// The factor of the call seeded `seed`; `None` when the `p` draw says skip.
    pub(crate) fn scale(&self, seed: u64) -> Option<f64> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.p {
            return None;
        }
        let [lo, hi] = self.range;
        Some(lo + (hi - lo) * rng.random::<f64>())
    }
}

/// albumentations' `scale`: each side `int(side · s)` (truncated), here at least 1 where
/// OpenCV would refuse an empty image.
pub(crate) fn scaled_size((h, w): (i64, i64), s: f64) -> (i64, i64) {
    let side = |n: i64| ((n as f64 * s) as i64).max(1);
    (side(h), side(w))
}

impl NumpyOp for RandomScale {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let layouts = same_size(&pixels.keys, &pixels.inputs)?;
        let size = (layouts[0].height, layouts[0].width);
        let s = self.scale(ctx.seed).unwrap_or(1.0);
        let (h, w) = scaled_size(size, s);
        let out = pixels
            .inputs
            .iter()
            .zip(&layouts)
            .zip(pixels.index.iter().map(|&i| self.masks[i]))
            .map(|((x, layout), mask)| {
                let interpolation = if mask {
                    Interpolation::Nearest
                } else {
                    self.interpolation
                };
                resize(layout, x, h, w, interpolation)
            })
            .collect::<Result<Vec<_>>>()?;
        // Boxes follow the rounded size (albumentations' normalised boxes do not change);
        // keypoints the drawn factor itself, as its `keypoints_scale`.
        let g = Geometry::Resize {
            out: (h, w),
            point_scale: (s, s),
        };
        self.targets.merge(&self.keys, inputs, out, &g, size)
    }
}
