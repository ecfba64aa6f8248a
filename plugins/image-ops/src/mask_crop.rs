//! `CropNonEmptyMaskIfExists`: a fixed-size window around a random labelled pixel of the
//! masks, or anywhere when they hold no label.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{paired_keys, positive, probability, rng};
use crate::targets::Targets;
use crate::window::crop_with_targets;

/// `CropNonEmptyMaskIfExists` configuration (FastEstimator's and albumentations' names).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct CropNonEmptyMaskIfExistsConfig {
    /// Height of the window in pixels; at most the image height.
    pub height: i64,
    /// Width of the window in pixels; at most the image width.
    pub width: i64,
    /// Mask values that count as background, besides 0 (default none).
    #[serde(default)]
    pub ignore_values: Vec<i64>,
    /// Channels of `(H, W, C)` masks that are not looked at (default none).
    #[serde(default)]
    pub ignore_channels: Vec<i64>,
    /// The inputs whose labelled pixels choose the window (FastEstimator's `mask_in` /
    /// `masks_in`); at least one. Every pixel input is cropped alike.
    #[serde(default)]
    pub masks: Vec<String>,
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

fn one() -> f64 {
    1.0
}

/// Crops `height × width` around a labelled mask pixel chosen uniformly.
pub struct CropNonEmptyMaskIfExists {
    keys: Vec<String>,
    targets: Targets,
    /// Indices (among all inputs) of the masks that choose the window.
    masks: Vec<usize>,
    ignore_values: Vec<i64>,
    ignore_channels: Vec<i64>,
    height: i64,
    width: i64,
    p: f64,
}

/// What one call drew: the labelled pixel `(y, x)` the window holds (`None` when the masks
/// were empty and the window is anywhere), and the window `[x_min, y_min, x_max, y_max)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Draw {
    pub pixel: Option<[i64; 2]>,
    pub window: [i64; 4],
}

impl FromConfig for CropNonEmptyMaskIfExists {
    type Config = CropNonEmptyMaskIfExistsConfig;
    fn from_config(c: CropNonEmptyMaskIfExistsConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let keys = paired_keys(ctx)?;
        if c.masks.is_empty() {
            return Err(Error::config(
                "masks",
                "CropNonEmptyMaskIfExists needs the mask(s) whose labelled pixels choose the window: list them in masks",
            ));
        }
        let mut masks = Vec::with_capacity(c.masks.len());
        for m in &c.masks {
            let Some(i) = keys.iter().position(|k| k == m) else {
                return Err(Error::config(
                    "masks",
                    format!("`{m}` is not one of the op's inputs ({})", keys.join(", ")),
                ));
            };
            if c.bboxes.contains(m) || c.keypoints.contains(m) {
                return Err(Error::config(
                    "masks",
                    format!("`{m}` is listed as boxes or keypoints too"),
                ));
            }
            masks.push(i);
        }
        Ok(CropNonEmptyMaskIfExists {
            targets: Targets::new(
                &keys,
                &c.bboxes,
                c.bbox_params,
                &c.keypoints,
                c.keypoint_params,
            )?,
            keys,
            masks,
            ignore_values: c.ignore_values,
            ignore_channels: c.ignore_channels,
            height: positive("height", c.height)?,
            width: positive("width", c.width)?,
            p: probability("p", c.p)?,
        })
    }
}

impl CropNonEmptyMaskIfExists {
    /// One mask as albumentations' `_preprocess_mask` leaves it: ignored values zeroed, then
    /// ignored channels dropped; integers as int64 so the union below is a bitwise or.
    fn preprocess(&self, key: &str, mask: &Tensor) -> Result<Tensor> {
        let mut m = if mask.is_floating_point() {
            mask.f_to_kind(Kind::Double)?
        } else {
            mask.f_to_kind(Kind::Int64)?
        };
        for &v in &self.ignore_values {
            m = m.f_masked_fill(&m.f_eq(v)?, 0)?;
        }
        if m.dim() == 3 && !self.ignore_channels.is_empty() {
            let kept: Vec<i64> = (0..m.size()[2])
                .filter(|c| !self.ignore_channels.contains(c))
                .collect();
            if kept.is_empty() {
                return Err(Error::msg(format!(
                    "ignore_channels leaves no channel of mask `{key}` to look at"
                )));
            }
            m = m.f_index_select(2, &Tensor::f_from_slice(&kept)?.f_to_device(m.device())?)?;
        }
        Ok(m)
    }

