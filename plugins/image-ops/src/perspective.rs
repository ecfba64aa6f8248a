//! `Perspective` after albumentations 2.0.8: the four corners move inwards by
//! `|N(0, scale)| mod 0.32` of the size, the moved quad is mapped onto the image by
//! `cv2.getPerspectiveTransform` (`fit_output` then grows the canvas to hold the whole warped
//! image), and every input is resampled through it like `cv2.warpPerspective` (masks
//! nearest): onto the input size, scaled by `size / canvas side` (`keep_size`), or onto the
//! `max_width × max_height` canvas itself. The normals come from our seeded generator, so
//! warps match albumentations' for the same corner draws only.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::color::uniform;
use crate::distort::{MapWarp, TargetConfig};
use crate::geometry::Geometry;
pub(crate) use crate::homography::perspective_params;
use crate::homography::{expand_transform, inverse_warp};
use crate::keypoints::KeypointParamsConfig;
use crate::layout::rng;
use crate::{BorderMode, Interpolation, Span};

/// `Perspective` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct PerspectiveConfig {
    /// Range of the corner jitter's standard deviation, as a fraction of the size: `s` means
    /// `[0, s]` (default [0.05, 0.1]).
    #[serde(default = "scales")]
    pub scale: Span,
    /// Resize the warped canvas back to the input size (default true); `false` outputs the
    /// `max_width × max_height` canvas, whose size varies from sample to sample.
    #[serde(default = "yes")]
    pub keep_size: bool,
    /// Grow the canvas so the whole warped image shows (default false).
    #[serde(default)]
    pub fit_output: bool,
    /// Image sampling: `"bilinear"` (default) or `"nearest"`; masks always use nearest.
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
    /// What fills points from outside the image (default `"constant"`).
    #[serde(default = "constant")]
    pub border_mode: BorderMode,
    /// Image fill for `"constant"` (default 0).
    #[serde(default, alias = "value")]
    pub fill: f64,
    /// Mask fill for `"constant"` (default 0).
    #[serde(default, alias = "mask_value")]
    pub fill_mask: f64,
    /// Inputs that are label masks.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
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

fn scales() -> Span {
    Span::Range([0.05, 0.1])
}
fn yes() -> bool {
    true
}
fn bilinear() -> Interpolation {
    Interpolation::Bilinear
}
fn constant() -> BorderMode {
    BorderMode::Constant
}
fn half() -> f64 {
    0.5
}

/// Random corner moves and the warp through them.
pub struct Perspective {
    warp: MapWarp,
    scales: [f64; 2],
    keep_size: bool,
    fit_output: bool,
}

/// The most pixels a `keep_size = false` output may have beyond the input's own: a
/// `fit_output` canvas grows without bound as a corner folds towards the line through its
/// neighbours (albumentations would try to allocate it).
const MAX_CANVAS: i64 = 1 << 26;

impl FromConfig for Perspective {
    type Config = PerspectiveConfig;
    fn from_config(c: PerspectiveConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let scales = match c.scale {
            Span::Value(s) => [0.0, s],
            Span::Range(r) => r,
        };
        if !(0.0 <= scales[0] && scales[0] <= scales[1] && scales[1].is_finite()) {
            return Err(Error::config(
                "scale",
                format!("needs 0 <= lo <= hi, got {scales:?}"),
            ));
        }
        let warp = MapWarp::new(
            ctx,
            "Perspective",
            c.interpolation,
            c.border_mode,
            [c.fill, c.fill_mask],
            &c.masks,
            c.p,
            TargetConfig {
                bboxes: &c.bboxes,
                bbox_params: c.bbox_params,
                keypoints: &c.keypoints,
                keypoint_params: c.keypoint_params,
            },
        )?;
        Ok(Perspective {
            warp,
            scales,
            keep_size: c.keep_size,
            fit_output: c.fit_output,
        })
    }
}

