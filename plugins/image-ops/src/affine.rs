//! `Affine` and `ShiftScaleRotate`: a random affine map about the image centre (albumentations
//! 2.0.8's draws and matrix), applied with [`crate::warp`] to images and masks alike.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::color::{range, uniform};
use crate::flips::Move;
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{mask_flags, paired_keys, probability, rng, same_size, Interpolation};
use crate::targets::Targets;
use crate::warp::{matmul, warp_affine, Affine2, Sampling};
use crate::{BorderMode, Limit};

/// A value or a range: unlike [`Limit`], a single number `v` means exactly `v` (albumentations'
/// `Affine` reads `scale = 1.2` as `(1.2, 1.2)`).
#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(untagged)]
pub enum Span {
    /// Exactly this value.
    Value(f64),
    /// Uniformly from `[lo, hi]`.
    Range([f64; 2]),
}

impl Span {
    fn bounds(self, field: &str) -> Result<[f64; 2]> {
        let [lo, hi] = match self {
            Span::Value(v) => [v, v],
            Span::Range(r) => r,
        };
        if lo <= hi && lo.is_finite() && hi.is_finite() {
            Ok([lo, hi])
        } else {
            Err(Error::config(
                field,
                format!("needs finite lo <= hi, got [{lo}, {hi}]"),
            ))
        }
    }
}

/// `Affine` configuration (albumentations' names; x and y draw independently).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct AffineConfig {
    /// Scale factor, per axis (default 1).
    #[serde(default = "one")]
    pub scale: Span,
    /// Shift as a fraction of the width / height (default none: `translate_px`).
    pub translate_percent: Option<Span>,
    /// Shift in pixels, integers (default 0).
    pub translate_px: Option<Span>,
    /// Rotation in degrees, counter-clockwise (default 0).
    #[serde(default = "zero")]
    pub rotate: Span,
    /// Shear in degrees, per axis (default 0).
    #[serde(default = "zero")]
    pub shear: Span,
    /// Use the x scale for y as well (default false).
    #[serde(default)]
    pub keep_ratio: bool,
    /// Image sampling: `"bilinear"` (default) or `"nearest"`; masks always use nearest.
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
    /// What fills points from outside the image (default `"constant"`, albumentations').
    #[serde(default = "constant")]
    pub border_mode: BorderMode,
    /// Image fill for `"constant"` (default 0). `value` also works (FastEstimator).
    #[serde(default, alias = "value")]
    pub fill: f64,
    /// Mask fill for `"constant"` (default 0). `mask_value` also works.
    #[serde(default, alias = "mask_value")]
    pub fill_mask: f64,
    /// Inputs that are label masks.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability of warping a sample (default 0.5).
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

/// The keys `Affine` and `ShiftScaleRotate` share (serde's `flatten` would lose
/// `deny_unknown_fields`, so both configs spell them out).
struct WarpConfig {
    bboxes: Vec<String>,
    bbox_params: Option<BboxParamsConfig>,
    keypoints: Vec<String>,
    keypoint_params: Option<KeypointParamsConfig>,
    interpolation: Interpolation,
    border_mode: BorderMode,
    fill: f64,
    fill_mask: f64,
    masks: Vec<String>,
    p: f64,
}

macro_rules! warp_config {
    ($c:expr) => {
        WarpConfig {
            bboxes: $c.bboxes,
            bbox_params: $c.bbox_params,
            keypoints: $c.keypoints,
            keypoint_params: $c.keypoint_params,
            interpolation: $c.interpolation,
            border_mode: $c.border_mode,
            fill: $c.fill,
            fill_mask: $c.fill_mask,
            masks: $c.masks,
            p: $c.p,
        }
    };
}

/// `ShiftScaleRotate` configuration (limits: `l` means `[-l, l]`).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ShiftScaleRotateConfig {
    /// Shift range as a fraction of the size, both axes (default 0.0625).
    #[serde(default = "shift")]
    pub shift_limit: Limit,
    /// Shift range of x, overriding `shift_limit`.
    pub shift_limit_x: Option<Limit>,
    /// Shift range of y, overriding `shift_limit`.
    pub shift_limit_y: Option<Limit>,
    /// Scale range around 1 (default 0.1: [0.9, 1.1]); x and y draw independently.
    #[serde(default = "tenth")]
    pub scale_limit: Limit,
    /// Rotation range in degrees (default 45).
    #[serde(default = "forty_five")]
    pub rotate_limit: Limit,
    /// Image sampling: `"bilinear"` (default) or `"nearest"`; masks always use nearest.
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
    /// What fills points from outside the image (default `"constant"`, albumentations').
    #[serde(default = "constant")]
    pub border_mode: BorderMode,
    /// Image fill for `"constant"` (default 0). `value` also works (FastEstimator).
    #[serde(default, alias = "value")]
    pub fill: f64,
    /// Mask fill for `"constant"` (default 0). `mask_value` also works.
    #[serde(default, alias = "mask_value")]
    pub fill_mask: f64,
    /// Inputs that are label masks.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability of warping a sample (default 0.5).
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

