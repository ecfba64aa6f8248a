//! `LongestMaxSize` and `SmallestMaxSize`: aspect-preserving rescales to a side length.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, FromConfig, NumpyOp, Result, StepContext};
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{mask_flags, paired_keys, positive, resize, same_size, Interpolation};
use crate::targets::Targets;

/// `LongestMaxSize` / `SmallestMaxSize` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct MaxSizeConfig {
    /// The side length the longest (smallest) side is scaled to (default 1024).
    #[serde(default = "default_size")]
    pub max_size: i64,
    /// Sampling of images (default `"bilinear"`); masks always use nearest.
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
    /// Inputs that are label masks (nearest-neighbour sampling).
    #[serde(default)]
    pub masks: Vec<String>,
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

fn default_size() -> i64 {
    1024
}

fn bilinear() -> Interpolation {
    Interpolation::Bilinear
}

/// The shared rescale; `longest` picks which side reaches `max_size`.
pub struct MaxSize {
    keys: Vec<String>,
    targets: Targets,
    masks: Vec<bool>,
    max_size: i64,
    interpolation: Interpolation,
    longest: bool,
}

impl MaxSize {
    fn new(config: MaxSizeConfig, ctx: &CreateContext<'_>, longest: bool) -> Result<Self> {
        let keys = paired_keys(ctx)?;
        Ok(MaxSize {
            targets: Targets::new(
                &keys,
                &config.bboxes,
                config.bbox_params,
                &config.keypoints,
                config.keypoint_params,
            )?,
            masks: mask_flags(&keys, &config.masks)?,
            keys,
            max_size: positive("max_size", config.max_size)?,
            interpolation: config.interpolation,
            longest,
        })
    }

    /// The output size of an `height × width` input: albumentations' `round(side * scale)`
    /// (Python rounds half to even), at least 1.
    pub(crate) fn output_size(&self, height: i64, width: i64) -> (i64, i64) {
        let scale = self.scale(height, width);
        let scaled = |n: i64| ((n as f64 * scale).round_ties_even() as i64).max(1);
        (scaled(height), scaled(width))
    }

    /// albumentations' `scale`: `max_size` over the longest (smallest) side, unrounded.
    fn scale(&self, height: i64, width: i64) -> f64 {
        let side = if self.longest {
            height.max(width)
        } else {
            height.min(width)
        };
        self.max_size as f64 / side as f64
    }
}

impl NumpyOp for MaxSize {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let layouts = same_size(&pixels.keys, &pixels.inputs)?;
        let size = (layouts[0].height, layouts[0].width);
        let (h, w) = self.output_size(size.0, size.1);
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
        let scale = self.scale(size.0, size.1);
        let g = Geometry::Resize {
            out: (h, w),
            point_scale: (scale, scale),
        };
        self.targets.merge(&self.keys, inputs, out, &g, size)
    }
}

/// Rescales so the longest side is `max_size`, keeping the aspect ratio.
pub struct LongestMaxSize(pub(crate) MaxSize);

/// Rescales so the smallest side is `max_size`, keeping the aspect ratio.
pub struct SmallestMaxSize(pub(crate) MaxSize);

impl FromConfig for LongestMaxSize {
    type Config = MaxSizeConfig;
    fn from_config(config: MaxSizeConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        MaxSize::new(config, ctx, true).map(LongestMaxSize)
    }
}

impl FromConfig for SmallestMaxSize {
    type Config = MaxSizeConfig;
    fn from_config(config: MaxSizeConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        MaxSize::new(config, ctx, false).map(SmallestMaxSize)
    }
}

impl NumpyOp for LongestMaxSize {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.0.forward(inputs, ctx)
    }
}

impl NumpyOp for SmallestMaxSize {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.0.forward(inputs, ctx)
    }
}
