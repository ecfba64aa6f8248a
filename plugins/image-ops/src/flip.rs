//! `HorizontalFlip`: left-right mirroring.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::flips::Move;
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{paired_keys, rng, Spatial};
use crate::targets::Targets;

/// `HorizontalFlip` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct HorizontalFlipConfig {
    /// Probability of flipping a sample, in [0, 1] (default 0.5). FastEstimator's bare
    /// `HorizontalFlip` always flips (`p = 1.0`); `Sometimes(HorizontalFlip(...))` is `p = 0.5`.
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

fn half() -> f64 {
    0.5
}

/// Mirrors every input left-right (the width axis) with probability `p`; one draw per call
/// decides for all inputs.
pub struct HorizontalFlip {
    keys: Vec<String>,
    p: f64,
    targets: Targets,
}

impl FromConfig for HorizontalFlip {
    type Config = HorizontalFlipConfig;
    fn from_config(config: HorizontalFlipConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        if !(0.0..=1.0).contains(&config.p) {
            return Err(Error::config(
                "p",
                format!("must be in [0, 1], got {}", config.p),
            ));
        }
        let keys = paired_keys(ctx)?;
        Ok(HorizontalFlip {
            targets: Targets::new(
                &keys,
                &config.bboxes,
                config.bbox_params,
                &config.keypoints,
                config.keypoint_params,
            )?,
            keys,
            p: config.p,
        })
    }
}

impl NumpyOp for HorizontalFlip {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let flip = rng(ctx.seed).random::<f64>() < self.p;
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        // Pixel inputs may differ in size (each is flipped on its own); boxes and keypoints
        // belong to the first.
        let layouts = pixels
            .keys
            .iter()
            .zip(&pixels.inputs)
            .map(|(key, x)| Spatial::of(key, x, false))
            .collect::<Result<Vec<_>>>()?;
        let out = pixels
            .inputs
            .iter()
            .zip(&layouts)
            .map(|(x, layout)| {
                if flip {
                    Ok(x.f_flip([layout.w_axis()])?)
                } else {
                    Ok(x.shallow_clone())
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let m = if flip { Move::Flip(1) } else { Move::Keep };
        let size = (layouts[0].height, layouts[0].width);
        self.targets
            .merge(&self.keys, inputs, out, &Geometry::Dihedral(m), size)
    }
}
