//! `PiecewiseAffine` after albumentations 2.0.8: a regular `nb_rows × nb_cols` grid of
//! control points spanning the image, each moved by normal noise, and every input
//! resampled through the float32 maps like `cv2.remap` (masks nearest).
//!
//! Despite the name, albumentations 2.0.8 (`create_piecewise_affine_maps`) no longer warps
//! mesh triangles (1.x did, through scikit-image): every output pixel reads from the
//! inverse-square-distance weighted mean of all moved control points, `1 / (d² + 1e-8)`,
//! in float32 with numpy's pairwise sums, clipped into the image. The grid spans the whole
//! image, so no pixel is outside the mesh. This is ported operation for operation; the
//! normals come from our seeded generator, so maps match albumentations' for the same
//! jitter only.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::color::uniform;
use crate::distort::{direct_method, numpy_sum, MapWarp, TargetConfig};
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::rng;
use crate::remap_targets::SourceMap;
use crate::{BorderMode, Interpolation, Span};

/// A grid size: `n` exactly, or uniformly from the integers in `[lo, hi]`.
#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(untagged)]
pub enum GridSize {
    /// Exactly this many points.
    One(i64),
    /// Uniformly from `[lo, hi]`, both included.
    Range([i64; 2]),
}

/// `PiecewiseAffine` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct PiecewiseAffineConfig {
    /// Range of the jitter's standard deviation: `3 σ` as a fraction of the shorter side
    /// (or in pixels with `absolute_scale`); `s` means `[0, s]` (default [0.03, 0.05]).
    #[serde(default = "scales")]
    pub scale: Span,
    /// Rows of control points, at least 2: `n` or `[lo, hi]` drawn per call (default 4).
    #[serde(default = "four")]
    pub nb_rows: GridSize,
    /// Columns of control points, at least 2: `n` or `[lo, hi]` drawn per call (default 4).
    #[serde(default = "four")]
    pub nb_cols: GridSize,
    /// Read `scale` in pixels rather than as a fraction of the shorter side (default false).
    #[serde(default)]
    pub absolute_scale: bool,
    /// Image sampling: `"bilinear"` (default) or `"nearest"`.
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
    /// Mask sampling: `"nearest"` (the default, label values stay labels) or `"bilinear"`.
    #[serde(default = "nearest")]
    pub mask_interpolation: Interpolation,
    /// What fills points from outside the image (default `"constant"`).
    #[serde(default = "constant")]
    pub border_mode: BorderMode,
    /// Image fill for `"constant"` (default 0; FastEstimator's `cval`).
    #[serde(default, alias = "value", alias = "cval")]
    pub fill: f64,
    /// Mask fill for `"constant"` (default 0; FastEstimator's `cval_mask`).
    #[serde(default, alias = "mask_value", alias = "cval_mask")]
    pub fill_mask: f64,
    /// Inputs that are label masks.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
    /// How keypoints follow the map: `"mask"` (default) or `"direct"`, albumentations'
    /// `keypoint_remapping_method`.
    #[serde(default = "mask_method")]
    pub keypoint_remapping_method: String,
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
    Span::Range([0.03, 0.05])
}
fn four() -> GridSize {
    GridSize::One(4)
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
fn half() -> f64 {
    0.5
}
fn mask_method() -> String {
    "mask".to_owned()
}

/// Random control point moves and the warp through them.
pub struct PiecewiseAffine {
    warp: MapWarp,
    scales: [f64; 2],
    rows: [usize; 2],
    cols: [usize; 2],
    absolute: bool,
    direct: bool,
}

/// `[lo, hi]` of a grid size, both at least 2.
fn grid_bounds(field: &str, size: GridSize) -> Result<[usize; 2]> {
    let [lo, hi] = match size {
        GridSize::One(n) => [n, n],
        GridSize::Range(r) => r,
    };
    if 2 <= lo && lo <= hi {
        Ok([lo as usize, hi as usize])
    } else {
        Err(Error::config(
            field,
            format!("needs 2 <= lo <= hi control points, got [{lo}, {hi}]"),
        ))
    }
}

impl FromConfig for PiecewiseAffine {
    type Config = PiecewiseAffineConfig;
    fn from_config(c: PiecewiseAffineConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let scales = match c.scale {
            Span::Value(s) => [0.0, s],
            Span::Range(r) => r,
        };
        if !(0.0 <= scales[0] && scales[0] <= scales[1] && scales[1].is_finite()) {
            return Err(Error::config(
                "scale",
                format!("needs finite 0 <= lo <= hi, got {scales:?}"),
            ));
        }
        let warp = MapWarp::new(
            ctx,
            "PiecewiseAffine",
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
        )?
        .mask_interpolation(c.mask_interpolation)?;
        Ok(PiecewiseAffine {
            warp,
            scales,
            rows: grid_bounds("nb_rows", c.nb_rows)?,
            cols: grid_bounds("nb_cols", c.nb_cols)?,
            absolute: c.absolute_scale,
            direct: direct_method(&c.keypoint_remapping_method)?,
        })
    }
}

/// One call's draws, in albumentations' order (rows, columns, scale, then the normals).
#[derive(Debug, Clone)]
pub(crate) struct Draw {
    pub rows: usize,
    pub cols: usize,
    pub scale: f64,
    /// The normals' standard deviation in pixels: `scale / 3`, or `scale · min(H, W) / 3`.
    pub jitter_scale: f64,
    /// `rows × cols × 2` standard normals, row-major, `(dy, dx)` per point as albumentations
    /// indexes its `jitter[i, j]`; the jitter is `jitter_scale` times them.
    pub normals: Vec<f64>,
}

/// `n` standard normals by Box-Muller: two from two uniforms in (0, 1].
fn normals(rng: &mut ChaCha8Rng, n: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        let (u1, u2) = (1.0 - rng.random::<f64>(), rng.random::<f64>());
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
        out.extend([r * c, r * s]);
    }
    out.truncate(n);
    out
}

