//! `Rotate`: rotation about the image centre by a random angle, sampled with `grid_sampler`.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::affine::AffineDraw;
use crate::boxes::BboxParamsConfig;
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{paired_keys, rng, Interpolation, Spatial};
use crate::targets::Targets;

/// The range of angles, in degrees: `90` means [-90, 90], `[lo, hi]` means [lo, hi].
#[derive(Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(untagged)]
pub enum Limit {
    /// A non-negative bound `l`: angles in [-l, l].
    Symmetric(f64),
    /// Explicit bounds `[lo, hi]` with `lo <= hi`.
    Range([f64; 2]),
}

/// What fills the parts of the output that come from outside the input.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BorderMode {
    /// Mirror without repeating the edge pixel, `dcb|abcd|cba` (OpenCV `BORDER_REFLECT_101`,
    /// FastEstimator's default).
    #[serde(rename = "reflect_101", alias = "reflect101")]
    Reflect101,
    /// Mirror repeating the edge pixel, `cba|abcd|dcb` (OpenCV `BORDER_REFLECT`).
    #[serde(rename = "reflect")]
    Reflect,
    /// Repeat the edge pixel, `aaa|abcd|ddd` (OpenCV `BORDER_REPLICATE`).
    #[serde(rename = "replicate")]
    Replicate,
    /// The constant `value` (OpenCV `BORDER_CONSTANT`).
    #[serde(rename = "constant")]
    Constant,
}

/// `Rotate` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RotateConfig {
    /// Angle range in degrees: `l` for [-l, l] or `[lo, hi]` (default 90). Positive angles
    /// turn the picture counter-clockwise, as OpenCV and albumentations do.
    #[serde(default = "ninety")]
    pub limit: Limit,
    /// `"bilinear"` (default, alias `"linear"`), `"nearest"` or `"bicubic"` (alias `"cubic"`).
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
    /// `"reflect_101"` (default), `"reflect"`, `"replicate"` or `"constant"`.
    #[serde(default = "reflect_101")]
    pub border_mode: BorderMode,
    /// Fill value for `border_mode = "constant"` (default 0); ignored otherwise.
    #[serde(default)]
    pub value: f64,
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

fn ninety() -> Limit {
    Limit::Symmetric(90.0)
}

fn bilinear() -> Interpolation {
    Interpolation::Bilinear
}

fn reflect_101() -> BorderMode {
    BorderMode::Reflect101
}

/// Rotates every input about its centre by one angle drawn uniformly from the configured
/// range; the output keeps the input's size, shape and dtype.
pub struct Rotate {
    keys: Vec<String>,
    targets: Targets,
    low: f64,
    high: f64,
    interpolation: Interpolation,
    border_mode: BorderMode,
    value: f64,
}

impl FromConfig for Rotate {
    type Config = RotateConfig;
    fn from_config(config: RotateConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let (low, high) = match config.limit {
            Limit::Symmetric(l) if l >= 0.0 && l.is_finite() => (-l, l),
            Limit::Range([lo, hi]) if lo <= hi && lo.is_finite() && hi.is_finite() => (lo, hi),
            Limit::Symmetric(l) => {
                return Err(Error::config(
                    "limit",
                    format!("must be a finite angle >= 0, got {l}"),
                ))
            }
            Limit::Range([lo, hi]) => {
                return Err(Error::config(
                    "limit",
                    format!("needs finite bounds with lo <= hi, got [{lo}, {hi}]"),
                ))
            }
        };
        let keys = paired_keys(ctx)?;
        Ok(Rotate {
            targets: Targets::new(
                &keys,
                &config.bboxes,
                config.bbox_params,
                &config.keypoints,
                config.keypoint_params,
            )?,
            keys,
            low,
            high,
            interpolation: config.interpolation,
            border_mode: config.border_mode,
            value: config.value,
        })
    }
}

impl NumpyOp for Rotate {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let angle = self.angle(ctx.seed);
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let mut size = (0, 0);
        let mut out = Vec::with_capacity(pixels.inputs.len());
        // Pixel inputs may differ in size (each turns about its own centre); boxes and
        // keypoints belong to the first.
        for (key, x) in pixels.keys.iter().zip(&pixels.inputs) {
            let layout = Spatial::of(key, x, false)?;
            if out.is_empty() {
                size = (layout.height, layout.width);
            }
            out.push(self.rotate(&layout, x, angle)?);
        }
        let turn = AffineDraw {
            translate: [0.0, 0.0],
            shear: [0.0, 0.0],
            scale: [1.0, 1.0],
            rotate: angle,
        };
        let (h, w) = (size.0 as f64, size.1 as f64);
        let g = Geometry::Affine {
            points: turn.matrix(size.0, size.1),
            boxes: turn.matrix_about(w / 2.0, h / 2.0),
            reflect: matches!(
                self.border_mode,
                BorderMode::Reflect | BorderMode::Reflect101
            ),
            scale: 1.0,
        };
        self.targets.merge(&self.keys, inputs, out, &g, size)
    }
}

