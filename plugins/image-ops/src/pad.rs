//! `PadIfNeeded`: pads images up to a minimum size (or a multiple of a divisor), by index
//! maps, so any dtype works and masks stay exact.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{mask_flags, paired_keys, rng, same_size, Spatial};
use crate::rotate::BorderMode;
use crate::targets::Targets;

/// Where the image sits inside the padded output.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Position {
    /// Padding split evenly, the odd pixel after (albumentations' default).
    Center,
    /// All padding below and to the right.
    TopLeft,
    /// All padding below and to the left.
    TopRight,
    /// All padding above and to the right.
    BottomLeft,
    /// All padding above and to the left.
    BottomRight,
    /// A uniformly random split, seeded per sample.
    Random,
}

/// `PadIfNeeded` configuration (FastEstimator's names).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct PadIfNeededConfig {
    /// Minimum output height (default 1024); leave out when `pad_height_divisor` is set.
    pub min_height: Option<i64>,
    /// Minimum output width (default 1024); leave out when `pad_width_divisor` is set.
    pub min_width: Option<i64>,
    /// Pad the height up to a multiple of this instead.
    pub pad_height_divisor: Option<i64>,
    /// Pad the width up to a multiple of this instead.
    pub pad_width_divisor: Option<i64>,
    /// Where the image sits (default `"center"`).
    #[serde(default = "center")]
    pub position: Position,
    /// How the border is filled (default `"reflect_101"`, FastEstimator's).
    #[serde(default = "reflect_101")]
    pub border_mode: BorderMode,
    /// Fill of images for `border_mode = "constant"` (default 0).
    #[serde(default)]
    pub value: f64,
    /// Fill of the inputs listed in `masks` for `border_mode = "constant"` (default 0).
    #[serde(default)]
    pub mask_value: f64,
    /// Inputs that are label masks (filled with `mask_value`).
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

fn center() -> Position {
    Position::Center
}

fn reflect_101() -> BorderMode {
    BorderMode::Reflect101
}

/// How one axis is padded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    AtLeast(i64),
    Multiple(i64),
}

/// Pads every input with the same margins, chosen from the first input's size.
pub struct PadIfNeeded {
    keys: Vec<String>,
    targets: Targets,
    masks: Vec<bool>,
    height: Target,
    width: Target,
    position: Position,
    border_mode: BorderMode,
    value: f64,
    mask_value: f64,
}

fn target(
    min: Option<i64>,
    divisor: Option<i64>,
    min_field: &str,
    div_field: &str,
) -> Result<Target> {
    match (min, divisor) {
        (Some(_), Some(_)) => Err(Error::config(
            div_field,
            format!("set either {min_field} or {div_field}, not both"),
        )),
        (None, Some(d)) if d >= 1 => Ok(Target::Multiple(d)),
        (None, Some(d)) => Err(Error::config(
            div_field,
            format!("must be at least 1, got {d}"),
        )),
        (Some(m), None) if m >= 1 => Ok(Target::AtLeast(m)),
        (Some(m), None) => Err(Error::config(
            min_field,
            format!("must be at least 1, got {m}"),
        )),
        (None, None) => Ok(Target::AtLeast(1024)),
    }
}

impl FromConfig for PadIfNeeded {
    type Config = PadIfNeededConfig;
    fn from_config(config: PadIfNeededConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let keys = paired_keys(ctx)?;
        Ok(PadIfNeeded {
            targets: Targets::new(
                &keys,
                &config.bboxes,
                config.bbox_params,
                &config.keypoints,
                config.keypoint_params,
            )?,
            masks: mask_flags(&keys, &config.masks)?,
            keys,
            height: target(
                config.min_height,
                config.pad_height_divisor,
                "min_height",
                "pad_height_divisor",
            )?,
            width: target(
                config.min_width,
                config.pad_width_divisor,
                "min_width",
                "pad_width_divisor",
            )?,
            position: config.position,
            border_mode: config.border_mode,
            value: config.value,
            mask_value: config.mask_value,
        })
    }
}

/// Padding `(before, after)` that brings `size` to `target`, albumentations' split.
fn split(size: i64, target: Target) -> (i64, i64) {
    let total = match target {
        Target::AtLeast(min) => (min - size).max(0),
        Target::Multiple(d) => (d - size % d) % d,
    };
    (total / 2, total - total / 2)
}