impl PiecewiseAffine {
    /// The draws of the call seeded `seed` on an image `height × width`; `None` when the
    /// `p` draw says skip.
    pub(crate) fn draw(&self, height: i64, width: i64, seed: u64) -> Option<Draw> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.warp.p {
            return None;
        }
        let rows = rng.random_range(self.rows[0]..=self.rows[1]);
        let cols = rng.random_range(self.cols[0]..=self.cols[1]);
        let scale = uniform(&mut rng, self.scales);
        let jitter_scale = if self.absolute {
            scale / 3.0
        } else {
            scale * height.min(width) as f64 / 3.0
        };
        Some(Draw {
            rows,
            cols,
            scale,
            jitter_scale,
            normals: normals(&mut rng, rows * cols * 2),
        })
    }
}

/// `np.linspace(0, n - 1, count, dtype=np.float32)`: float64 steps, the end exact.
fn linspace(n: usize, count: usize) -> Vec<f32> {
    let stop = n.saturating_sub(1) as f64;
    let step = stop / count.saturating_sub(1).max(1) as f64;
    (0..count)
        .map(|k| {
            if k + 1 == count {
                stop
            } else {
                k as f64 * step
            }
        })
        .map(|v| v as f32)
        .collect()
}

/// albumentations' `create_piecewise_affine_maps` for `draw`: float32 `(map_x, map_y)`,
/// row-major `height × width`.
pub(crate) fn piecewise_maps(draw: &Draw, height: usize, width: usize) -> [Vec<f32>; 2] {
    let (ys, xs) = (linspace(height, draw.rows), linspace(width, draw.cols));
    let (top_x, top_y) = (
        width.saturating_sub(1) as f32,
        height.saturating_sub(1) as f32,
    );
    let n = draw.rows * draw.cols;
    // numpy's `normal(0, s)` is `0 + s · z` in float64, then cast to float32.
    let jitter = |k: usize| (draw.jitter_scale * draw.normals[k]) as f32;
    let (mut src, mut dst_x, mut dst_y) = (Vec::new(), Vec::new(), Vec::new());
    for (i, &y) in ys.iter().enumerate() {
        for (j, &x) in xs.iter().enumerate() {
            let k = 2 * (i * draw.cols + j);
            src.push((x, y));
            dst_x.push((x + jitter(k + 1)).clamp(0.0, top_x));
            dst_y.push((y + jitter(k)).clamp(0.0, top_y));
        }
    }
    // numpy adds the Python float 1e-8 to a float32 array: rounded to float32 first.
    let eps = 1e-8f64 as f32;
    let (mut weights, mut terms) = (vec![0f32; n], vec![0f32; n]);
    let (mut map_x, mut map_y) = (
        Vec::with_capacity(height * width),
        Vec::with_capacity(height * width),
    );
    for i in 0..height {
        for j in 0..width {
            let (px, py) = (j as f32, i as f32);
            for (w, &(x, y)) in weights.iter_mut().zip(&src) {
                let (dx, dy) = (px - x, py - y);
                *w = 1.0 / (dx * dx + dy * dy + eps);
            }
            let total = numpy_sum(&weights);
            weights.iter_mut().for_each(|w| *w /= total);
            let mut mean = |dst: &[f32]| {
                for ((t, w), d) in terms.iter_mut().zip(&weights).zip(dst) {
                    *t = w * d;
                }
                numpy_sum(&terms)
            };
            map_x.push(mean(&dst_x).clamp(0.0, top_x));
            map_y.push(mean(&dst_y).clamp(0.0, top_y));
        }
    }
    [map_x, map_y]
}

impl NumpyOp for PiecewiseAffine {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let (h, w) = self.warp.size(inputs)?;
        let Some(draw) = self.draw(h, w, ctx.seed) else {
            return self.warp.keep(inputs);
        };
        // albumentations makes no maps for a zero scale (and then fails to remap); nothing
        // moves, so the inputs stay as they are.
        if draw.scale <= 0.0 {
            return self.warp.keep(inputs);
        }
        let [mx, my] = piecewise_maps(&draw, h as usize, w as usize);
        let device = inputs[0].device();
        let as_tensor = |m: &[f32]| -> Result<Tensor> {
            let v: Vec<f64> = m.iter().map(|&v| f64::from(v)).collect();
            Ok(Tensor::f_from_slice(&v)?
                .f_view([h, w])?
                .f_to_device(device)?)
        };
        let (src_x, src_y) = (as_tensor(&mx)?, as_tensor(&my)?);
        let g = Geometry::Remap(SourceMap {
            height: h,
            width: w,
            map_x: mx,
            map_y: my,
            direct: self.direct,
        });
        self.warp.warp(inputs, &src_x, &src_y, &g)
    }
}