impl Rotate {
    /// The angle, in degrees, the call seeded with `seed` rotates by.
    pub(crate) fn angle(&self, seed: u64) -> f64 {
        if self.low == self.high {
            self.low
        } else {
            rng(seed).random_range(self.low..=self.high)
        }
    }

    fn rotate(&self, layout: &Spatial, x: &Tensor, degrees: f64) -> Result<Tensor> {
        let input = layout.as_nchw(x)?;
        let grid = self.grid(layout, input.kind(), x.device(), degrees)?;
        let mode = match self.interpolation {
            Interpolation::Bilinear => 0,
            Interpolation::Nearest => 1,
            Interpolation::Bicubic => 2,
        };
        // grid_sampler padding: 0 zeros, 1 border, 2 reflection.
        let padding = match self.border_mode {
            BorderMode::Reflect101 | BorderMode::Reflect => 2,
            BorderMode::Replicate => 1,
            BorderMode::Constant => 0,
        };
        let align = self.align_corners();
        let mut out = input.f_grid_sampler_2d(&grid, mode, padding, align)?;
        if self.border_mode == BorderMode::Constant && self.value != 0.0 {
            // How much of each output pixel came from inside the image; the rest is `value`.
            let inside = Tensor::f_ones(
                [1, 1, layout.height, layout.width],
                (input.kind(), x.device()),
            )?
            .f_grid_sampler_2d(&grid, mode, 0, align)?;
            out = out.f_add(
                &inside
                    .f_neg()?
                    .f_add_scalar(1.0)?
                    .f_mul_scalar(self.value)?,
            )?;
        }
        layout.restore_layout(&out, x.kind())
    }

    /// Reflection about the edge pixels' centres (align_corners) is OpenCV's reflect-101;
    /// about the image border it is OpenCV's reflect.
    fn align_corners(&self) -> bool {
        self.border_mode != BorderMode::Reflect
    }

    /// For every output pixel, the normalised input coordinates it samples: `(1, H, W, 2)`.
    /// OpenCV's `getRotationMatrix2D` about the centre pixel, inverted (output → input).
    fn grid(
        &self,
        layout: &Spatial,
        kind: Kind,
        device: fe_plugin_api::tch::Device,
        degrees: f64,
    ) -> Result<Tensor> {
        let (h, w) = (layout.height, layout.width);
        let (cy, cx) = ((h - 1) as f64 / 2.0, (w - 1) as f64 / 2.0);
        let (sin, cos) = degrees.to_radians().sin_cos();
        let dx = Tensor::f_arange(w, (kind, device))?
            .f_sub_scalar(cx)?
            .f_view([1, w])?;
        let dy = Tensor::f_arange(h, (kind, device))?
            .f_sub_scalar(cy)?
            .f_view([h, 1])?;
        let src_x = dx
            .f_mul_scalar(cos)?
            .f_sub(&dy.f_mul_scalar(sin)?)?
            .f_add_scalar(cx)?;
        let src_y = dx
            .f_mul_scalar(sin)?
            .f_add(&dy.f_mul_scalar(cos)?)?
            .f_add_scalar(cy)?;
        let grid = Tensor::f_stack(
            &[self.normalise(&src_x, w)?, self.normalise(&src_y, h)?],
            -1,
        )?;
        Ok(grid.f_unsqueeze(0)?)
    }

    /// Pixel coordinate → grid_sampler's [-1, 1] under this op's `align_corners`.
    fn normalise(&self, coordinate: &Tensor, size: i64) -> Result<Tensor> {
        let size = size as f64;
        Ok(if !self.align_corners() {
            coordinate
                .f_mul_scalar(2.0 / size)?
                .f_add_scalar(1.0 / size - 1.0)?
        } else if size > 1.0 {
            coordinate
                .f_mul_scalar(2.0 / (size - 1.0))?
                .f_add_scalar(-1.0)?
        } else {
            coordinate.f_mul_scalar(0.0)?
        })
    }
}
