//! `Resize`: images to a fixed height and width.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{paired_keys, positive, resize, Interpolation, Spatial};
use crate::targets::Targets;

/// `Resize` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ResizeConfig {
    /// Output height in pixels.
    pub height: i64,
    /// Output width in pixels.
    pub width: i64,
    /// `"bilinear"` (default, alias `"linear"`), `"nearest"` or `"bicubic"` (alias `"cubic"`).
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
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

fn bilinear() -> Interpolation {
    Interpolation::Bilinear
}

/// Resizes every input to `(height, width)` (channels and dtype kept), with OpenCV's
/// pixel-centre convention and no antialiasing, as `cv2.resize` does.
pub struct Resize {
    keys: Vec<String>,
    targets: Targets,
    height: i64,
    width: i64,
    interpolation: Interpolation,
}

impl FromConfig for Resize {
    type Config = ResizeConfig;
    fn from_config(config: ResizeConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let keys = paired_keys(ctx)?;
        Ok(Resize {
            targets: Targets::new(
                &keys,
                &config.bboxes,
                config.bbox_params,
                &config.keypoints,
                config.keypoint_params,
            )?,
            keys,
            height: positive("height", config.height)?,
            width: positive("width", config.width)?,
            interpolation: config.interpolation,
        })
    }
}

impl Resize {
    fn resize_all(&self, inputs: &[&Tensor], batched: bool) -> Result<Vec<Tensor>> {
        if batched && !self.targets.all_pixels() {
            return Err(Error::unsupported(
                "boxes and keypoints are per-sample: run Resize per sample, not batched",
            ));
        }
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let mut size = (0, 0);
        let mut out = Vec::with_capacity(pixels.inputs.len());
        // Pixel inputs may differ in size (each is resized on its own); boxes and keypoints
        // belong to the first.
        for (key, x) in pixels.keys.iter().zip(&pixels.inputs) {
            let spatial = Spatial::of(key, x, batched)?;
            if out.is_empty() {
                size = (spatial.height, spatial.width);
            }
            out.push(resize(
                &spatial,
                x,
                self.height,
                self.width,
                self.interpolation,
            )?);
        }
        let g = Geometry::Resize {
            out: (self.height, self.width),
            point_scale: (
                self.width as f64 / size.1 as f64,
                self.height as f64 / size.0 as f64,
            ),
        };
        self.targets.merge(&self.keys, inputs, out, &g, size)
    }
}

impl NumpyOp for Resize {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.resize_all(inputs, false)
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.resize_all(inputs, true)
    }

    fn batchable(&self) -> bool {
        self.targets.all_pixels()
    }
}
