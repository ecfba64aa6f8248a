//! `GridMask` after FastEstimator's `fe.op.numpyop.univariate.GridMask` (Chen et al. 2020):
//! a regular grid of dropped squares. It draws the cell size `d` from `d_range`, a row and a
//! column offset in `0..d`, and (with `rotate_angle > 0`) an angle; squares of side
//! `int(d · ratio)` start every `d` pixels from the offsets on a `diag × diag` canvas
//! (`diag = ceil(√(H² + W²))`), which is turned about `(diag / 2, diag / 2)` with
//! `cv2.warpAffine` (nearest, border kept) and cropped at its centre to `H × W`. Every input
//! gets the same grid: images `fill_value`, masks `mask_fill_value` (or untouched).

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::color::uniform;
use crate::dropout_targets::Holes;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{mask_flags, paired_keys, probability, rng, same_size, Spatial};
use crate::targets::Targets;
use crate::warp::{warp_affine, Sampling};
use crate::BorderMode;

/// `GridMask` configuration (FastEstimator's names).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct GridMaskConfig {
    /// Range of the grid cell size in pixels, both included (default [96, 224]).
    #[serde(default = "cells")]
    pub d_range: [i64; 2],
    /// Side of a dropped square as a fraction of the cell, in (0, 1) (default 0.6).
    #[serde(default = "ratio")]
    pub ratio: f64,
    /// Largest rotation of the grid in degrees; 0 keeps it axis-aligned (default 0).
    #[serde(default)]
    pub rotate_angle: f64,
    /// What dropped image pixels become (default 0).
    #[serde(default)]
    pub fill_value: f64,
    /// What dropped pixels of the inputs in `masks` become; unset leaves masks untouched.
    pub mask_fill_value: Option<f64>,
    /// Inputs that are label masks.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 1: FastEstimator's op always applies).
    #[serde(default = "always")]
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

fn cells() -> [i64; 2] {
    [96, 224]
}
fn ratio() -> f64 {
    0.6
}
fn always() -> f64 {
    1.0
}

/// Drops the same random grid of squares from every input.
pub struct GridMask {
    keys: Vec<String>,
    targets: Targets,
    masks: Vec<bool>,
    cells: [i64; 2],
    ratio: f64,
    angle: f64,
    fill: f64,
    mask_fill: Option<f64>,
    p: f64,
}

/// One call's grid: cell size, row and column offsets, angle in degrees.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Grid {
    pub d: i64,
    pub offset_y: i64,
    pub offset_x: i64,
    pub angle: f64,
}

impl FromConfig for GridMask {
    type Config = GridMaskConfig;
    fn from_config(c: GridMaskConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let keys = paired_keys(ctx)?;
        let [lo, hi] = c.d_range;
        if !(1 <= lo && lo <= hi) {
            return Err(Error::config(
                "d_range",
                format!("needs 1 <= lo <= hi, got [{lo}, {hi}]"),
            ));
        }
        if !(0.0 < c.ratio && c.ratio < 1.0) {
            return Err(Error::config(
                "ratio",
                format!("must be in (0, 1), got {}", c.ratio),
            ));
        }
        if !(c.rotate_angle >= 0.0 && c.rotate_angle.is_finite()) {
            return Err(Error::config(
                "rotate_angle",
                format!("must be finite and >= 0, got {}", c.rotate_angle),
            ));
        }
        Ok(GridMask {
            masks: mask_flags(&keys, &c.masks)?,
            targets: Targets::new(
                &keys,
                &c.bboxes,
                c.bbox_params,
                &c.keypoints,
                c.keypoint_params,
            )?,
            keys,
            cells: c.d_range,
            ratio: c.ratio,
            angle: c.rotate_angle,
            fill: c.fill_value,
            mask_fill: c.mask_fill_value,
            p: probability("p", c.p)?,
        })
    }
}

