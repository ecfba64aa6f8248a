//! `BBoxSafeRandomCrop` and `RandomSizedBBoxSafeCrop`: a random window around the union of
//! the sample's boxes (optionally eroded), so that every box stays in it; the second then
//! resized to `height × width`.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::boxes::{BboxParamsConfig, Row};
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{paired_keys, probability, rng, Interpolation};
use crate::targets::Targets;
use crate::window::{crop_with_targets, place, Coords, Output};

/// `BBoxSafeRandomCrop` configuration (FastEstimator's and albumentations' names).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct BBoxSafeRandomCropConfig {
    /// How far the window may cut into the boxes' union, as a fraction of its size, in
    /// [0, 1] (default 0: every box kept whole).
    #[serde(default)]
    pub erosion_rate: f64,
    /// Probability of cropping a sample (default 1, albumentations' default here).
    #[serde(default = "one")]
    pub p: f64,
    /// Inputs that are bounding boxes: `[N, 4 + k]` rows in `bbox_params`' format; required,
    /// the window is placed by them.
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

fn one() -> f64 {
    1.0
}

fn bilinear() -> Interpolation {
    Interpolation::Bilinear
}

fn nearest() -> Interpolation {
    Interpolation::Nearest
}

/// Without box inputs the op would always take albumentations' no-box branch, a plain
/// random crop: almost certainly a manifest that forgot to name the boxes.
fn need_boxes(bboxes: &[String]) -> Result<()> {
    if bboxes.is_empty() {
        return Err(Error::config(
            "bboxes",
            "lists no input: the window is placed around the boxes, so name the op's box inputs (bboxes = [\"bbox\"], with bbox_params)",
        ));
    }
    Ok(())
}

/// How the window is drawn: albumentations' `BBoxSafeRandomCrop.get_params_dependent_on_data`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SafeWindow {
    erosion_rate: f64,
    p: f64,
}

impl SafeWindow {
    fn new(erosion_rate: f64, p: f64) -> Result<SafeWindow> {
        Ok(SafeWindow {
            erosion_rate: probability("erosion_rate", erosion_rate)?,
            p: probability("p", p)?,
        })
    }

    /// The window of the call seeded `seed` in an `(height, width)` image holding the pixel
    /// boxes `boxes`; `None` when the `p` draw says skip.
    pub(crate) fn draw(
        &self,
        (height, width): (i64, i64),
        boxes: &[Row],
        seed: u64,
    ) -> Option<Coords> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.p {
            return None;
        }
        let (h, w) = (height as f64, width as f64);
        let Some([x0, y0, x1, y1]) = union(boxes, (h, w), self.erosion_rate) else {
            return Some(self.without_boxes(height, width, &mut rng));
        };
        // np.clip(v, lo, hi), with the far side clipped to the near one as albumentations does.
        let (x0, y0) = (x0.clamp(0.0, 1.0), y0.clamp(0.0, 1.0));
        let (x1, y1) = (x1.max(x0).min(1.0), y1.max(y0).min(1.0));
        let left = (x0 * rng.random::<f64>() * w) as i64;
        let top = (y0 * rng.random::<f64>() * h) as i64;
        let right = ((x1 + (1.0 - x1) * rng.random::<f64>()) * w) as i64;
        let bottom = ((y1 + (1.0 - y1) * rng.random::<f64>()) * h) as i64;
        // Around a box thinner than a pixel albumentations can truncate both ends to the same
        // column and cut an empty image; one pixel keeps the output an image.
        Some([left, top, right.max(left + 1), bottom.max(top + 1)])
    }

    /// albumentations' `_get_coords_no_bbox`: a window of the image's aspect ratio and a
    /// random height of at least `1 - erosion_rate` of the image's, at a random position.
    fn without_boxes(&self, height: i64, width: i64, rng: &mut ChaCha8Rng) -> Coords {
        let erosive = (height as f64 * (1.0 - self.erosion_rate)) as i64;
        let crop_h = if erosive >= height {
            height
        } else {
            rng.random_range(erosive..=height)
        };
        // albumentations can draw a height (or get a width) of 0 here, an empty image; the
        // smallest window is one pixel instead.
        let crop_h = crop_h.max(1);
        let crop_w = (((crop_h * width) as f64 / height as f64) as i64).max(1);
        let (h_start, w_start) = (rng.random::<f64>(), rng.random::<f64>());
        place(height, width, (crop_h, crop_w), h_start, w_start)
    }
}

