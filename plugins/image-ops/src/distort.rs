//! `GridDistortion` after albumentations 2.0.8: the image is cut into `num_steps` bands
//! per axis whose widths are stretched by random factors, and every input (image and
//! masks alike) is resampled through the resulting separable map like `cv2.remap`.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::color::{range, uniform};
use crate::flips::Move;
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{mask_flags, paired_keys, probability, rng, same_size};
use crate::remap_targets::SourceMap;
use crate::targets::Targets;
use crate::warp::{remap_onto, Sampling};
use crate::{BorderMode, Interpolation, Limit};

/// `GridDistortion` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct GridDistortionConfig {
    /// Bands per axis (default 5).
    #[serde(default = "five")]
    pub num_steps: i64,
    /// Range of each band's stretch: `l` for `[-l, l]`, or `[lo, hi]`, lo > -1 (default 0.3).
    #[serde(default = "limit")]
    pub distort_limit: Limit,
    /// Rescale the stretches so the bands span the image exactly (default true).
    #[serde(default = "yes")]
    pub normalized: bool,
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

fn five() -> i64 {
    5
}
fn limit() -> Limit {
    Limit::Symmetric(0.3)
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
fn mask_method() -> String {
    "mask".to_owned()
}

/// The box and keypoint keys of a per-pixel-map warp's config.
pub(crate) struct TargetConfig<'a> {
    pub bboxes: &'a [String],
    pub bbox_params: Option<BboxParamsConfig>,
    pub keypoints: &'a [String],
    pub keypoint_params: Option<KeypointParamsConfig>,
}

/// `keypoint_remapping_method`: `true` for `"direct"`, `false` for `"mask"`.
pub(crate) fn direct_method(method: &str) -> Result<bool> {
    match method {
        "mask" => Ok(false),
        "direct" => Ok(true),
        other => Err(Error::config(
            "keypoint_remapping_method",
            format!("expected \"mask\" or \"direct\", got {other:?}"),
        )),
    }
}

/// What every per-pixel-map warp shares: keys, masks, targets, probability and sampling.
pub(crate) struct MapWarp {
    keys: Vec<String>,
    masks: Vec<bool>,
    targets: Targets,
    pub(crate) p: f64,
    nearest: bool,
    mask_nearest: bool,
    border: BorderMode,
    fill: f64,
    fill_mask: f64,
}

impl MapWarp {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        ctx: &CreateContext<'_>,
        what: &str,
        interpolation: Interpolation,
        border: BorderMode,
        [fill, fill_mask]: [f64; 2],
        masks: &[String],
        p: f64,
        targets: TargetConfig<'_>,
    ) -> Result<Self> {
        let nearest = match interpolation {
            Interpolation::Bilinear => false,
            Interpolation::Nearest => true,
            Interpolation::Bicubic => {
                return Err(Error::config(
                    "interpolation",
                    format!("{what} supports \"bilinear\" and \"nearest\""),
                ))
            }
        };
        let keys = paired_keys(ctx)?;
        Ok(MapWarp {
            masks: mask_flags(&keys, masks)?,
            targets: Targets::new(
                &keys,
                targets.bboxes,
                targets.bbox_params,
                targets.keypoints,
                targets.keypoint_params,
            )?,
            keys,
            p: probability("p", p)?,
            nearest,
            mask_nearest: true,
            border,
            fill,
            fill_mask,
        })
    }

    /// Masks sampled with `interpolation` instead of nearest (albumentations'
    /// `mask_interpolation`).
    pub(crate) fn mask_interpolation(mut self, interpolation: Interpolation) -> Result<Self> {
        self.mask_nearest = match interpolation {
            Interpolation::Nearest => true,
            Interpolation::Bilinear => false,
            Interpolation::Bicubic => {
                return Err(Error::config(
                    "mask_interpolation",
                    "supports \"nearest\" and \"bilinear\"",
                ))
            }
        };
        Ok(self)
    }

    /// The shared height and width of the pixel inputs.
    pub(crate) fn size(&self, inputs: &[&Tensor]) -> Result<(i64, i64)> {
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let layouts = same_size(&pixels.keys, &pixels.inputs)?;
        Ok((layouts[0].height, layouts[0].width))
    }

    /// The inputs unchanged (boxes still clipped and filtered, as albumentations' `Compose`
    /// does around a transform that did not fire).
    pub(crate) fn keep(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let size = self.size(inputs)?;
        let same = pixels.inputs.iter().map(|x| x.shallow_clone()).collect();
        let keep = Geometry::Dihedral(Move::Keep);
        self.targets.merge(&self.keys, inputs, same, &keep, size)
    }

    /// Every pixel input resampled at `(src_y, src_x)` (float64, broadcastable to `g`'s output
    /// size, `(H, W)` but for `Perspective`'s other canvases); boxes and keypoints moved by
    /// `g`, the same warp in numbers.
    pub(crate) fn warp(
        &self,
        inputs: &[&Tensor],
        src_x: &Tensor,
        src_y: &Tensor,
        g: &Geometry,
    ) -> Result<Vec<Tensor>> {
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let layouts = same_size(&pixels.keys, &pixels.inputs)?;
        let size = (layouts[0].height, layouts[0].width);
        let out_size = g.out_size(size);
        let out = pixels
            .inputs
            .iter()
            .zip(&layouts)
            .zip(pixels.index.iter().map(|&i| self.masks[i]))
            .map(|((x, layout), mask)| {
                let sampling = Sampling {
                    nearest: if mask {
                        self.mask_nearest
                    } else {
                        self.nearest
                    },
                    border: self.border,
                    fill: if mask { self.fill_mask } else { self.fill },
                };
                remap_onto(layout, x, src_x, src_y, out_size, sampling)
            })
            .collect::<Result<Vec<_>>>()?;
        self.targets.merge(&self.keys, inputs, out, g, size)
    }
}

