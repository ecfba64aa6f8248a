//! `MaskDropout`: random objects of a label mask (8-connected pieces of one value) erased
//! from every input.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::{self, BboxParamsConfig, Row};
use crate::components::components;
use crate::keypoints::{self, KeypointParamsConfig};
use crate::layout::{mask_flags, paired_keys, probability, rng, same_size, Spatial};
use crate::remap_targets::albumentations_pixel;
use crate::targets::Targets;

/// How many objects go: `[lo, hi]` drawn uniformly, or `n` for `[1, n]` (albumentations).
#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(untagged)]
pub enum MaxObjects {
    /// `[1, n]`.
    UpTo(i64),
    /// `[lo, hi]`.
    Range([i64; 2]),
}

fn one() -> MaxObjects {
    MaxObjects::UpTo(1)
}

fn half() -> f64 {
    0.5
}

/// `MaskDropout` configuration (FastEstimator's names; albumentations' `fill` and
/// `fill_mask` also work).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct MaskDropoutConfig {
    /// Objects erased per sample: `[lo, hi]`, or `n` for `[1, n]` (default 1).
    #[serde(default = "one")]
    pub max_objects: MaxObjects,
    /// What erased image pixels become (default 0).
    #[serde(default, alias = "fill")]
    pub image_fill_value: f64,
    /// What erased mask pixels become (default 0).
    #[serde(default, alias = "fill_mask")]
    pub mask_fill_value: f64,
    /// Inputs that are label masks; the first one's objects are the ones erased.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability of erasing objects in a sample (default 0.5).
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

/// Erases random objects of the first mask from every input.
pub struct MaskDropout {
    keys: Vec<String>,
    targets: Targets,
    masks: Vec<bool>,
    /// Index of the input whose objects are erased.
    objects: usize,
    count: [i64; 2],
    fill: f64,
    mask_fill: f64,
    p: f64,
}

impl FromConfig for MaskDropout {
    type Config = MaskDropoutConfig;
    fn from_config(c: MaskDropoutConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let count = match c.max_objects {
            MaxObjects::UpTo(n) => [1, n],
            MaxObjects::Range(r) => r,
        };
        if !(1 <= count[0] && count[0] <= count[1]) {
            return Err(Error::config(
                "max_objects",
                format!("needs 1 <= lo <= hi, got {count:?}"),
            ));
        }
        let keys = paired_keys(ctx)?;
        let Some(objects) = c
            .masks
            .first()
            .and_then(|m| keys.iter().position(|k| k == m))
        else {
            return Err(Error::config(
                "masks",
                "MaskDropout needs the label mask whose objects it erases: list it in masks",
            ));
        };
        Ok(MaskDropout {
            masks: mask_flags(&keys, &c.masks)?,
            targets: Targets::new(
                &keys,
                &c.bboxes,
                c.bbox_params,
                &c.keypoints,
                c.keypoint_params,
            )?,
            objects,
            keys,
            count,
            fill: c.image_fill_value,
            mask_fill: c.mask_fill_value,
            p: probability("p", c.p)?,
        })
    }
}

/// The objects of a label mask as albumentations' `label` numbers them: for every non-zero
/// value in increasing order, its 8-connected pieces in OpenCV's order.
pub(crate) fn objects(values: &[f64], height: i64, width: i64) -> Vec<Vec<usize>> {
    let mut distinct: Vec<f64> = values.iter().copied().filter(|&v| v != 0.0).collect();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    distinct
        .into_iter()
        .flat_map(|value| {
            let same: Vec<bool> = values.iter().map(|&v| v == value).collect();
            components(&same, height, width)
        })
        .collect()
}

impl MaskDropout {
    /// The erased pixels (row-major) of the call seeded `seed` whose label mask holds
    /// `values` (`height × width`); `None` when nothing is erased (the `p` draw, or no
    /// object). All objects drawn means every positive pixel, as albumentations' `mask > 0`.
    pub(crate) fn dropped(
        &self,
        values: &[f64],
        (height, width): (i64, i64),
        seed: u64,
    ) -> Option<Vec<bool>> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.p {
            return None;
        }
        let objects = objects(values, height, width);
        if objects.is_empty() {
            return None;
        }
        let k = (rng.random_range(self.count[0]..=self.count[1]) as usize).min(objects.len());
        if k == objects.len() {
            return Some(values.iter().map(|&v| v > 0.0).collect());
        }
        let mut dropped = vec![false; values.len()];
        for i in rand::seq::index::sample(&mut rng, objects.len(), k) {
            for &pixel in &objects[i] {
                dropped[pixel] = true;
            }
        }
        Some(dropped)
    }
}