impl GridMask {
    /// The grid of the call seeded `seed`; `None` when the `p` draw says skip.
    pub(crate) fn grid(&self, seed: u64) -> Option<Grid> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.p {
            return None;
        }
        let d = rng.random_range(self.cells[0]..=self.cells[1]);
        let offset_y = rng.random_range(0..d);
        let offset_x = rng.random_range(0..d);
        let angle = if self.angle > 0.0 {
            uniform(&mut rng, [-self.angle, self.angle])
        } else {
            0.0
        };
        Some(Grid {
            d,
            offset_y,
            offset_x,
            angle,
        })
    }

    /// The `(H, W)` keep-mask (1 kept, 0 dropped) of `grid` for an `height × width` image.
    pub(crate) fn keep(&self, grid: Grid, height: i64, width: i64) -> Result<Tensor> {
        let diag = ((height * height + width * width) as f64).sqrt().ceil() as i64;
        let side = (grid.d as f64 * self.ratio) as i64;
        let mut canvas = vec![1f32; (diag * diag) as usize];
        let starts = |offset: i64| (offset - grid.d..diag).step_by(grid.d as usize);
        for y in starts(grid.offset_y) {
            let (y0, y1) = (y.max(0), (y + side).min(diag));
            for x in starts(grid.offset_x) {
                let (x0, x1) = (x.max(0), (x + side).min(diag));
                for row in y0..y1 {
                    let at = (row * diag) as usize;
                    canvas[at + x0 as usize..at + x1.max(x0) as usize].fill(0.0);
                }
            }
        }
        let mut mask = Tensor::f_from_slice(&canvas)?.f_view([diag, diag])?;
        if self.angle > 0.0 {
            let layout = Spatial {
                batched: false,
                plain: true,
                h_axis: 0,
                height: diag,
                width: diag,
            };
            let sampling = Sampling {
                nearest: true,
                border: BorderMode::Constant,
                fill: 1.0,
            };
            mask = warp_affine(&layout, &mask, &rotation(diag, grid.angle), sampling)?;
        }
        let (top, left) = ((diag - height) / 2, (diag - width) / 2);
        Ok(mask.f_narrow(0, top, height)?.f_narrow(1, left, width)?)
    }
}

/// `cv2.getRotationMatrix2D((diag // 2, diag // 2), angle, 1)`.
fn rotation(diag: i64, angle: f64) -> [f64; 6] {
    let c = (diag / 2) as f64;
    let (beta, alpha) = angle.to_radians().sin_cos();
    [
        alpha,
        beta,
        (1.0 - alpha) * c - beta * c,
        -beta,
        alpha,
        beta * c + (1.0 - alpha) * c,
    ]
}

impl NumpyOp for GridMask {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let layouts = same_size(&pixels.keys, &pixels.inputs)?;
        let size = (layouts[0].height, layouts[0].width);
        let Some(grid) = self.grid(ctx.seed) else {
            let same = pixels.inputs.iter().map(|x| x.shallow_clone()).collect();
            return self
                .targets
                .merge_holes(&self.keys, inputs, same, None, size);
        };
        let keep = self.keep(grid, size.0, size.1)?.f_gt(0.5)?;
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
                let Some(fill) = fill else {
                    return Ok(x.shallow_clone());
                };
                // (H, W) keep-mask broadcast over a channel axis and a batch axis.
                let mut keep = keep.f_to_device(x.device())?;
                if !layout.plain {
                    keep = keep.f_unsqueeze(-1)?;
                }
                let filler = Tensor::f_full([1], fill, (Kind::Double, Device::Cpu))?
                    .f_to_kind(x.kind())?
                    .f_to_device(x.device())?;
                Ok(x.f_where_self(&keep, &filler)?)
            })
            .collect::<Result<Vec<_>>>()?;
        // FastEstimator's GridMask takes images only; boxes and keypoints follow
        // albumentations' dropout rule (its GridDropout's) with the grid as the holes.
        let kept = Vec::<bool>::try_from(keep.f_flatten(0, -1)?.f_to_device(Device::Cpu)?)
            .map_err(|e| Error::msg(format!("GridMask: {e}")))?;
        let holes = Holes {
            height: size.0,
            width: size.1,
            dropped: kept.into_iter().map(|k| !k).collect(),
        };
        self.targets
            .merge_holes(&self.keys, inputs, out, Some(&holes), size)
    }
}
