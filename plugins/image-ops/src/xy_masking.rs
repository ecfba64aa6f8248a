//! `XYMasking`: full-height vertical and full-width horizontal bands of every input set to
//! a constant (SpecAugment-style time / frequency masking).

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::dropout_targets::Holes;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{mask_flags, paired_keys, probability, rng, same_size, Spatial};
use crate::targets::Targets;

/// A count or length drawn uniformly from `[lo, hi]`, both included; `n` alone means
/// `[0, n]`, as albumentations 2.0.8 reads it (FastEstimator's older albumentations read a
/// fixed `n`: write `[n, n]` for that).
#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(untagged)]
pub enum IntRange {
    /// `[0, n]`.
    UpTo(i64),
    /// Uniform in `[lo, hi]`.
    Range([i64; 2]),
}

impl IntRange {
    fn checked(self, field: &str) -> Result<[i64; 2]> {
        let [lo, hi] = match self {
            IntRange::UpTo(n) => [0, n],
            IntRange::Range(r) => r,
        };
        if 0 <= lo && lo <= hi {
            Ok([lo, hi])
        } else {
            Err(Error::config(
                field,
                format!("needs 0 <= lo <= hi, got [{lo}, {hi}]"),
            ))
        }
    }
}

fn zero() -> IntRange {
    IntRange::UpTo(0)
}

fn half() -> f64 {
    0.5
}

/// `XYMasking` configuration (FastEstimator's names; albumentations' `fill` and
/// `fill_mask` also work).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct XYMaskingConfig {
    /// Number of vertical bands: `[lo, hi]`, or `n` for `[0, n]` (default 0).
    #[serde(default = "zero")]
    pub num_masks_x: IntRange,
    /// Number of horizontal bands: `[lo, hi]`, or `n` for `[0, n]` (default 0).
    #[serde(default = "zero")]
    pub num_masks_y: IntRange,
    /// Width of a vertical band in pixels: `[lo, hi]`, or `n` for `[0, n]` (default 0).
    #[serde(default = "zero")]
    pub mask_x_length: IntRange,
    /// Height of a horizontal band in pixels: `[lo, hi]`, or `n` for `[0, n]` (default 0).
    #[serde(default = "zero")]
    pub mask_y_length: IntRange,
    /// What image bands are filled with (default 0).
    #[serde(default, alias = "fill")]
    pub fill_value: f64,
    /// What bands of the inputs in `masks` are filled with; unset leaves masks untouched.
    #[serde(alias = "fill_mask")]
    pub mask_fill_value: Option<f64>,
    /// Inputs that are label masks.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability of masking a sample (default 0.5).
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

/// Cuts random vertical and horizontal bands, the same in every input.
pub struct XYMasking {
    keys: Vec<String>,
    targets: Targets,
    masks: Vec<bool>,
    counts: [[i64; 2]; 2],
    lengths: [[i64; 2]; 2],
    fill: f64,
    mask_fill: Option<f64>,
    p: f64,
}

impl FromConfig for XYMasking {
    type Config = XYMaskingConfig;
    fn from_config(c: XYMaskingConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let lengths = [
            c.mask_x_length.checked("mask_x_length")?,
            c.mask_y_length.checked("mask_y_length")?,
        ];
        if lengths[0][1] == 0 && lengths[1][1] == 0 {
            return Err(Error::config(
                "mask_x_length",
                "at least one of mask_x_length and mask_y_length must be positive",
            ));
        }
        let keys = paired_keys(ctx)?;
        Ok(XYMasking {
            masks: mask_flags(&keys, &c.masks)?,
            targets: Targets::new(
                &keys,
                &c.bboxes,
                c.bbox_params,
                &c.keypoints,
                c.keypoint_params,
            )?,
            keys,
            counts: [
                c.num_masks_x.checked("num_masks_x")?,
                c.num_masks_y.checked("num_masks_y")?,
            ],
            lengths,
            fill: c.fill_value,
            mask_fill: c.mask_fill_value,
            p: probability("p", c.p)?,
        })
    }
}

fn draw(rng: &mut ChaCha8Rng, [lo, hi]: [i64; 2]) -> i64 {
    rng.random_range(lo..=hi)
}

impl XYMasking {
    /// The bands `[x_min, y_min, x_max, y_max)` of the call seeded `seed` in an
    /// `height × width` image, vertical ones first; empty when the `p` draw says skip.
    /// Bands longer than the image are an error, as in albumentations.
    pub(crate) fn holes(&self, height: i64, width: i64, seed: u64) -> Result<Vec<[i64; 4]>> {
        for (field, [_, hi], side, n) in [
            ("mask_x_length", self.lengths[0], "width", width),
            ("mask_y_length", self.lengths[1], "height", height),
        ] {
            if hi > n {
                return Err(Error::msg(format!(
                    "{field} reaches {hi} pixels, more than the image {side} {n}"
                )));
            }
        }
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.p {
            return Ok(Vec::new());
        }
        let mut holes = Vec::new();
        for (axis, side) in [(0, width), (1, height)] {
            // Zero-length bands are still holes: albumentations then cuts boxes down to
            // whole pixels as for any hole.
            for _ in 0..draw(&mut rng, self.counts[axis]) {
                let length = draw(&mut rng, self.lengths[axis]);
                let start = rng.random_range(0..=side - length);
                holes.push(if axis == 0 {
                    [start, 0, start + length, height]
                } else {
                    [0, start, width, start + length]
                });
            }
        }
        Ok(holes)
    }
}

/// `x` with every rectangle of `holes` set to `fill`.
pub(crate) fn fill_rects(
    x: &Tensor,
    layout: &Spatial,
    holes: &[[i64; 4]],
    fill: f64,
) -> Result<Tensor> {
    let mut out = x.f_zeros_like()?;
    out.f_copy_(x)?;
    for &[x0, y0, x1, y1] in holes {
        // fill_ writes through the narrowed view into `out`.
        let _hole = out
            .f_narrow(layout.h_axis, y0, y1 - y0)?
            .f_narrow(layout.w_axis(), x0, x1 - x0)?
            .f_fill_(fill)?;
    }
    Ok(out)
}

impl NumpyOp for XYMasking {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let layouts = same_size(&pixels.keys, &pixels.inputs)?;
        let size = (layouts[0].height, layouts[0].width);
        let holes = self.holes(size.0, size.1, ctx.seed)?;
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
                match fill.filter(|_| !holes.is_empty()) {
                    Some(fill) => fill_rects(x, layout, &holes, fill),
                    None => Ok(x.shallow_clone()),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let cut = (!holes.is_empty()).then(|| Holes::rects(size.0, size.1, &holes));
        self.targets
            .merge_holes(&self.keys, inputs, out, cut.as_ref(), size)
    }
}
