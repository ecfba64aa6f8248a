//! `Crop`, `RandomResizedCrop` and `RandomSizedCrop`: a window of every input, the random
//! ones then resized to a fixed `height × width`.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{paired_keys, rng, Interpolation, Spatial};
use crate::targets::Targets;
use crate::window::{cut, place, Coords, Output};

/// `Crop` configuration: the window's corners in pixels.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct FixedCropConfig {
    /// Left column, included (default 0).
    #[serde(default)]
    pub x_min: i64,
    /// Top row, included (default 0).
    #[serde(default)]
    pub y_min: i64,
    /// Right column, excluded (default 1024).
    #[serde(default = "k")]
    pub x_max: i64,
    /// Bottom row, excluded (default 1024).
    #[serde(default = "k")]
    pub y_max: i64,
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

fn k() -> i64 {
    1024
}

/// Cuts the fixed window `[y_min, y_max) × [x_min, x_max)` out of every input.
pub struct Crop {
    keys: Vec<String>,
    coords: Coords,
    targets: Targets,
}

impl FromConfig for Crop {
    type Config = FixedCropConfig;
    fn from_config(c: FixedCropConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        for (field, lo, hi) in [("x_max", c.x_min, c.x_max), ("y_max", c.y_min, c.y_max)] {
            if lo < 0 || hi <= lo {
                return Err(Error::config(
                    field,
                    format!("needs 0 <= min < max, got [{lo}, {hi})"),
                ));
            }
        }
        let keys = paired_keys(ctx)?;
        Ok(Crop {
            targets: Targets::new(
                &keys,
                &c.bboxes,
                c.bbox_params,
                &c.keypoints,
                c.keypoint_params,
            )?,
            keys,
            coords: [c.x_min, c.y_min, c.x_max, c.y_max],
        })
    }
}

impl Crop {
    fn crop(&self, inputs: &[&Tensor], batched: bool) -> Result<Vec<Tensor>> {
        if batched && !self.targets.all_pixels() {
            return Err(Error::unsupported(
                "boxes and keypoints are per-sample: run Crop per sample, not batched",
            ));
        }
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let [x0, y0, x1, y1] = self.coords;
        let mut size = (0, 0);
        let mut out = Vec::with_capacity(pixels.inputs.len());
        for (key, x) in pixels.keys.iter().zip(&pixels.inputs) {
            let layout = Spatial::of(key, x, batched)?;
            if x1 > layout.width || y1 > layout.height {
                return Err(Error::msg(format!(
                    "crop to x_max {x1}, y_max {y1} is outside input `{key}` ({}x{})",
                    layout.height, layout.width
                )));
            }
            if out.is_empty() {
                size = (layout.height, layout.width);
            }
            out.push(cut(x, &layout, self.coords)?);
        }
        let g = Geometry::Crop {
            window: self.coords,
            out: (y1 - y0, x1 - x0),
        };
        self.targets.merge(&self.keys, inputs, out, &g, size)
    }
}

impl NumpyOp for Crop {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.crop(inputs, false)
    }
    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.crop(inputs, true)
    }
    fn batchable(&self) -> bool {
        self.targets.all_pixels()
    }
}

/// Python's `random.uniform(a, b)`.
fn uniform(rng: &mut ChaCha8Rng, a: f64, b: f64) -> f64 {
    a + (b - a) * rng.random::<f64>()
}

fn bilinear() -> Interpolation {
    Interpolation::Bilinear
}

/// `RandomResizedCrop` configuration (FastEstimator's names).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RandomResizedCropConfig {
    /// Output height.
    pub height: i64,
    /// Output width.
    pub width: i64,
    /// Range of the window's area as a fraction of the image's (default [0.08, 1]).
    #[serde(default = "default_scale")]
    pub scale: [f64; 2],
    /// Range of the window's width / height (default [3/4, 4/3]), sampled log-uniformly.
    #[serde(default = "default_ratio")]
    pub ratio: [f64; 2],
    /// Sampling of images (default `"bilinear"`); masks always use nearest.
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
    /// Inputs that are label masks.
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

fn default_scale() -> [f64; 2] {
    [0.08, 1.0]
}

fn default_ratio() -> [f64; 2] {
    [0.75, 4.0 / 3.0]
}

/// Inception-style crop: a window of random area and aspect ratio, resized to
/// `height × width`; after 10 failed draws, the central window of the closest ratio.
pub struct RandomResizedCrop {
    out: Output,
    scale: [f64; 2],
    ratio: [f64; 2],
}

