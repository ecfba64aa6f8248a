//! `RandomCropFromBorders`: a random amount cut off each side, so the output size differs
//! from sample to sample.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{paired_keys, probability, rng};
use crate::targets::Targets;
use crate::window::crop_with_targets;

/// `RandomCropFromBorders` configuration (FastEstimator's and albumentations' names).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RandomCropFromBordersConfig {
    /// Most of the width cut from the left, as a fraction (default 0.1).
    #[serde(default = "tenth")]
    pub crop_left: f64,
    /// Most of the width cut from the right, as a fraction (default 0.1).
    #[serde(default = "tenth")]
    pub crop_right: f64,
    /// Most of the height cut from the top, as a fraction (default 0.1).
    #[serde(default = "tenth")]
    pub crop_top: f64,
    /// Most of the height cut from the bottom, as a fraction (default 0.1).
    #[serde(default = "tenth")]
    pub crop_bottom: f64,
    /// Probability of cropping a sample (default 1, albumentations' default here).
    #[serde(default = "one")]
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

fn tenth() -> f64 {
    0.1
}

fn one() -> f64 {
    1.0
}

/// Cuts up to `crop_left · W` columns from the left (and so on for each side).
pub struct RandomCropFromBorders {
    keys: Vec<String>,
    targets: Targets,
    /// `[left, right, top, bottom]`.
    sides: [f64; 4],
    p: f64,
}

impl FromConfig for RandomCropFromBorders {
    type Config = RandomCropFromBordersConfig;
    fn from_config(c: RandomCropFromBordersConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let sides = [c.crop_left, c.crop_right, c.crop_top, c.crop_bottom];
        let names = ["crop_left", "crop_right", "crop_top", "crop_bottom"];
        for (name, v) in names.iter().zip(sides) {
            probability(name, v)?;
        }
        for (field, a, b) in [("crop_right", 0, 1), ("crop_bottom", 2, 3)] {
            if sides[a] + sides[b] > 1.0 {
                return Err(Error::config(
                    field,
                    format!(
                        "{} + {field} must be <= 1, got {}",
                        names[a],
                        sides[a] + sides[b]
                    ),
                ));
            }
        }
        let keys = paired_keys(ctx)?;
        Ok(RandomCropFromBorders {
            targets: Targets::new(
                &keys,
                &c.bboxes,
                c.bbox_params,
                &c.keypoints,
                c.keypoint_params,
            )?,
            keys,
            sides,
            p: probability("p", c.p)?,
        })
    }
}

impl RandomCropFromBorders {
    /// The window `[x_min, y_min, x_max, y_max)` of the call seeded `seed` in an
    /// `height × width` image, drawn as albumentations does (each end uniform, the far one
    /// at least one pixel past the near one); the whole image when the `p` draw says skip.
    pub(crate) fn window(&self, height: i64, width: i64, seed: u64) -> [i64; 4] {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.p {
            return [0, 0, width, height];
        }
        let [left, right, top, bottom] = self.sides;
        let mut span = |n: i64, near: f64, far: f64| {
            let lo = rng.random_range(0..=(near * n as f64) as i64);
            let hi = rng.random_range((lo + 1).max(((1.0 - far) * n as f64) as i64)..=n);
            (lo, hi)
        };
        let (x0, x1) = span(width, left, right);
        let (y0, y1) = span(height, top, bottom);
        [x0, y0, x1, y1]
    }
}

impl NumpyOp for RandomCropFromBorders {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        crop_with_targets(&self.targets, &self.keys, inputs, |(h, w)| {
            Ok(Some(self.window(h, w, ctx.seed)))
        })
    }
}