impl Perspective {
    /// The corner jitters `N(0, scale)` of the call seeded `seed` (tl, tr, br, bl; x then
    /// y), drawn after the scale; `None` when the `p` draw says skip.
    pub(crate) fn jitter(&self, seed: u64) -> Option<[f64; 8]> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.warp.p {
            return None;
        }
        let scale = uniform(&mut rng, self.scales);
        let mut out = [0.0; 8];
        for pair in out.chunks_exact_mut(2) {
            // Box-Muller: two independent normals from two uniforms in (0, 1].
            let (u1, u2) = (1.0 - rng.random::<f64>(), rng.random::<f64>());
            let r = (-2.0 * u1.ln()).sqrt();
            let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
            pair[0] = scale * r * c;
            pair[1] = scale * r * s;
        }
        Some(out)
    }

    /// albumentations' matrix, `max_width` and `max_height` for the corner `jitter` on an
    /// `height × width` image (expanded under `fit_output`).
    pub(crate) fn matrix(
        &self,
        jitter: &[f64; 8],
        height: i64,
        width: i64,
    ) -> ([f64; 9], i64, i64) {
        let (m, max_w, max_h) = perspective_params(corners(jitter, height, width), height, width);
        if self.fit_output {
            expand_transform(&m, height, width)
        } else {
            (m, max_w, max_h)
        }
    }

    /// The `(x, y)` scale onto the output and the output `(height, width)` for a
    /// `max_w × max_h` canvas: the input size under `keep_size`, else the canvas.
    pub(crate) fn output(
        &self,
        (h, w): (i64, i64),
        max_w: i64,
        max_h: i64,
    ) -> Result<((f64, f64), (i64, i64))> {
        if max_w < 1 || max_h < 1 {
            return Err(Error::msg(format!(
                "Perspective: fit_output drew a {max_h}x{max_w} canvas (the warp folds the image onto a line); lower `scale`"
            )));
        }
        if self.keep_size {
            return Ok(((w as f64 / max_w as f64, h as f64 / max_h as f64), (h, w)));
        }
        if max_w.saturating_mul(max_h) > MAX_CANVAS.max(h * w) {
            return Err(Error::msg(format!(
                "Perspective: fit_output drew a {max_h}x{max_w} canvas for a {h}x{w} image (over {MAX_CANVAS} pixels: a corner folded nearly onto the line through its neighbours); lower `scale` or set keep_size = true"
            )));
        }
        Ok(((1.0, 1.0), (max_h, max_w)))
    }
}

/// albumentations' `generate_perspective_points` for the jitters: the corners (tl, tr, br,
/// bl) in pixels, each moved inwards.
pub(crate) fn corners(jitter: &[f64; 8], height: i64, width: i64) -> [[f64; 2]; 4] {
    let j = |i: usize| jitter[i].abs() % 0.32;
    let (w, h) = (width as f64, height as f64);
    [
        [j(0) * w, j(1) * h],
        [(1.0 - j(2)) * w, j(3) * h],
        [(1.0 - j(4)) * w, (1.0 - j(5)) * h],
        [j(6) * w, (1.0 - j(7)) * h],
    ]
}

impl NumpyOp for Perspective {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let (h, w) = self.warp.size(inputs)?;
        let Some(jitter) = self.jitter(ctx.seed) else {
            return self.warp.keep(inputs);
        };
        let (m, max_w, max_h) = self.matrix(&jitter, h, w);
        let (resize, (out_h, out_w)) = self.output((h, w), max_w, max_h)?;
        let inv = inverse_warp(&m, resize);
        let opts = (fe_plugin_api::tch::Kind::Double, inputs[0].device());
        let xs = Tensor::f_arange(out_w, opts)?.f_view([1, out_w])?;
        let ys = Tensor::f_arange(out_h, opts)?.f_view([out_h, 1])?;
        let row = |r: usize| -> Result<Tensor> {
            Ok(xs
                .f_mul_scalar(inv[3 * r])?
                .f_add(&ys.f_mul_scalar(inv[3 * r + 1])?)?
                .f_add_scalar(inv[3 * r + 2])?)
        };
        // OpenCV's `W = W ? 1 / W : 0`.
        let denom = row(2)?;
        let zero = denom.f_eq(0.0)?;
        let scale = denom.f_reciprocal()?.f_masked_fill(&zero, 0.0)?;
        let src_x = row(0)?.f_mul(&scale)?;
        let src_y = row(1)?.f_mul(&scale)?;
        let g = Geometry::Perspective {
            matrix: m,
            scale: resize,
            out: (out_h, out_w),
        };
        self.warp.warp(inputs, &src_x, &src_y, &g)
    }
}