fn one() -> Span {
    Span::Value(1.0)
}
fn zero() -> Span {
    Span::Value(0.0)
}
fn half() -> f64 {
    0.5
}
fn bilinear() -> Interpolation {
    Interpolation::Bilinear
}
fn constant() -> BorderMode {
    BorderMode::Constant
}
fn shift() -> Limit {
    Limit::Symmetric(0.0625)
}
fn tenth() -> Limit {
    Limit::Symmetric(0.1)
}
fn forty_five() -> Limit {
    Limit::Symmetric(45.0)
}

/// How the translation is drawn.
#[derive(Debug, Clone, Copy)]
enum Translate {
    /// Fractions of the size, truncated to whole pixels as albumentations does.
    Percent([[f64; 2]; 2]),
    /// Whole pixels, both ends included.
    Pixels([[i64; 2]; 2]),
}

/// The random affine family: ranges per axis (`[x, y]`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AffineRanges {
    translate: Translate,
    shear: [[f64; 2]; 2],
    scale: [[f64; 2]; 2],
    keep_ratio: bool,
    rotate: [f64; 2],
}

/// The parameters of one call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AffineDraw {
    pub translate: [f64; 2],
    pub shear: [f64; 2],
    pub scale: [f64; 2],
    pub rotate: f64,
}

impl AffineRanges {
    /// Draws in albumentations' order: translate x, y; shear x, y; scale x, y; rotate.
    fn draw(&self, rng: &mut ChaCha8Rng, height: i64, width: i64) -> AffineDraw {
        let translate = match self.translate {
            Translate::Percent([x, y]) => [
                (uniform(rng, x) * width as f64).trunc(),
                (uniform(rng, y) * height as f64).trunc(),
            ],
            Translate::Pixels([x, y]) => [
                rng.random_range(x[0]..=x[1]) as f64,
                rng.random_range(y[0]..=y[1]) as f64,
            ],
        };
        // albumentations negates the drawn shear.
        let shear = [-uniform(rng, self.shear[0]), -uniform(rng, self.shear[1])];
        let sx = uniform(rng, self.scale[0]);
        let sy = uniform(rng, self.scale[1]);
        let scale = [sx, if self.keep_ratio { sx } else { sy }];
        let rotate = uniform(rng, self.rotate);
        AffineDraw {
            translate,
            shear,
            scale,
            rotate,
        }
    }
}

impl AffineDraw {
    /// The forward matrix (albumentations' `create_affine_transformation_matrix`): scale,
    /// rotate, shear and translate about the centre `((w - 1) / 2, (h - 1) / 2)`.
    pub(crate) fn matrix(&self, height: i64, width: i64) -> Affine2 {
        self.matrix_about(width as f64 / 2.0 - 0.5, height as f64 / 2.0 - 0.5)
    }

    /// The same matrix about `(cx, cy)`: albumentations' `bbox_matrix` turns about
    /// `(w / 2, h / 2)`, the centre of the continuous plane boxes live in.
    pub(crate) fn matrix_about(&self, cx: f64, cy: f64) -> Affine2 {
        let (sin, cos) = self.rotate.rem_euclid(360.0).to_radians().sin_cos();
        let [tx, ty] = self.translate;
        let [hx, hy] = [
            self.shear[0].to_radians().tan(),
            self.shear[1].to_radians().tan(),
        ];
        let [sx, sy] = self.scale;
        let chain = [
            [[1.0, 0.0, cx], [0.0, 1.0, cy], [0.0, 0.0, 1.0]],
            [[1.0, 0.0, tx], [0.0, 1.0, ty], [0.0, 0.0, 1.0]],
            [[1.0, hx, 0.0], [hy, 1.0, 0.0], [0.0, 0.0, 1.0]],
            [[cos, sin, 0.0], [-sin, cos, 0.0], [0.0, 0.0, 1.0]],
            [[sx, 0.0, 0.0], [0.0, sy, 0.0], [0.0, 0.0, 1.0]],
            [[1.0, 0.0, -cx], [0.0, 1.0, -cy], [0.0, 0.0, 1.0]],
        ];
        let m = chain[1..].iter().fold(chain[0], |m, next| matmul(&m, next));
        [m[0][0], m[0][1], m[0][2], m[1][0], m[1][1], m[1][2]]
    }
}

/// The op behind `Affine` and `ShiftScaleRotate`.
pub(crate) struct RandomAffine {
    keys: Vec<String>,
    targets: Targets,
    masks: Vec<bool>,
    p: f64,
    nearest: bool,
    border: BorderMode,
    fill: f64,
    fill_mask: f64,
    pub(crate) ranges: AffineRanges,
}

impl RandomAffine {
    fn new(ctx: &CreateContext<'_>, c: WarpConfig, ranges: AffineRanges) -> Result<Self> {
        let nearest = match c.interpolation {
            Interpolation::Bilinear => false,
            Interpolation::Nearest => true,
            Interpolation::Bicubic => {
                return Err(Error::config(
                    "interpolation",
                    "affine warps support \"bilinear\" and \"nearest\"",
                ))
            }
        };
        let keys = paired_keys(ctx)?;
        Ok(RandomAffine {
            targets: Targets::new(
                &keys,
                &c.bboxes,
                c.bbox_params,
                &c.keypoints,
                c.keypoint_params,
            )?,
            masks: mask_flags(&keys, &c.masks)?,
            keys,
            p: probability("p", c.p)?,
            nearest,
            border: c.border_mode,
            fill: c.fill,
            fill_mask: c.fill_mask,
            ranges,
        })
    }