/// Random band stretches and the warp through them.
pub struct GridDistortion {
    warp: MapWarp,
    steps: usize,
    limit: [f64; 2],
    normalized: bool,
    direct: bool,
}

impl FromConfig for GridDistortion {
    type Config = GridDistortionConfig;
    fn from_config(c: GridDistortionConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        if c.num_steps < 1 {
            return Err(Error::config(
                "num_steps",
                format!("must be at least 1, got {}", c.num_steps),
            ));
        }
        let limit = range("distort_limit", c.distort_limit)?;
        if limit[0] <= -1.0 {
            return Err(Error::config(
                "distort_limit",
                format!("needs lo > -1 (bands keep a positive width), got {limit:?}"),
            ));
        }
        let warp = MapWarp::new(
            ctx,
            "GridDistortion",
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
        Ok(GridDistortion {
            warp,
            steps: c.num_steps as usize,
            limit,
            normalized: c.normalized,
            direct: direct_method(&c.keypoint_remapping_method)?,
        })
    }
}

/// numpy's `np.sum` of a float vector: pairwise, eight running sums per block of up to 128
/// values, blocks halved (at multiples of 8) above that, so sums round as albumentations'.
pub(crate) fn numpy_sum<T: Copy + Default + std::ops::Add<Output = T>>(v: &[T]) -> T {
    if v.len() < 8 {
        return v.iter().fold(T::default(), |a, &b| a + b);
    }
    if v.len() > 128 {
        let half = v.len() / 2;
        let half = half - half % 8;
        return numpy_sum(&v[..half]) + numpy_sum(&v[half..]);
    }
    let mut r: [T; 8] = std::array::from_fn(|j| v[j]);
    let full = v.len() - v.len() % 8;
    for chunk in v[8..full].chunks_exact(8) {
        for (acc, &x) in r.iter_mut().zip(chunk) {
            *acc = *acc + x;
        }
    }
    let mut sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for &x in &v[full..] {
        sum = sum + x;
    }
    sum
}

/// albumentations' `normalize_grid_distortion_steps` for one axis of length `n`.
fn normalize(n: usize, steps: usize, mut stretch: Vec<f64>) -> Vec<f64> {
    let step = n / steps;
    let last = n.min((steps + 1) * step) - steps * step;
    if let Some(end) = stretch.last_mut() {
        *end *= last as f64 / step as f64;
    }
    let t = n as f64 / (n as f64 / steps as f64).floor();
    let scale = t / numpy_sum(&stretch);
    stretch.iter().map(|s| s * scale).collect()
}

/// albumentations' `generate_grid` for one axis: source coordinate of every output index,
/// each band a `np.linspace`, stored as float32.
pub(crate) fn grid_axis(n: usize, steps: usize, stretch: &[f64]) -> Vec<f64> {
    let step = n / steps;
    let mut coords = vec![0.0f32; n];
    let mut prev = 0.0f64;
    for (i, s) in stretch.iter().enumerate() {
        let start = i * step;
        let end = (start + step).min(n);
        let cur = prev + step as f64 * s;
        let count = end.saturating_sub(start);
        for k in 0..count {
            let v = if count > 1 && k == count - 1 {
                cur
            } else if count > 1 {
                k as f64 * ((cur - prev) / (count - 1) as f64) + prev
            } else {
                prev
            };
            coords[start + k] = v as f32;
        }
        prev = cur;
    }
    coords.into_iter().map(f64::from).collect()
}

impl GridDistortion {
    /// The stretches `(x, y)` of the call seeded `seed`, normalised if configured, for an
    /// image `height × width`; `None` when `p` says skip.
    pub(crate) fn params(&self, height: i64, width: i64, seed: u64) -> Option<[Vec<f64>; 2]> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.warp.p {
            return None;
        }
        let mut draw = || -> Vec<f64> {
            (0..=self.steps)
                .map(|_| 1.0 + uniform(&mut rng, self.limit))
                .collect()
        };
        let (sx, sy) = (draw(), draw());
        if !self.normalized {
            return Some([sx, sy]);
        }
        Some([
            normalize(width as usize, self.steps, sx),
            normalize(height as usize, self.steps, sy),
        ])
    }
}

impl NumpyOp for GridDistortion {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let (h, w) = self.warp.size(inputs)?;
        if h < self.steps as i64 || w < self.steps as i64 {
            return Err(Error::msg(format!(
                "GridDistortion: a {h}x{w} image is smaller than num_steps = {} bands",
                self.steps
            )));
        }
        let Some([sx, sy]) = self.params(h, w, ctx.seed) else {
            return self.warp.keep(inputs);
        };
        let device = inputs[0].device();
        let (gx, gy) = (
            grid_axis(w as usize, self.steps, &sx),
            grid_axis(h as usize, self.steps, &sy),
        );
        let xs = Tensor::f_from_slice(&gx)?
            .f_to_device(device)?
            .f_view([1, w])?;
        let ys = Tensor::f_from_slice(&gy)?
            .f_to_device(device)?
            .f_view([h, 1])?;
        let g = Geometry::Remap(SourceMap {
            direct: self.direct,
            ..SourceMap::separable(&gx, &gy)
        });
        self.warp.warp(inputs, &xs, &ys, &g)
    }
}