    /// The labelled pixels `(y, x)` of the masks among `inputs` (all inputs, in key order),
    /// row by row as numpy's `argwhere` lists them: those where the union of the
    /// preprocessed masks, summed over channels, is not 0.
    pub(crate) fn labelled(&self, inputs: &[&Tensor]) -> Result<Vec<[i64; 2]>> {
        let mut union: Option<Tensor> = None;
        for &i in &self.masks {
            let key = &self.keys[i];
            let m = self.preprocess(key, inputs[i])?;
            union = Some(match union {
                None => m,
                Some(u) if u.size() != m.size() => {
                    return Err(Error::msg(format!(
                        "mask `{key}` has shape {:?} after ignore_channels, the first mask {:?}: masks must match",
                        m.size(),
                        u.size()
                    )))
                }
                // albumentations' `|=` refuses float masks; the union of their labelled
                // pixels is what it would mean.
                Some(u) if u.is_floating_point() || m.is_floating_point() => u
                    .f_ne(0)?
                    .f_logical_or(&m.f_ne(0)?)?
                    .f_to_kind(Kind::Double)?,
                Some(u) => u.f_bitwise_or_tensor(&m)?,
            });
        }
        let union = union.ok_or_else(|| Error::msg("no mask to look at"))?;
        let plane = if union.dim() == 3 {
            union.f_sum_dim_intlist(-1, false, union.kind())?
        } else {
            union
        };
        let yx = plane.f_nonzero()?.f_contiguous()?;
        let flat = Vec::<i64>::try_from(yx.f_flatten(0, -1)?)
            .map_err(|e| Error::msg(format!("mask pixels: {e}")))?;
        Ok(flat.chunks_exact(2).map(|p| [p[0], p[1]]).collect())
    }

    /// The draw of the call seeded `seed` for the labelled pixels `labelled` of an
    /// `height × width` image, in albumentations' order: a pixel, then the window's offsets
    /// left of and above it (each uniform over the window's size), the window clipped into
    /// the image so it still holds the pixel; a uniform window when nothing is labelled.
    /// `None` when the `p` draw says skip.
    pub(crate) fn draw(
        &self,
        labelled: &[[i64; 2]],
        (height, width): (i64, i64),
        seed: u64,
    ) -> Option<Draw> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.p {
            return None;
        }
        let (pixel, x0, y0) = if labelled.is_empty() {
            let x0 = rng.random_range(0..=width - self.width);
            let y0 = rng.random_range(0..=height - self.height);
            (None, x0, y0)
        } else {
            let [y, x] = labelled[rng.random_range(0..labelled.len())];
            let x0 = x - rng.random_range(0..self.width);
            let y0 = y - rng.random_range(0..self.height);
            (
                Some([y, x]),
                x0.clamp(0, width - self.width),
                y0.clamp(0, height - self.height),
            )
        };
        Some(Draw {
            pixel,
            window: [x0, y0, x0 + self.width, y0 + self.height],
        })
    }
}

impl NumpyOp for CropNonEmptyMaskIfExists {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        // A skipped sample keeps the whole image (`None`); its boxes still pass the
        // filters, as `RandomCropFromBorders`' do.
        crop_with_targets(&self.targets, &self.keys, inputs, |size| {
            if self.height > size.0 || self.width > size.1 {
                return Err(Error::msg(format!(
                    "crop {}x{} is larger than input `{}` ({}x{})",
                    self.height, self.width, self.keys[0], size.0, size.1
                )));
            }
            let labelled = self.labelled(inputs)?;
            Ok(self.draw(&labelled, size, ctx.seed).map(|d| d.window))
        })
    }
}
