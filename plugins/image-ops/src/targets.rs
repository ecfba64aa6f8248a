//! Which inputs of a geometric op are boxes or keypoints rather than pixels, and how their
//! rows follow the op's [`Geometry`]: FastEstimator's `bbox_in` / `keypoints_in` of
//! `MultiVariateAlbumentation`, with albumentations' `BboxParams` / `KeypointParams`.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{Error, Field, Result};

use crate::boxes::{self, BboxParams, BboxParamsConfig, Row};
use crate::dropout_targets::{self, Holes};
use crate::geometry::Geometry;
use crate::keypoint_formats;
use crate::keypoints::{self, KeypointParams, KeypointParamsConfig};
use crate::layout::check_count;

/// What one input holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Pixels,
    Boxes,
    Points,
}

/// The non-pixel inputs of an op and their parameters.
#[derive(Debug, Clone)]
pub(crate) struct Targets {
    roles: Vec<Role>,
    bbox: Option<BboxParams>,
    keypoint: KeypointParams,
}

/// The pixel inputs of one call: their keys, tensors and positions among all inputs.
pub(crate) struct Pixels<'a> {
    pub keys: Vec<String>,
    pub inputs: Vec<&'a Tensor>,
    pub index: Vec<usize>,
}

fn stray(field: &str, listed: &[String], keys: &[String]) -> Result<()> {
    match listed.iter().find(|k| !keys.contains(k)) {
        None => Ok(()),
        Some(k) => Err(Error::config(
            field,
            format!("`{k}` is not one of the op's inputs ({})", keys.join(", ")),
        )),
    }
}

impl Targets {
    /// Checks the `bboxes` / `keypoints` key lists against the op's inputs. Boxes need
    /// `bbox_params` (their format is not guessable); keypoints default to `"xy"`.
    pub(crate) fn new(
        keys: &[String],
        bboxes: &[String],
        bbox_params: Option<BboxParamsConfig>,
        points: &[String],
        keypoint_params: Option<KeypointParamsConfig>,
    ) -> Result<Targets> {
        stray("bboxes", bboxes, keys)?;
        stray("keypoints", points, keys)?;
        if let Some(k) = bboxes.iter().find(|k| points.contains(k)) {
            return Err(Error::config(
                "keypoints",
                format!("`{k}` is listed in both bboxes and keypoints"),
            ));
        }
        let bbox = match (bboxes.is_empty(), bbox_params) {
            (_, Some(p)) => Some(p.params()?),
            (true, None) => None,
            (false, None) => {
                return Err(Error::config(
                    "bbox_params",
                    "required with bboxes: the box format, \"pascal_voc\", \"coco\", \"albumentations\" or \"yolo\" (or a table with format, min_area, min_visibility, min_width, min_height)",
                ))
            }
        };
        let roles: Vec<Role> = keys
            .iter()
            .map(|k| {
                if bboxes.contains(k) {
                    Role::Boxes
                } else if points.contains(k) {
                    Role::Points
                } else {
                    Role::Pixels
                }
            })
            .collect();
        if !roles.contains(&Role::Pixels) {
            return Err(Error::config(
                "inputs",
                "needs an image (or mask) input besides the boxes / keypoints: their geometry depends on its size",
            ));
        }
        Ok(Targets {
            roles,
            bbox,
            keypoint: keypoint_params.map(|p| p.params()).unwrap_or_default(),
        })
    }

    /// `true` when every input is pixels (the op may then run batched).
    pub(crate) fn all_pixels(&self) -> bool {
        self.roles.iter().all(|r| *r == Role::Pixels)
    }