    /// The draw of the call seeded `seed` on an `height × width` sample; `None` when the `p`
    /// draw says skip.
    pub(crate) fn params(&self, height: i64, width: i64, seed: u64) -> Option<AffineDraw> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.p {
            return None;
        }
        Some(self.ranges.draw(&mut rng, height, width))
    }
}

impl NumpyOp for RandomAffine {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let layouts = same_size(&pixels.keys, &pixels.inputs)?;
        let (h, w) = (layouts[0].height, layouts[0].width);
        let Some(draw) = self.params(h, w, ctx.seed) else {
            let same = pixels.inputs.iter().map(|x| x.shallow_clone()).collect();
            let keep = Geometry::Dihedral(Move::Keep);
            return self.targets.merge(&self.keys, inputs, same, &keep, (h, w));
        };
        let m = draw.matrix(h, w);
        let out = pixels
            .inputs
            .iter()
            .zip(&layouts)
            .zip(pixels.index.iter().map(|&i| self.masks[i]))
            .map(|((x, layout), mask)| {
                let sampling = Sampling {
                    nearest: mask || self.nearest,
                    border: self.border,
                    fill: if mask { self.fill_mask } else { self.fill },
                };
                warp_affine(layout, x, &m, sampling)
            })
            .collect::<Result<Vec<_>>>()?;
        let g = Geometry::Affine {
            points: m,
            boxes: draw.matrix_about(w as f64 / 2.0, h as f64 / 2.0),
            reflect: matches!(self.border, BorderMode::Reflect | BorderMode::Reflect101),
            scale: draw.scale[0].max(draw.scale[1]),
        };
        self.targets.merge(&self.keys, inputs, out, &g, (h, w))
    }
}

/// Random scale, translation, rotation and shear about the centre (albumentations' `Affine`).
pub struct Affine(pub(crate) RandomAffine);

impl FromConfig for Affine {
    type Config = AffineConfig;
    fn from_config(c: AffineConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let translate = match (c.translate_percent, c.translate_px) {
            (Some(_), Some(_)) => {
                return Err(Error::config(
                    "translate_percent",
                    "give translate_percent or translate_px, not both",
                ))
            }
            (Some(t), None) => {
                let b = t.bounds("translate_percent")?;
                Translate::Percent([b, b])
            }
            (None, t) => {
                let [lo, hi] = t.unwrap_or(Span::Value(0.0)).bounds("translate_px")?;
                if lo.fract() != 0.0 || hi.fract() != 0.0 {
                    return Err(Error::config(
                        "translate_px",
                        format!("needs whole pixels, got [{lo}, {hi}]"),
                    ));
                }
                let b = [lo as i64, hi as i64];
                Translate::Pixels([b, b])
            }
        };
        let scale = c.scale.bounds("scale")?;
        if scale[0] <= 0.0 {
            return Err(Error::config(
                "scale",
                format!("needs positive factors, got {scale:?}"),
            ));
        }
        let shear = c.shear.bounds("shear")?;
        let ranges = AffineRanges {
            translate,
            shear: [shear, shear],
            scale: [scale, scale],
            keep_ratio: c.keep_ratio,
            rotate: c.rotate.bounds("rotate")?,
        };
        RandomAffine::new(ctx, warp_config!(c), ranges).map(Affine)
    }
}

/// Random shift, scale and rotation (albumentations' `ShiftScaleRotate`, an `Affine`).
pub struct ShiftScaleRotate(pub(crate) RandomAffine);

impl FromConfig for ShiftScaleRotate {
    type Config = ShiftScaleRotateConfig;
    fn from_config(c: ShiftScaleRotateConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let shift_x = range("shift_limit_x", c.shift_limit_x.unwrap_or(c.shift_limit))?;
        let shift_y = range("shift_limit_y", c.shift_limit_y.unwrap_or(c.shift_limit))?;
        let [lo, hi] = range("scale_limit", c.scale_limit)?;
        let scale = [1.0 + lo, 1.0 + hi];
        if scale[0] <= 0.0 {
            return Err(Error::config(
                "scale_limit",
                format!("needs factors 1 + limit > 0, got {scale:?}"),
            ));
        }
        let ranges = AffineRanges {
            translate: Translate::Percent([shift_x, shift_y]),
            shear: [[0.0, 0.0]; 2],
            scale: [scale, scale],
            keep_ratio: false,
            rotate: range("rotate_limit", c.rotate_limit)?,
        };
        RandomAffine::new(ctx, warp_config!(c), ranges).map(ShiftScaleRotate)
    }
}

impl NumpyOp for Affine {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.0.forward(inputs, ctx)
    }
}

impl NumpyOp for ShiftScaleRotate {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.0.forward(inputs, ctx)
    }
}
