//! `RandomCropNearBBox`: the window of a given box, each side moved by a random part of
//! the box's size. albumentations reads the box from a named data key; here it is one of
//! the op's inputs, named by `cropping_bbox_key`.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{check_count, paired_keys, probability, rng};
use crate::targets::Targets;
use crate::window::{crop_with_targets, Coords};

/// `max_part_shift`: one fraction `f`, which albumentations 2 reads as `[0, f]`, or a pair.
#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(untagged)]
pub enum PartShift {
    /// `f`: `[0, f]`, so only the left and right sides move (albumentations' reading).
    One(f64),
    /// `[height_part, width_part]`.
    Pair([f64; 2]),
}

/// `RandomCropNearBBox` configuration (FastEstimator's and albumentations' names).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RandomCropNearBBoxConfig {
    /// Most shift of each side as a part of the box's size: `[height_part, width_part]`,
    /// each in [0, 1] with `height_part <= width_part` as albumentations requires, or `f`
    /// for `[0, f]` (default `[0, 0.3]`).
    #[serde(default = "default_shift")]
    pub max_part_shift: PartShift,
    /// The input holding the box to crop near: `[x_min, y_min, x_max, y_max]` in whole
    /// pixels (pascal_voc), shape `[4]` or `[1, 4]`; written out unchanged (default
    /// `"cropping_bbox"`).
    #[serde(default = "default_key")]
    pub cropping_bbox_key: String,
    /// Probability of cropping a sample (default 1).
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

fn default_shift() -> PartShift {
    PartShift::Pair([0.0, 0.3])
}

fn default_key() -> String {
    "cropping_bbox".into()
}

fn one() -> f64 {
    1.0
}

/// Crops the cropping box's window with each side shifted by up to `max_part_shift` of the
/// box's height (top, bottom) or width (left, right).
pub struct RandomCropNearBBox {
    keys: Vec<String>,
    /// Position of the cropping box among the inputs.
    index: usize,
    /// The other inputs, which the crop applies to.
    rest: Vec<String>,
    targets: Targets,
    /// `[height_part, width_part]`.
    shift: [f64; 2],
    p: f64,
}

impl FromConfig for RandomCropNearBBox {
    type Config = RandomCropNearBBoxConfig;
    fn from_config(c: RandomCropNearBBoxConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let shift = match c.max_part_shift {
            PartShift::One(f) => [0.0, f],
            PartShift::Pair(pair) => pair,
        };
        if !(shift.iter().all(|v| (0.0..=1.0).contains(v)) && shift[0] <= shift[1]) {
            return Err(Error::config(
                "max_part_shift",
                format!("needs 0 <= height part <= width part <= 1 (albumentations' range), got {shift:?}"),
            ));
        }
        let keys = paired_keys(ctx)?;
        let key = &c.cropping_bbox_key;
        let Some(index) = keys.iter().position(|k| k == key) else {
            return Err(Error::config(
                "cropping_bbox_key",
                format!(
                    "`{key}` is not one of the op's inputs ({}): name the input holding the [x_min, y_min, x_max, y_max] box to crop near",
                    keys.join(", ")
                ),
            ));
        };
        if c.bboxes.contains(key) || c.keypoints.contains(key) {
            return Err(Error::config(
                "cropping_bbox_key",
                format!("`{key}` is the cropping box, not one of the boxes or keypoints cropped"),
            ));
        }
        let rest: Vec<String> = keys.iter().filter(|k| *k != key).cloned().collect();
        Ok(RandomCropNearBBox {
            targets: Targets::new(
                &rest,
                &c.bboxes,
                c.bbox_params,
                &c.keypoints,
                c.keypoint_params,
            )?,
            keys,
            index,
            rest,
            shift,
            p: probability("p", c.p)?,
        })
    }
}

/// albumentations' `_clip_bbox`: each side inside the image, the far side not before the
/// near one.
fn clip([x0, y0, x1, y1]: Coords, (height, width): (i64, i64)) -> Coords {
    let (x0, y0) = (x0.clamp(0, width), y0.clamp(0, height));
    [x0, y0, x1.clamp(x0, width), y1.clamp(y0, height)]
}

/// The cropping box of input `key`, checked against an `(height, width)` image.
fn cropping_box(key: &str, x: &Tensor, size: (i64, i64)) -> Result<Coords> {
    let shape = x.size();
    if !matches!(shape.as_slice(), [4] | [1, 4])
        || matches!(
            x.kind(),
            Kind::Bool | Kind::ComplexFloat | Kind::ComplexDouble
        )
    {
        return Err(Error::msg(format!(
            "input `{key}` (cropping_bbox_key): expected a numeric [x_min, y_min, x_max, y_max] of shape [4] or [1, 4], got {:?} {shape:?}",
            x.kind()
        )));
    }
    let v = Vec::<f64>::try_from(x.f_to_kind(Kind::Double)?.f_flatten(0, -1)?)
        .map_err(|e| Error::msg(format!("input `{key}`: {e}")))?;
    // albumentations slices the image with the box's coordinates, so they are whole pixels.
    if v.iter().any(|c| !c.is_finite() || c.fract() != 0.0) {
        return Err(Error::msg(format!(
            "input `{key}`: the cropping box {v:?} must be whole pixels"
        )));
    }
    let b = [v[0], v[1], v[2], v[3]].map(|c| c as i64);
    let [x0, y0, x1, y1] = clip(b, size);
    if x0 == x1 || y0 == y1 {
        return Err(Error::msg(format!(
            "input `{key}`: the cropping box {b:?} has no area inside the {}x{} image",
            size.0, size.1
        )));
    }
    Ok(b)
}

impl RandomCropNearBBox {
    /// The window of the call seeded `seed` in an `(height, width)` image for the cropping
    /// box `bbox` (with area inside the image); `None` when the `p` draw says skip.
    pub(crate) fn window(&self, size: (i64, i64), bbox: Coords, seed: u64) -> Option<Coords> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.p {
            return None;
        }
        let b = clip(bbox, size);
        let h_shift = ((b[3] - b[1]) as f64 * self.shift[0]).round_ties_even() as i64;
        let w_shift = ((b[2] - b[0]) as f64 * self.shift[1]).round_ties_even() as i64;
        let mut shift = |s: i64| rng.random_range(-s..=s);
        let x0 = b[0] - shift(w_shift);
        let x1 = b[2] + shift(w_shift);
        let y0 = b[1] - shift(h_shift);
        let y1 = b[3] + shift(h_shift);
        let c = clip([x0, y0, x1, y1], size);
        if c[0] == c[2] || c[1] == c[3] {
            // The sides crossed: albumentations falls back to the box's size, centred.
            let (h, w) = (b[3] - b[1], b[2] - b[0]);
            let (top, left) = ((size.0 - h) / 2, (size.1 - w) / 2);
            return Some([left, top, left + w, top + h]);
        }
        Some(c)
    }
}

impl NumpyOp for RandomCropNearBBox {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        check_count(&self.keys, inputs)?;
        let (key, bbox) = (&self.keys[self.index], inputs[self.index]);
        let rest: Vec<&Tensor> = (0..inputs.len())
            .filter(|&i| i != self.index)
            .map(|i| inputs[i])
            .collect();
        let mut out = crop_with_targets(&self.targets, &self.rest, &rest, |size| {
            Ok(self.window(size, cropping_box(key, bbox, size)?, ctx.seed))
        })?;
        out.insert(self.index, bbox.shallow_clone());
        Ok(out)
    }
}