impl FromConfig for RandomResizedCrop {
    type Config = RandomResizedCropConfig;
    fn from_config(c: RandomResizedCropConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        if !(0.0 < c.scale[0] && c.scale[0] <= c.scale[1]) {
            return Err(Error::config(
                "scale",
                format!("needs 0 < lo <= hi, got {:?}", c.scale),
            ));
        }
        if !(0.0 < c.ratio[0] && c.ratio[0] <= c.ratio[1]) {
            return Err(Error::config(
                "ratio",
                format!("needs 0 < lo <= hi, got {:?}", c.ratio),
            ));
        }
        Ok(RandomResizedCrop {
            out: Output::new(
                ctx,
                &c.masks,
                |keys| {
                    Targets::new(
                        keys,
                        &c.bboxes,
                        c.bbox_params,
                        &c.keypoints,
                        c.keypoint_params,
                    )
                },
                (c.height, c.width),
                c.interpolation,
            )?,
            scale: c.scale,
            ratio: c.ratio,
        })
    }
}

impl RandomResizedCrop {
    /// The window the call seeded `seed` cuts from an `height × width` image.
    pub(crate) fn coords(&self, height: i64, width: i64, seed: u64) -> Coords {
        let mut rng = rng(seed);
        let area = (height * width) as f64;
        let (log_lo, log_hi) = (self.ratio[0].ln(), self.ratio[1].ln());
        for _ in 0..10 {
            let target = uniform(&mut rng, self.scale[0] * area, self.scale[1] * area);
            let aspect = uniform(&mut rng, log_lo, log_hi).exp();
            let w = (target * aspect).sqrt().round_ties_even() as i64;
            let h = (target / aspect).sqrt().round_ties_even() as i64;
            if 0 < w && w <= width && 0 < h && h <= height {
                let (h_start, w_start) = (rng.random::<f64>(), rng.random::<f64>());
                return place(height, width, (h, w), h_start, w_start);
            }
        }
        let in_ratio = width as f64 / height as f64;
        let (h, w) = if in_ratio < self.ratio[0] {
            (
                (width as f64 / self.ratio[0]).round_ties_even() as i64,
                width,
            )
        } else if in_ratio > self.ratio[1] {
            (
                height,
                (height as f64 * self.ratio[1]).round_ties_even() as i64,
            )
        } else {
            (height, width)
        };
        let (y0, x0) = ((height - h) / 2, (width - w) / 2);
        [x0, y0, x0 + w, y0 + h]
    }
}

impl NumpyOp for RandomResizedCrop {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.out
            .apply(inputs, |h, w| Ok(Some(self.coords(h, w, ctx.seed))))
    }
}

/// `RandomSizedCrop` configuration (FastEstimator's names).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RandomSizedCropConfig {
    /// Range `[lo, hi]` of the window height, both included.
    pub min_max_height: [i64; 2],
    /// Output height.
    pub height: i64,
    /// Output width.
    pub width: i64,
    /// Window width / height (default 1).
    #[serde(default = "one")]
    pub w2h_ratio: f64,
    /// Sampling of images (default `"bilinear"`); masks always use nearest.
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
    /// Inputs that are label masks.
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

fn one() -> f64 {
    1.0
}

/// A window of random height in `min_max_height` (width `height * w2h_ratio`) at a random
/// position, resized to `height × width`.
pub struct RandomSizedCrop {
    out: Output,
    min_max_height: [i64; 2],
    w2h_ratio: f64,
}

impl FromConfig for RandomSizedCrop {
    type Config = RandomSizedCropConfig;
    fn from_config(c: RandomSizedCropConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let [lo, hi] = c.min_max_height;
        if !(1 <= lo && lo <= hi) {
            return Err(Error::config(
                "min_max_height",
                format!("needs 1 <= lo <= hi, got [{lo}, {hi}]"),
            ));
        }
        if !(c.w2h_ratio > 0.0 && c.w2h_ratio.is_finite()) {
            return Err(Error::config(
                "w2h_ratio",
                format!("must be > 0, got {}", c.w2h_ratio),
            ));
        }
        Ok(RandomSizedCrop {
            out: Output::new(
                ctx,
                &c.masks,
                |keys| {
                    Targets::new(
                        keys,
                        &c.bboxes,
                        c.bbox_params,
                        &c.keypoints,
                        c.keypoint_params,
                    )
                },
                (c.height, c.width),
                c.interpolation,
            )?,
            min_max_height: c.min_max_height,
            w2h_ratio: c.w2h_ratio,
        })
    }
}

impl RandomSizedCrop {
    /// The window the call seeded `seed` cuts from an `height × width` image.
    /// A window larger than the image is clipped to it, as albumentations does.
    pub(crate) fn coords(&self, height: i64, width: i64, seed: u64) -> Coords {
        let mut rng = rng(seed);
        let h = rng.random_range(self.min_max_height[0]..=self.min_max_height[1]);
        let w = ((h as f64 * self.w2h_ratio) as i64).max(1);
        let (h_start, w_start) = (rng.random::<f64>(), rng.random::<f64>());
        let crop = (h.min(height), w.min(width));
        place(height, width, crop, h_start, w_start)
    }
}

impl NumpyOp for RandomSizedCrop {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.out
            .apply(inputs, |h, w| Ok(Some(self.coords(h, w, ctx.seed))))
    }
}