    /// The pixel inputs among `inputs` (one per key, checked).
    pub(crate) fn pixels<'a>(&self, keys: &[String], inputs: &[&'a Tensor]) -> Result<Pixels<'a>> {
        check_count(keys, inputs)?;
        let index: Vec<usize> = (0..keys.len())
            .filter(|&i| self.roles[i] == Role::Pixels)
            .collect();
        Ok(Pixels {
            keys: index.iter().map(|&i| keys[i].clone()).collect(),
            inputs: index.iter().map(|&i| inputs[i]).collect(),
            index,
        })
    }

    /// The rows of every box input, in pixels of an `(height, width)` image: the boxes the
    /// box-driven crops place their window by (albumentations' `data["bboxes"]`).
    pub(crate) fn boxes_in_pixels(
        &self,
        keys: &[String],
        inputs: &[&Tensor],
        size: (i64, i64),
    ) -> Result<Vec<Row>> {
        let mut all = Vec::new();
        for ((key, x), role) in keys.iter().zip(inputs).zip(&self.roles) {
            if *role == Role::Boxes {
                let p = self
                    .bbox
                    .as_ref()
                    .ok_or_else(|| Error::msg("bbox_params unset"))?;
                let (rows, _) = read_rows(key, x, 4)?;
                all.extend(boxes::to_pixels(rows, p.format, size, key)?);
            }
        }
        Ok(all)
    }

    /// All outputs in input order: `pixels` (the transformed pixel inputs, in order) and the
    /// boxes / keypoints moved by `g` from an `(height, width)` image.
    pub(crate) fn merge(
        &self,
        keys: &[String],
        inputs: &[&Tensor],
        pixels: Vec<Tensor>,
        g: &Geometry,
        size: (i64, i64),
    ) -> Result<Vec<Tensor>> {
        let out_size = g.out_size(size);
        self.each(
            (keys, inputs, pixels),
            (size, out_size),
            |px, p| boxes::filter(boxes::transform(px, g, size), p, out_size),
            |rows, p| keypoints::filter(keypoint_formats::transform(rows, p, g, size), p, out_size),
        )
    }

    /// All outputs in input order for a dropout op, which moves nothing: `pixels` (the
    /// pixel inputs with their holes) and the boxes / keypoints of an `(height, width)`
    /// image as `holes` leave them (`None`: no hole was cut, rows only filtered).
    pub(crate) fn merge_holes(
        &self,
        keys: &[String],
        inputs: &[&Tensor],
        pixels: Vec<Tensor>,
        holes: Option<&Holes>,
        size: (i64, i64),
    ) -> Result<Vec<Tensor>> {
        self.each(
            (keys, inputs, pixels),
            (size, size),
            |px, p| {
                let cut = match holes {
                    Some(holes) => dropout_targets::boxes(px, holes, p),
                    None => px,
                };
                boxes::filter(cut, p, size)
            },
            |rows, p| {
                let cut = match holes {
                    Some(holes) => dropout_targets::keypoints(rows, holes, p.remove_invisible),
                    None => rows,
                };
                keypoints::filter(cut, p, size)
            },
        )
    }

    /// Every output in input order: the pixel outputs as given, boxes read in pixels of an
    /// `(height, width)` image, handed to `move_boxes` and written back in their format for
    /// the `out` size, keypoints likewise (in their internal format) through `move_points`.
    pub(crate) fn each(
        &self,
        (keys, inputs, pixels): (&[String], &[&Tensor], Vec<Tensor>),
        (size, out): ((i64, i64), (i64, i64)),
        move_boxes: impl Fn(Vec<Row>, &BboxParams) -> Vec<Row>,
        move_points: impl Fn(Vec<Row>, &KeypointParams) -> Vec<Row>,
    ) -> Result<Vec<Tensor>> {
        let mut pixels = pixels.into_iter();
        keys.iter()
            .zip(inputs)
            .zip(&self.roles)
            .map(|((key, x), role)| match role {
                Role::Pixels => pixels
                    .next()
                    .ok_or_else(|| Error::msg(format!("no output for input `{key}`"))),
                Role::Boxes => {
                    let (rows, cols) = read_rows(key, x, 4)?;
                    let p = self
                        .bbox
                        .as_ref()
                        .ok_or_else(|| Error::msg("bbox_params unset"))?;
                    let moved = move_boxes(boxes::to_pixels(rows, p.format, size, key)?, p);
                    write_rows(boxes::from_pixels(moved, p.format, out), cols, x.kind())
                }
                Role::Points => {
                    let p = &self.keypoint;
                    let (rows, cols) = read_rows(key, x, p.format.columns())?;
                    let rows = keypoint_formats::to_internal(rows, p);
                    keypoints::check(&rows, p, size, key)?;
                    let moved = move_points(rows, p);
                    write_rows(keypoint_formats::from_internal(moved, p), cols, x.kind())
                }
            })
            .collect()
    }
}

/// The rows of an `[N, min_cols + k]` tensor (an empty `[0]` tensor is no rows).
fn read_rows(key: &str, x: &Tensor, min_cols: i64) -> Result<(Vec<Row>, i64)> {
    let size = x.size();
    let cols = match size.as_slice() {
        [0] => return Ok((Vec::new(), min_cols)),
        [_, c] if *c >= min_cols => *c,
        _ => {
            return Err(Error::msg(format!(
                "input `{key}`: expected rows of shape [N, {min_cols} + k], got {size:?}"
            )))
        }
    };
    if matches!(
        x.kind(),
        Kind::Bool | Kind::ComplexFloat | Kind::ComplexDouble
    ) {
        return Err(Error::unsupported(format!(
            "input `{key}`: coordinates of dtype {:?} (use a float or integer type)",
            x.kind()
        )));
    }
    let flat = Vec::<f64>::try_from(x.f_to_kind(Kind::Double)?.f_flatten(0, -1)?)
        .map_err(|e| Error::msg(format!("input `{key}`: {e}")))?;
    Ok((
        flat.chunks(cols as usize).map(<[f64]>::to_vec).collect(),
        cols,
    ))
}

/// `rows` as an `[N, cols]` tensor of the input's kind, or float32 for integer inputs:
/// moved coordinates are fractional.
fn write_rows(rows: Vec<Row>, cols: i64, kind: Kind) -> Result<Tensor> {
    let kind = match kind {
        Kind::Double | Kind::Half | Kind::BFloat16 => kind,
        _ => Kind::Float,
    };
    let flat: Vec<f64> = rows.concat();
    let n = rows.len() as i64;
    Ok(Tensor::f_from_slice(&flat)?
        .f_reshape([n, cols])?
        .f_to_kind(kind)?)
}

/// The box and keypoint keys as `fe-host plugins show` lists them.
pub(crate) const TARGET_FIELDS: [Field; 4] = [
    Field::optional("bboxes", "[string]", "[]", "Inputs that are bounding boxes: [N, 4 + k] rows, extra columns carried"),
    Field::optional("bbox_params", "string | table", "required with bboxes", "Box format (\"pascal_voc\", \"coco\", \"albumentations\", \"yolo\") or { format, min_area, min_visibility, min_width, min_height }"),
    Field::optional("keypoints", "[string]", "[]", "Inputs that are keypoints: [N, 2 + k] rows x, y (angle, scale as the format says), extra columns"),
    Field::optional("keypoint_params", "string | table", "\"xy\"", "\"xy\", \"yx\", \"xya\", \"xys\", \"xyas\", \"xysa\", or { format, remove_invisible = true, angle_in_degrees = true }"),
];
