//! `Perspective` after albumentations 2.0.8 (`keep_size = true`, `fit_output = false`): the
//! four corners move inwards by `|N(0, scale)| mod 0.32` of the size, the moved quad is
//! mapped onto the image by `cv2.getPerspectiveTransform`, scaled by `size / max side` of the
//! quad, and every input is resampled through it like `cv2.warpPerspective` (masks nearest).
//! The normals come from our seeded generator, so warps match albumentations' for the same
//! corner draws only.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::color::uniform;
use crate::distort::{MapWarp, TargetConfig};
use crate::geometry::Geometry;
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
    /// Output keeps the input size; only `true` is supported (default true).
    #[serde(default = "yes")]
    pub keep_size: bool,
    /// Grow the canvas to hold the whole warped image; only `false` is supported.
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
}

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
        if !c.keep_size || c.fit_output {
            return Err(Error::config(
                if c.fit_output { "fit_output" } else { "keep_size" },
                "only keep_size = true and fit_output = false are supported (outputs keep the input size)",
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
        Ok(Perspective { warp, scales })
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

/// albumentations' `order_points` (float32 tl, tr, br, bl by position) and
/// `compute_perspective_params`: the matrix, `max_width`, `max_height`.
pub(crate) fn perspective_params(
    points: [[f64; 2]; 4],
    height: i64,
    width: i64,
) -> ([f64; 9], i64, i64) {
    let mut sorted = points;
    sorted.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let pair = |a: [f64; 2], b: [f64; 2]| if a[1] < b[1] { (a, b) } else { (b, a) };
    let (tl, bl) = pair(sorted[0], sorted[1]);
    let (tr, br) = pair(sorted[2], sorted[3]);
    let mut q = [tl, tr, br, bl].map(|p| p.map(|v| v as f32));
    let max_width = adjust(&mut q, 1, 0).max(adjust(&mut q, 2, 3));
    let max_height = adjust(&mut q, 2, 1).max(adjust(&mut q, 3, 0));
    let (w, h) = (width as f32, height as f32);
    let dst = [[0.0, 0.0], [w, 0.0], [w, h], [0.0, h]];
    (
        get_perspective_transform(&q, &dst),
        max_width as i64,
        max_height as i64,
    )
}

/// albumentations' `adjust_dimension` on corners `a` and `b` of `q` (float32): their
/// distance, or 2 after pushing them apart when they are closer than that.
fn adjust(q: &mut [[f32; 2]; 4], a: usize, b: usize) -> f32 {
    let size = ((q[a][0] - q[b][0]).powi(2) + (q[a][1] - q[b][1]).powi(2)).sqrt();
    if size >= 2.0 {
        return size;
    }
    let step = (2.0 - size) / 2.0;
    // numpy's four masked in-place updates, each mask taken after the previous update.
    let [pa, pb] = if a < b {
        let (lo, hi) = q.split_at_mut(b);
        [&mut lo[a], &mut hi[0]]
    } else {
        let (lo, hi) = q.split_at_mut(a);
        [&mut hi[0], &mut lo[b]]
    };
    for (u, v) in pa.iter_mut().zip(pb.iter_mut()) {
        if *u > *v {
            *u += step;
        }
        if *u > *v {
            *v -= step;
        }
        if *u <= *v {
            *u -= step;
        }
        if *u <= *v {
            *v += step;
        }
    }
    2.0
}

/// `cv2.getPerspectiveTransform`: the homography taking `src` to `dst`, from its 8 × 8
/// system solved in float64 (Gaussian elimination with partial pivoting).
fn get_perspective_transform(src: &[[f32; 2]; 4], dst: &[[f32; 2]; 4]) -> [f64; 9] {
    let mut a = [[0.0f64; 9]; 8];
    for i in 0..4 {
        let (x, y) = (f64::from(src[i][0]), f64::from(src[i][1]));
        let (u, v) = (f64::from(dst[i][0]), f64::from(dst[i][1]));
        a[i] = [x, y, 1.0, 0.0, 0.0, 0.0, -x * u, -y * u, u];
        a[i + 4] = [0.0, 0.0, 0.0, x, y, 1.0, -x * v, -y * v, v];
    }
    for col in 0..8 {
        let pivot = (col..8)
            .max_by(|&r, &s| a[r][col].abs().total_cmp(&a[s][col].abs()))
            .unwrap_or(col);
        a.swap(col, pivot);
        if a[col][col] == 0.0 {
            continue;
        }
        for row in col + 1..8 {
            let f = a[row][col] / a[col][col];
            let pivot_row = a[col];
            for (cell, p) in a[row].iter_mut().zip(pivot_row).skip(col) {
                *cell -= f * p;
            }
        }
    }
    let mut m = [0.0; 9];
    for row in (0..8).rev() {
        let tail: f64 = (row + 1..8).map(|k| a[row][k] * m[k]).sum();
        m[row] = if a[row][row] == 0.0 {
            0.0
        } else {
            (a[row][8] - tail) / a[row][row]
        };
    }
    m[8] = 1.0;
    m
}

/// `m` (row-major 3 × 3) scaled as albumentations' `keep_size` does and inverted: the
/// map from output pixels back to input pixels.
pub(crate) fn inverse_warp(
    m: &[f64; 9],
    height: i64,
    width: i64,
    max_h: i64,
    max_w: i64,
) -> [f64; 9] {
    let (sx, sy) = (width as f64 / max_w as f64, height as f64 / max_h as f64);
    let a = [
        m[0] * sx,
        m[1] * sx,
        m[2] * sx,
        m[3] * sy,
        m[4] * sy,
        m[5] * sy,
        m[6],
        m[7],
        m[8],
    ];
    let cof = |r0: usize, r1: usize, c0: usize, c1: usize| {
        a[r0 * 3 + c0] * a[r1 * 3 + c1] - a[r0 * 3 + c1] * a[r1 * 3 + c0]
    };
    let adj = [
        cof(1, 2, 1, 2),
        -cof(0, 2, 1, 2),
        cof(0, 1, 1, 2),
        -cof(1, 2, 0, 2),
        cof(0, 2, 0, 2),
        -cof(0, 1, 0, 2),
        cof(1, 2, 0, 1),
        -cof(0, 2, 0, 1),
        cof(0, 1, 0, 1),
    ];
    let det = a[0] * adj[0] + a[1] * adj[3] + a[2] * adj[6];
    let d = if det != 0.0 { 1.0 / det } else { 0.0 };
    adj.map(|v| v * d)
}

impl NumpyOp for Perspective {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let (h, w) = self.warp.size(inputs)?;
        let Some(jitter) = self.jitter(ctx.seed) else {
            return self.warp.keep(inputs);
        };
        let (m, max_w, max_h) = perspective_params(corners(&jitter, h, w), h, w);
        let inv = inverse_warp(&m, h, w, max_h, max_w);
        let opts = (fe_plugin_api::tch::Kind::Double, inputs[0].device());
        let xs = Tensor::f_arange(w, opts)?.f_view([1, w])?;
        let ys = Tensor::f_arange(h, opts)?.f_view([h, 1])?;
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
            scale: (w as f64 / max_w as f64, h as f64 / max_h as f64),
        };
        self.warp.warp(inputs, &src_x, &src_y, &g)
    }
}
