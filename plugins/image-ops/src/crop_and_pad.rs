//! `CropAndPad`: pixels (or fractions of the side) cut off or added on each side, then, with
//! `keep_size`, resized back to the input size; albumentations 2.0.8's `CropAndPad`.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::crop_and_pad_sides::{Amounts, Plan, Sides};
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{
    mask_flags, paired_keys, probability, resize, rng, same_size, Interpolation, Spatial,
};
use crate::pad::pad;
use crate::rotate::BorderMode;
use crate::targets::Targets;

/// `CropAndPad` configuration: albumentations 2.0.8's names, FastEstimator's (albumentations
/// 1.x's) `pad_mode`, `pad_cval` and `pad_cval_mask` also work.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct CropAndPadConfig {
    /// Pixels added (positive) or cut off (negative) per side: `n` for every side, `[lo, hi]`
    /// drawn from `lo..hi` (hi excluded), or `[top, right, bottom, left]`, each a number, a
    /// `[lo, hi]` range or a list to pick from. Set this or `percent`.
    pub px: Option<Amounts<i64>>,
    /// As `px`, in fractions of the image height (top, bottom) or width (left, right),
    /// truncated to whole pixels; ranges are uniform on `[lo, hi]`.
    pub percent: Option<Amounts<f64>>,
    /// Resize the result back to the input size (default true).
    #[serde(default = "yes")]
    pub keep_size: bool,
    /// With the two-number range form, one draw per side (default true) or one for all
    /// four (false); the four-side form always draws per side.
    #[serde(default = "yes")]
    pub sample_independently: bool,
    /// Sampling of images when resizing back: `"bilinear"` (default), `"nearest"`, `"bicubic"`.
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
    /// Sampling of the inputs listed in `masks` when resizing back (default `"nearest"`).
    #[serde(default = "nearest")]
    pub mask_interpolation: Interpolation,
    /// How the padding is filled (default `"constant"`). `pad_mode` also works.
    #[serde(default = "constant", alias = "pad_mode")]
    pub border_mode: BorderMode,
    /// Image fill for `"constant"` (default 0): a number, `[a, b]` drawn uniformly per call,
    /// or a list to pick from. `pad_cval` also works.
    #[serde(default = "zero", alias = "pad_cval")]
    pub fill: Fill,
    /// Mask fill for `"constant"` (default 0), forms as `fill`. `pad_cval_mask` also works.
    #[serde(default = "zero", alias = "pad_cval_mask")]
    pub fill_mask: Fill,
    /// Inputs that are label masks (`mask_interpolation`, `fill_mask`).
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability of transforming a sample (default 1, albumentations' default here).
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

/// A constant fill: fixed, or drawn per call as albumentations' `_get_pad_value` does
/// (its schema makes every fill a float, so `[a, b]` is uniform even for integers).
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum Fill {
    /// This value.
    Value(f64),
    /// `[a, b]`: uniform on `[a, b]`; any other length: one of the values.
    Random(Vec<f64>),
}

impl Fill {
    fn check(&self, field: &str) -> Result<()> {
        match self {
            Fill::Random(v) if v.is_empty() => Err(Error::config(field, "an empty list")),
            Fill::Random(v) if v.iter().any(|x| !x.is_finite()) => Err(Error::config(
                field,
                format!("values must be finite, got {v:?}"),
            )),
            Fill::Value(v) if !v.is_finite() => {
                Err(Error::config(field, format!("must be finite, got {v}")))
            }
            _ => Ok(()),
        }
    }

    fn draw(&self, rng: &mut impl Rng) -> f64 {
        match self {
            Fill::Value(v) => *v,
            Fill::Random(v) if v.len() == 2 => v[0] + (v[1] - v[0]) * rng.random::<f64>(),
            Fill::Random(v) => v[rng.random_range(0..v.len())],
        }
    }
}

fn zero() -> Fill {
    Fill::Value(0.0)
}

fn yes() -> bool {
    true
}

fn one() -> f64 {
    1.0
}

fn bilinear() -> Interpolation {
    Interpolation::Bilinear
}

fn nearest() -> Interpolation {
    Interpolation::Nearest
}

fn constant() -> BorderMode {
    BorderMode::Constant
}

/// Crops and pads every input by the same drawn amounts; boxes and keypoints follow.
pub struct CropAndPad {
    keys: Vec<String>,
    targets: Targets,
    masks: Vec<bool>,
    sides: Sides,
    keep_size: bool,
    interpolation: [Interpolation; 2],
    border_mode: BorderMode,
    fill: [Fill; 2],
    p: f64,
}

impl FromConfig for CropAndPad {
    type Config = CropAndPadConfig;
    fn from_config(c: CropAndPadConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let independent = c.sample_independently;
        let sides = match (c.px, c.percent) {
            (Some(px), None) => Sides::new("px", px, |v| v as f64, independent)?,
            (None, Some(percent)) => Sides::new("percent", percent, |v| v, independent)?,
            (Some(_), Some(_)) => {
                return Err(Error::config(
                    "percent",
                    "set either px or percent, not both",
                ))
            }
            (None, None) => {
                return Err(Error::config(
                    "px",
                    "set px (pixels) or percent (fractions of the side)",
                ))
            }
        };
        c.fill.check("fill")?;
        c.fill_mask.check("fill_mask")?;
        let keys = paired_keys(ctx)?;
        Ok(CropAndPad {
            targets: Targets::new(
                &keys,
                &c.bboxes,
                c.bbox_params,
                &c.keypoints,
                c.keypoint_params,
            )?,
            masks: mask_flags(&keys, &c.masks)?,
            keys,
            sides,
            keep_size: c.keep_size,
            interpolation: [c.interpolation, c.mask_interpolation],
            border_mode: c.border_mode,
            fill: [c.fill, c.fill_mask],
            p: probability("p", c.p)?,
        })
    }
}

impl CropAndPad {
    /// What the call seeded `seed` does to an `height × width` image, and its image and mask
    /// fills: the identity when the `p` draw says skip; an error when the crops leave
    /// nothing, as in albumentations.
    pub(crate) fn plan(&self, height: i64, width: i64, seed: u64) -> Result<(Plan, [f64; 2])> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.p {
            return Ok((Plan::identity(height, width), [0.0; 2]));
        }
        let plan = Plan::new(self.sides.draw(&mut rng, height, width), height, width)?;
        let fill = [self.fill[0].draw(&mut rng), self.fill[1].draw(&mut rng)];
        Ok((plan, fill))
    }

    /// `x` cut to the plan's window, padded with `fill`, and resized back under `keep_size`.
    fn apply(
        &self,
        x: &Tensor,
        layout: &Spatial,
        plan: &Plan,
        fill: f64,
        mask: bool,
    ) -> Result<Tensor> {
        let [x0, y0, x1, y1] = plan.crop;
        let cut = x
            .f_narrow(layout.h_axis, y0, y1 - y0)?
            .f_narrow(layout.w_axis(), x0, x1 - x0)?;
        let cut_layout = Spatial {
            height: y1 - y0,
            width: x1 - x0,
            ..*layout
        };
        let padded = pad(&cut, &cut_layout, plan.pad, self.border_mode, fill)?;
        if !self.keep_size {
            return Ok(padded.f_contiguous()?);
        }
        let (height, width) = plan.size();
        let padded_layout = Spatial {
            height,
            width,
            ..*layout
        };
        let interpolation = self.interpolation[usize::from(mask)];
        Ok(resize(
            &padded_layout,
            &padded,
            layout.height,
            layout.width,
            interpolation,
        )?
        .f_contiguous()?)
    }
}

impl NumpyOp for CropAndPad {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let layouts = same_size(&pixels.keys, &pixels.inputs)?;
        let size = (layouts[0].height, layouts[0].width);
        let (plan, fills) = self.plan(size.0, size.1, ctx.seed)?;
        let out = pixels
            .inputs
            .iter()
            .zip(&layouts)
            .zip(pixels.index.iter().map(|&i| self.masks[i]))
            .map(|((x, layout), mask)| self.apply(x, layout, &plan, fills[usize::from(mask)], mask))
            .collect::<Result<Vec<_>>>()?;
        // The padded window in input coordinates, stretched to the output: albumentations
        // shifts boxes and keypoints by the crop and the pad (no mirrored copies in the
        // padding, unlike PadIfNeeded) and scales keypoints by the resize back.
        let [x0, y0, x1, y1] = plan.crop;
        let [top, bottom, left, right] = plan.pad;
        let g = Geometry::Crop {
            window: [x0 - left, y0 - top, x1 + right, y1 + bottom],
            out: if self.keep_size { size } else { plan.size() },
        };
        self.targets.merge(&self.keys, inputs, out, &g, size)
    }
}