/// albumentations' `union_of_bboxes` of the boxes normalised to the image: `None` without
/// boxes, for `erosion_rate = 1`, or when erosion leaves nothing (the window is then drawn
/// as without boxes). A single box is its own union, uneroded, as there.
fn union(boxes: &[Row], (h, w): (f64, f64), erosion_rate: f64) -> Option<[f64; 4]> {
    let normal = |r: &Row| [r[0] / w, r[1] / h, r[2] / w, r[3] / h];
    match boxes {
        [] => return None,
        _ if erosion_rate == 1.0 => return None,
        [one] => return Some(normal(one)),
        _ => {}
    }
    let mut u = [f64::INFINITY, f64::INFINITY, -f64::INFINITY, -f64::INFINITY];
    for b in boxes.iter().map(normal) {
        u = [
            u[0].min(b[0]),
            u[1].min(b[1]),
            u[2].max(b[2]),
            u[3].max(b[3]),
        ];
    }
    let ex = (u[2] - u[0]) * erosion_rate * 0.5;
    let ey = (u[3] - u[1]) * erosion_rate * 0.5;
    let u = [u[0] + ex, u[1] + ey, u[2] - ex, u[3] - ey];
    if (u[2] - u[0]).abs() < 1e-6 || (u[3] - u[1]).abs() < 1e-6 {
        return None;
    }
    Some(u)
}

/// Crops a random window containing the union of the boxes (eroded by `erosion_rate`).
pub struct BBoxSafeRandomCrop {
    keys: Vec<String>,
    targets: Targets,
    draw: SafeWindow,
}

impl FromConfig for BBoxSafeRandomCrop {
    type Config = BBoxSafeRandomCropConfig;
    fn from_config(c: BBoxSafeRandomCropConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        need_boxes(&c.bboxes)?;
        let keys = paired_keys(ctx)?;
        Ok(BBoxSafeRandomCrop {
            targets: Targets::new(
                &keys,
                &c.bboxes,
                c.bbox_params,
                &c.keypoints,
                c.keypoint_params,
            )?,
            keys,
            draw: SafeWindow::new(c.erosion_rate, c.p)?,
        })
    }
}

impl BBoxSafeRandomCrop {
    /// The window of the call seeded `seed` (see [`SafeWindow::draw`]).
    pub(crate) fn window(&self, size: (i64, i64), boxes: &[Row], seed: u64) -> Option<Coords> {
        self.draw.draw(size, boxes, seed)
    }
}

impl NumpyOp for BBoxSafeRandomCrop {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        crop_with_targets(&self.targets, &self.keys, inputs, |size| {
            let boxes = self.targets.boxes_in_pixels(&self.keys, inputs, size)?;
            Ok(self.window(size, &boxes, ctx.seed))
        })
    }
}

/// `RandomSizedBBoxSafeCrop` configuration (FastEstimator's and albumentations' names).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RandomSizedBBoxSafeCropConfig {
    /// Output height.
    pub height: i64,
    /// Output width.
    pub width: i64,
    /// How far the window may cut into the boxes' union, as a fraction of its size, in
    /// [0, 1] (default 0: every box kept whole).
    #[serde(default)]
    pub erosion_rate: f64,
    /// Sampling of images (default `"bilinear"`).
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
    /// Sampling of the `masks` inputs (default `"nearest"`).
    #[serde(default = "nearest")]
    pub mask_interpolation: Interpolation,
    /// Inputs that are label masks.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability of cropping a sample (default 1); a skipped sample keeps its size.
    #[serde(default = "one")]
    pub p: f64,
    /// Inputs that are bounding boxes: `[N, 4 + k]` rows in `bbox_params`' format; required,
    /// the window is placed by them.
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

/// `BBoxSafeRandomCrop`'s window resized to `height × width`.
pub struct RandomSizedBBoxSafeCrop {
    out: Output,
    draw: SafeWindow,
}

impl FromConfig for RandomSizedBBoxSafeCrop {
    type Config = RandomSizedBBoxSafeCropConfig;
    fn from_config(c: RandomSizedBBoxSafeCropConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        need_boxes(&c.bboxes)?;
        let draw = SafeWindow::new(c.erosion_rate, c.p)?;
        let out = Output::new(
            ctx,
            &c.masks,
            |keys| {
                Targets::new(
                    keys,
                    &c.bboxes,
                    c.bbox_params,
                    &c.keypoints,
                    c.keypoint_params,
                )
            },
            (c.height, c.width),
            c.interpolation,
        )?;
        Ok(RandomSizedBBoxSafeCrop {
            out: out.with_mask_interpolation(c.mask_interpolation),
            draw,
        })
    }
}

impl RandomSizedBBoxSafeCrop {
    /// The window of the call seeded `seed` (see [`SafeWindow::draw`]).
    pub(crate) fn window(&self, size: (i64, i64), boxes: &[Row], seed: u64) -> Option<Coords> {
        self.draw.draw(size, boxes, seed)
    }
}

impl NumpyOp for RandomSizedBBoxSafeCrop {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let out = &self.out;
        out.apply(inputs, |h, w| {
            let boxes = out.targets.boxes_in_pixels(&out.keys, inputs, (h, w))?;
            Ok(self.window((h, w), &boxes, ctx.seed))
        })
    }
}
