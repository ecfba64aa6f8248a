//! `CoarseDropout` (Cutout): rectangles of every input set to a constant.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::dropout_targets::Holes;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{mask_flags, paired_keys, probability, rng, same_size};
use crate::targets::Targets;

/// `CoarseDropout` configuration (FastEstimator's names; sizes in pixels).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct CoarseDropoutConfig {
    /// Most holes per image (default 8).
    #[serde(default = "eight")]
    pub max_holes: i64,
    /// Most rows of a hole (default 8).
    #[serde(default = "eight")]
    pub max_height: i64,
    /// Most columns of a hole (default 8).
    #[serde(default = "eight")]
    pub max_width: i64,
    /// Fewest holes (default `max_holes`).
    pub min_holes: Option<i64>,
    /// Fewest rows of a hole (default `max_height`).
    pub min_height: Option<i64>,
    /// Fewest columns of a hole (default `max_width`).
    pub min_width: Option<i64>,
    /// What image holes are filled with (default 0).
    #[serde(default)]
    pub fill_value: f64,
    /// What holes of the inputs in `masks` are filled with; unset leaves masks untouched.
    pub mask_fill_value: Option<f64>,
    /// Inputs that are label masks.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability of cutting holes in a sample (default 0.5).
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

fn eight() -> i64 {
    8
}

fn half() -> f64 {
    0.5
}

/// Cuts a random number of random-size holes at random positions, the same holes in every
/// input.
pub struct CoarseDropout {
    keys: Vec<String>,
    targets: Targets,
    masks: Vec<bool>,
    holes: [i64; 2],
    heights: [i64; 2],
    widths: [i64; 2],
    fill: f64,
    mask_fill: Option<f64>,
    p: f64,
}

fn range(min: Option<i64>, max: i64, field: &str) -> Result<[i64; 2]> {
    let min = min.unwrap_or(max);
    if 1 <= min && min <= max {
        Ok([min, max])
    } else {
        Err(Error::config(
            field,
            format!("needs 1 <= min <= max, got [{min}, {max}]"),
        ))
    }
}

impl FromConfig for CoarseDropout {
    type Config = CoarseDropoutConfig;
    fn from_config(c: CoarseDropoutConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let keys = paired_keys(ctx)?;
        Ok(CoarseDropout {
            masks: mask_flags(&keys, &c.masks)?,
            targets: Targets::new(
                &keys,
                &c.bboxes,
                c.bbox_params,
                &c.keypoints,
                c.keypoint_params,
            )?,
            keys,
            holes: range(c.min_holes, c.max_holes, "max_holes")?,
            heights: range(c.min_height, c.max_height, "max_height")?,
            widths: range(c.min_width, c.max_width, "max_width")?,
            fill: c.fill_value,
            mask_fill: c.mask_fill_value,
            p: probability("p", c.p)?,
        })
    }
}

impl CoarseDropout {
    /// The holes `(x_min, y_min, x_max, y_max)` of the call seeded `seed` in an
    /// `height × width` image; none when the `p` draw says so. Holes taller or wider than
    /// the image are clipped to it.
    pub(crate) fn holes(&self, height: i64, width: i64, seed: u64) -> Vec<[i64; 4]> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.p {
            return Vec::new();
        }
        let n = rng.random_range(self.holes[0]..=self.holes[1]);
        (0..n)
            .map(|_| {
                let h = rng
                    .random_range(self.heights[0]..=self.heights[1])
                    .min(height);
                let w = rng.random_range(self.widths[0]..=self.widths[1]).min(width);
                let y = rng.random_range(0..=height - h);
                let x = rng.random_range(0..=width - w);
                [x, y, x + w, y + h]
            })
            .collect()
    }
}

impl NumpyOp for CoarseDropout {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let layouts = same_size(&pixels.keys, &pixels.inputs)?;
        let size = (layouts[0].height, layouts[0].width);
        let holes = self.holes(size.0, size.1, ctx.seed);
        let out = pixels
            .inputs
            .iter()
            .zip(&layouts)
            .zip(pixels.index.iter().map(|&i| self.masks[i]))
            .map(|((x, layout), mask)| {
                let fill = if mask {
                    self.mask_fill
                } else {
                    Some(self.fill)
                };
                let Some(fill) = fill.filter(|_| !holes.is_empty()) else {
                    return Ok(x.shallow_clone());
                };
                let mut out = x.f_zeros_like()?;
                out.f_copy_(x)?;
                for &[x0, y0, x1, y1] in &holes {
                    // fill_ writes through the narrowed view into `out`.
                    let _hole = out
                        .f_narrow(layout.h_axis, y0, y1 - y0)?
                        .f_narrow(layout.w_axis(), x0, x1 - x0)?
                        .f_fill_(fill)?;
                }
                Ok(out)
            })
            .collect::<Result<Vec<_>>>()?;
        let cut = (!holes.is_empty()).then(|| Holes::rects(size.0, size.1, &holes));
        self.targets
            .merge_holes(&self.keys, inputs, out, cut.as_ref(), size)
    }
}
