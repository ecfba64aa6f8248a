//! `RandomCrop` and `CenterCrop`: a `height × width` window of every input.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{check_count, paired_keys, positive, rng, Spatial};
use crate::targets::Targets;

/// `RandomCrop` / `CenterCrop` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct CropConfig {
    /// Height of the window in pixels; at most the image height.
    pub height: i64,
    /// Width of the window in pixels; at most the image width.
    pub width: i64,
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

/// The checked window size and input keys both crops share.
struct Window {
    keys: Vec<String>,
    height: i64,
    width: i64,
    targets: Targets,
}

impl Window {
    fn new(config: CropConfig, ctx: &CreateContext<'_>) -> Result<Window> {
        let keys = paired_keys(ctx)?;
        Ok(Window {
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
        })
    }

    /// The layout of the inputs, which must all have the same height and width, at least
    /// the window's.
    fn layouts(&self, keys: &[String], inputs: &[&Tensor], batched: bool) -> Result<Vec<Spatial>> {
        check_count(keys, inputs)?;
        let layouts = keys
            .iter()
            .zip(inputs)
            .map(|(key, x)| Spatial::of(key, x, batched))
            .collect::<Result<Vec<_>>>()?;
        let first = layouts[0];
        for (key, layout) in keys.iter().zip(&layouts) {
            if (layout.height, layout.width) != (first.height, first.width) {
                return Err(Error::msg(format!(
                    "input `{key}` is {}x{} but `{}` is {}x{}: inputs cropped together must have the same size",
                    layout.height, layout.width, keys[0], first.height, first.width
                )));
            }
        }
        if self.height > first.height || self.width > first.width {
            return Err(Error::msg(format!(
                "crop {}x{} is larger than input `{}` ({}x{})",
                self.height, self.width, keys[0], first.height, first.width
            )));
        }
        Ok(layouts)
    }

    /// Cuts the window whose top-left corner `(top, left)` `place` picks for the inputs'
    /// `(height, width)` out of every input; boxes and keypoints follow.
    fn crop(
        &self,
        inputs: &[&Tensor],
        batched: bool,
        place: impl FnOnce(i64, i64) -> (i64, i64),
    ) -> Result<Vec<Tensor>> {
        if batched && !self.targets.all_pixels() {
            return Err(Error::unsupported(
                "boxes and keypoints are per-sample: run the crop per sample, not batched",
            ));
        }
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let layouts = self.layouts(&pixels.keys, &pixels.inputs, batched)?;
        let size = (layouts[0].height, layouts[0].width);
        let (top, left) = place(size.0, size.1);
        let out = pixels
            .inputs
            .iter()
            .zip(&layouts)
            .map(|(x, layout)| {
                Ok(x.f_narrow(layout.h_axis, top, self.height)?
                    .f_narrow(layout.w_axis(), left, self.width)?
                    .f_contiguous()?)
            })
            .collect::<Result<Vec<_>>>()?;
        let g = Geometry::Crop {
            window: [left, top, left + self.width, top + self.height],
            out: (self.height, self.width),
        };
        self.targets.merge(&self.keys, inputs, out, &g, size)
    }
}

/// Crops a `height × width` window at a uniformly random position (the same for every
/// input of the call).
pub struct RandomCrop(Window);

impl FromConfig for RandomCrop {
    type Config = CropConfig;
    fn from_config(config: CropConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        Window::new(config, ctx).map(RandomCrop)
    }
}

impl RandomCrop {
    /// `(top, left)` of the window the call seeded `seed` cuts from an `height × width` image.
    pub(crate) fn place(&self, height: i64, width: i64, seed: u64) -> (i64, i64) {
        let mut rng = rng(seed);
        let top = rng.random_range(0..=height - self.0.height);
        let left = rng.random_range(0..=width - self.0.width);
        (top, left)
    }
}

impl NumpyOp for RandomCrop {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.0.crop(inputs, false, |height, width| {
            self.place(height, width, ctx.seed)
        })
    }
}

/// Crops the central `height × width` window; when the margin is odd the extra pixel is
/// left on the bottom / right, as albumentations does.
pub struct CenterCrop(Window);

impl FromConfig for CenterCrop {
    type Config = CropConfig;
    fn from_config(config: CropConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        Window::new(config, ctx).map(CenterCrop)
    }
}

impl CenterCrop {
    fn crop(&self, inputs: &[&Tensor], batched: bool) -> Result<Vec<Tensor>> {
        let window = &self.0;
        window.crop(inputs, batched, |height, width| {
            ((height - window.height) / 2, (width - window.width) / 2)
        })
    }
}

impl NumpyOp for CenterCrop {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.crop(inputs, false)
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.crop(inputs, true)
    }

    fn batchable(&self) -> bool {
        self.0.targets.all_pixels()
    }
}