impl PadIfNeeded {
    /// `(top, bottom, left, right)` for an `height × width` input in the call seeded `seed`.
    pub(crate) fn margins(&self, height: i64, width: i64, seed: u64) -> [i64; 4] {
        let (top, bottom) = split(height, self.height);
        let (left, right) = split(width, self.width);
        let (v, h) = (top + bottom, left + right);
        match self.position {
            Position::Center => [top, bottom, left, right],
            Position::TopLeft => [0, v, 0, h],
            Position::TopRight => [0, v, h, 0],
            Position::BottomLeft => [v, 0, 0, h],
            Position::BottomRight => [v, 0, h, 0],
            Position::Random => {
                let mut rng = rng(seed);
                let top = rng.random_range(0..=v);
                let left = rng.random_range(0..=h);
                [top, v - top, left, h - left]
            }
        }
    }
}

impl NumpyOp for PadIfNeeded {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let layouts = same_size(&pixels.keys, &pixels.inputs)?;
        let size = (layouts[0].height, layouts[0].width);
        let margins = self.margins(size.0, size.1, ctx.seed);
        let out = pixels
            .inputs
            .iter()
            .zip(&layouts)
            .zip(pixels.index.iter().map(|&i| self.masks[i]))
            .map(|((x, layout), mask)| {
                let fill = if mask { self.mask_value } else { self.value };
                pad(x, layout, margins, self.border_mode, fill)
            })
            .collect::<Result<Vec<_>>>()?;
        let g = Geometry::Pad {
            margins,
            reflect: matches!(
                self.border_mode,
                BorderMode::Reflect | BorderMode::Reflect101
            ),
        };
        self.targets.merge(&self.keys, inputs, out, &g, size)
    }
}

/// `x` padded by `[top, bottom, left, right]` like `cv2.copyMakeBorder`.
pub(crate) fn pad(
    x: &Tensor,
    layout: &Spatial,
    [top, bottom, left, right]: [i64; 4],
    mode: BorderMode,
    fill: f64,
) -> Result<Tensor> {
    if top + bottom + left + right == 0 {
        return Ok(x.shallow_clone());
    }
    let (h_axis, w_axis) = (layout.h_axis, layout.w_axis());
    if mode == BorderMode::Constant {
        let mut size = x.size();
        size[h_axis as usize] += top + bottom;
        size[w_axis as usize] += left + right;
        let out = Tensor::f_full(&size, saturate(fill, x.kind()), (x.kind(), x.device()))?;
        out.f_narrow(h_axis, top, layout.height)?
            .f_narrow(w_axis, left, layout.width)?
            .f_copy_(x)?;
        return Ok(out);
    }
    let rows = source_indices(layout.height, top, bottom, mode, x.device())?;
    let cols = source_indices(layout.width, left, right, mode, x.device())?;
    Ok(x.f_index_select(h_axis, &rows)?
        .f_index_select(w_axis, &cols)?)
}

/// `fill` as `cv2.copyMakeBorder` stores it in an image of `kind`: integer kinds round half
/// to even and saturate (`saturate_cast`), where a plain cast would truncate or wrap.
fn saturate(fill: f64, kind: Kind) -> f64 {
    let (low, high) = match kind {
        Kind::Uint8 => (0.0, 255.0),
        Kind::Int8 => (-128.0, 127.0),
        Kind::Int16 => (-32768.0, 32767.0),
        Kind::Int => (-2147483648.0, 2147483647.0),
        Kind::Int64 => return fill.round_ties_even(),
        _ => return fill,
    };
    fill.round_ties_even().clamp(low, high)
}

/// For each padded position along an axis of length `n`, the input index it copies
/// (OpenCV's `borderInterpolate`).
fn source_indices(
    n: i64,
    before: i64,
    after: i64,
    mode: BorderMode,
    device: Device,
) -> Result<Tensor> {
    let index: Vec<i64> = (-before..n + after)
        .map(|i| border_index(i, n, mode))
        .collect();
    Ok(Tensor::f_from_slice(&index)?
        .f_to_device(device)?
        .f_to_kind(Kind::Int64)?)
}

fn border_index(mut i: i64, n: i64, mode: BorderMode) -> i64 {
    if (0..n).contains(&i) {
        return i;
    }
    match mode {
        BorderMode::Replicate | BorderMode::Constant => i.clamp(0, n - 1),
        BorderMode::Reflect101 if n == 1 => 0,
        BorderMode::Reflect101 => {
            let period = 2 * (n - 1);
            i = i.rem_euclid(period);
            if i >= n {
                period - i
            } else {
                i
            }
        }
        BorderMode::Reflect => {
            let period = 2 * n;
            i = i.rem_euclid(period);
            if i >= n {
                period - 1 - i
            } else {
                i
            }
        }
    }
}