/// The label mask's values, row-major, from an `(H, W)` or `(H, W, 1)` input.
fn label_values(key: &str, x: &Tensor, layout: &Spatial) -> Result<Vec<f64>> {
    if !layout.plain && x.size()[2] != 1 {
        return Err(Error::msg(format!(
            "input `{key}`: MaskDropout reads objects from an (H, W) or (H, W, 1) mask, got shape {:?}",
            x.size()
        )));
    }
    Vec::<f64>::try_from(x.f_to_kind(Kind::Double)?.f_flatten(0, -1)?)
        .map_err(|e| Error::msg(format!("input `{key}`: {e}")))
}

impl NumpyOp for MaskDropout {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let layouts = same_size(&pixels.keys, &pixels.inputs)?;
        let size = (layouts[0].height, layouts[0].width);
        let at = pixels
            .index
            .iter()
            .position(|&i| i == self.objects)
            .ok_or_else(|| Error::msg("the label mask is not a pixel input"))?;
        let values = label_values(&pixels.keys[at], pixels.inputs[at], &layouts[at])?;
        let dropped = self.dropped(&values, size, ctx.seed);
        let out = match &dropped {
            None => pixels.inputs.iter().map(|x| x.shallow_clone()).collect(),
            Some(d) => {
                let erase = Tensor::f_from_slice(d)?.f_reshape([size.0, size.1])?;
                pixels
                    .inputs
                    .iter()
                    .zip(&layouts)
                    .zip(pixels.index.iter().map(|&i| self.masks[i]))
                    .map(|((x, layout), mask)| {
                        let fill = if mask { self.mask_fill } else { self.fill };
                        let erase = if layout.plain {
                            erase.shallow_clone()
                        } else {
                            erase.f_unsqueeze(-1)?
                        };
                        Ok(x.f_masked_fill(&erase.f_to_device(x.device())?, fill)?)
                    })
                    .collect::<Result<Vec<_>>>()?
            }
        };
        self.targets.each(
            (&self.keys, inputs, out),
            (size, size),
            |rows, p| {
                let kept = match &dropped {
                    Some(d) => keep_boxes(rows, d, size, (p.min_area, p.min_visibility)),
                    None => rows,
                };
                boxes::filter(kept, p, size)
            },
            |rows, p| {
                let kept = match &dropped {
                    Some(d) if p.remove_invisible => keep_points(rows, d, size),
                    _ => rows,
                };
                keypoints::filter(kept, p, size)
            },
        )
    }
}

/// albumentations' `mask_dropout_bboxes`: a box stays, unchanged, while the pixels
/// `x_min <= x <= x_max`, `y_min <= y <= y_max` (ends included, coordinates as its float32
/// normalised storage gives them back) not erased number at least `min_area` and
/// `min_visibility` of `(x_max - x_min) · (y_max - y_min)`.
fn keep_boxes(
    rows: Vec<Row>,
    dropped: &[bool],
    (h, w): (i64, i64),
    (min_area, min_visibility): (f64, f64),
) -> Vec<Row> {
    rows.into_iter()
        .filter(|r| {
            let [x0, x1] = [r[0], r[2]].map(|v| albumentations_pixel(v, w));
            let [y0, y1] = [r[1], r[3]].map(|v| albumentations_pixel(v, h));
            let span = |lo: f64, hi: f64, n: i64| {
                lo.ceil().max(0.0) as i64..=hi.floor().min(n as f64 - 1.0) as i64
            };
            let mut visible = 0usize;
            for y in span(y0, y1, h) {
                for x in span(x0, x1, w) {
                    visible += usize::from(!dropped[(y * w + x) as usize]);
                }
            }
            let (visible, area) = (visible as f64, (x1 - x0) * (y1 - y0));
            visible >= min_area && visible / area >= min_visibility
        })
        .collect()
}

/// albumentations' `mask_dropout_keypoints`: a keypoint goes when its pixel (coordinates
/// truncated toward zero) is erased or outside the image.
fn keep_points(rows: Vec<Row>, dropped: &[bool], (h, w): (i64, i64)) -> Vec<Row> {
    rows.into_iter()
        .filter(|r| {
            let (x, y) = (r[0].trunc() as i64, r[1].trunc() as i64);
            (0..w).contains(&x) && (0..h).contains(&y) && !dropped[(y * w + x) as usize]
        })
        .collect()
}
