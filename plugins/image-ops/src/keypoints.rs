//! Keypoints under the geometric ops, after albumentations' `KeypointParams`: rows
//! `[x, y, extra...]` in pixels, extra columns (labels, visibility flags) carried along; the
//! formats with angles and scales go through `keypoint_formats.rs` around these moves.
//!
//! albumentations treats keypoints as pixel indices where it treats boxes as continuous
//! coordinates: a horizontal flip sends a keypoint's `x` to `width - 1 - x` but a box's edge
//! to `width - x`. The rules here follow it exactly, so results equal albumentations'.

use fe_plugin_api::{Error, Result};
use serde::Deserialize;

use crate::boxes::Row;
use crate::flips::Move;
use crate::geometry::{affine_padding, apply, is_identity, project, reflection_grid, Geometry};

/// How keypoint rows are written (albumentations' names; extra columns after). Angles are
/// degrees unless `angle_in_degrees = false`; `keypoint_formats.rs` moves them.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum KeypointFormat {
    /// `[x, y, ...]` in pixels.
    Xy,
    /// `[y, x, ...]`.
    Yx,
    /// `[x, y, angle, ...]`.
    Xya,
    /// `[x, y, scale, ...]`.
    Xys,
    /// `[x, y, angle, scale, ...]`.
    Xyas,
    /// `[x, y, scale, angle, ...]`.
    Xysa,
}

/// `keypoint_params`: a format name alone, or a table.
#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(untagged)]
pub enum KeypointParamsConfig {
    /// `keypoint_params = "xya"`.
    Format(KeypointFormat),
    /// `keypoint_params = { format = "xy", remove_invisible = false }`.
    Table(KeypointParams),
}

/// albumentations' `KeypointParams` (the fields fe-image-ops supports).
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KeypointParams {
    /// Column layout.
    pub format: KeypointFormat,
    /// Drop keypoints that leave the image (default `true`, albumentations'); input keypoints
    /// outside the image are then an error, as albumentations checks them.
    #[serde(default = "yes")]
    pub remove_invisible: bool,
    /// Angles in degrees (default `true`, albumentations'), else radians.
    #[serde(default = "yes")]
    pub angle_in_degrees: bool,
}

fn yes() -> bool {
    true
}

impl Default for KeypointParams {
    fn default() -> Self {
        KeypointParams {
            format: KeypointFormat::Xy,
            remove_invisible: true,
            angle_in_degrees: true,
        }
    }
}

impl KeypointParamsConfig {
    /// The parameters.
    pub(crate) fn params(self) -> KeypointParams {
        match self {
            KeypointParamsConfig::Format(format) => KeypointParams {
                format,
                ..KeypointParams::default()
            },
            KeypointParamsConfig::Table(params) => params,
        }
    }
}

fn inside(r: &Row, (h, w): (i64, i64)) -> bool {
    (0.0..w as f64).contains(&r[0]) && (0.0..h as f64).contains(&r[1])
}

/// albumentations' input check: with `remove_invisible`, every keypoint lies in the image.
pub(crate) fn check(rows: &[Row], p: &KeypointParams, size: (i64, i64), key: &str) -> Result<()> {
    if !p.remove_invisible {
        return Ok(());
    }
    match rows.iter().position(|r| !inside(r, size)) {
        None => Ok(()),
        Some(i) => Err(Error::msg(format!(
            "input `{key}`, keypoint {i} {:?} is outside the {}x{} image",
            &rows[i][..2],
            size.0,
            size.1
        ))),
    }
}

/// Keypoints of an `(height, width)` image moved by `g`, in pixels of the output image.
pub(crate) fn transform(rows: Vec<Row>, g: &Geometry, (h, w): (i64, i64)) -> Vec<Row> {
    let (hf, wf) = (h as f64, w as f64);
    let map = |rows: Vec<Row>, f: &dyn Fn(f64, f64) -> (f64, f64)| -> Vec<Row> {
        rows.into_iter()
            .map(|mut r| {
                (r[0], r[1]) = f(r[0], r[1]);
                r
            })
            .collect()
    };
    match *g {
        Geometry::Dihedral(m) => map(rows, &move |x, y| match m {
            Move::Keep => (x, y),
            Move::Flip(0) => (x, hf - 1.0 - y),
            Move::Flip(1) => (wf - 1.0 - x, y),
            Move::Flip(_) | Move::Rot90(2) => (wf - 1.0 - x, hf - 1.0 - y),
            Move::Transpose => (y, x),
            Move::Rot90(1) => (y, wf - 1.0 - x),
            Move::Rot90(3) => (hf - 1.0 - y, x),
            Move::Rot90(_) => (x, y),
        }),
        Geometry::Crop { window, out } => {
            let [cx, cy, cx1, cy1] = window.map(|v| v as f64);
            let (sx, sy) = (out.1 as f64 / (cx1 - cx), out.0 as f64 / (cy1 - cy));
            map(rows, &|x, y| ((x - cx) * sx, (y - cy) * sy))
        }
        Geometry::Resize {
            point_scale: (sx, sy),
            ..
        } => map(rows, &|x, y| (x * sx, y * sy)),
        Geometry::Pad { margins, reflect } => {
            let [top, _, left, _] = margins.map(|v| v as f64);
            if !reflect {
                return map(rows, &|x, y| (x + left, y + top));
            }
            let mut out = Vec::new();
            for cell in reflection_grid(margins, (h, w)) {
                // albumentations mirrors keypoints here as `width - x`, unlike its flips.
                let fx = |x: f64| if cell.flip_x { wf - x } else { x };
                let fy = |y: f64| if cell.flip_y { hf - y } else { y };
                out.extend(map(rows.clone(), &|x, y| {
                    (fx(x) + cell.dx as f64, fy(y) + cell.dy as f64)
                }));
            }
            // The copies that land outside the output go before the visibility filter,
            // whatever `remove_invisible` says, as albumentations' `validate_keypoints`.
            let size = g.out_size((h, w));
            out.retain(|r| inside(r, size));
            out
        }
        Geometry::Affine {
            points: m, reflect, ..
        } => {
            if is_identity(&m) {
                return rows;
            }
            let copies = if reflect {
                // Padding from the point matrix, as albumentations' `keypoints_affine`.
                let margins = affine_padding(&m, (h, w));
                let mut copies = Vec::new();
                for cell in reflection_grid(margins, (h, w)) {
                    let (dx, dy) = ((cell.dx - margins[2]) as f64, (cell.dy - margins[0]) as f64);
                    let fx = |x: f64| if cell.flip_x { wf - x } else { x };
                    let fy = |y: f64| if cell.flip_y { hf - y } else { y };
                    copies.extend(map(rows.clone(), &|x, y| (fx(x) + dx, fy(y) + dy)));
                }
                copies
            } else {
                rows
            };
            map(copies, &|x, y| apply(&m, x, y))
        }
        Geometry::Perspective {
            matrix,
            scale: (sx, sy),
            ..
        } => map(rows, &|x, y| {
            let (x, y) = project(&matrix, x, y);
            (x * sx, y * sy)
        }),
        Geometry::Remap(ref source) => crate::remap_targets::keypoints(rows, source),
    }
}

/// albumentations' `filter_keypoints`: with `remove_invisible`, keypoints outside the
/// `(height, width)` output are dropped.
pub(crate) fn filter(rows: Vec<Row>, p: &KeypointParams, size: (i64, i64)) -> Vec<Row> {
    if p.remove_invisible {
        rows.into_iter().filter(|r| inside(r, size)).collect()
    } else {
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flips_treat_keypoints_as_pixel_indices() {
        let r = vec![vec![0.0, 1.0, 9.0]];
        let t = |m| transform(r.clone(), &Geometry::Dihedral(m), (4, 6))[0].clone();
        assert_eq!(t(Move::Flip(1)), [5.0, 1.0, 9.0]);
        assert_eq!(t(Move::Flip(0)), [0.0, 2.0, 9.0]);
        assert_eq!(t(Move::Rot90(1)), [1.0, 5.0, 9.0]);
        assert_eq!(t(Move::Rot90(3)), [2.0, 0.0, 9.0]);
        assert_eq!(t(Move::Transpose), [1.0, 0.0, 9.0]);
    }

    #[test]
    fn crops_shift_and_scale_and_the_filter_drops_what_left() {
        let rows = vec![vec![3.0, 4.0, 1.0], vec![1.0, 1.0, 2.0]];
        let g = Geometry::Crop {
            window: [2, 2, 6, 6],
            out: (8, 8),
        };
        let moved = transform(rows, &g, (10, 10));
        assert_eq!(moved, [vec![2.0, 4.0, 1.0], vec![-2.0, -2.0, 2.0]]);
        let p = KeypointParams::default();
        assert_eq!(filter(moved.clone(), &p, (8, 8)), [vec![2.0, 4.0, 1.0]]);
        let keep_all = KeypointParams {
            remove_invisible: false,
            ..p
        };
        assert_eq!(filter(moved, &keep_all, (8, 8)).len(), 2);
    }

    #[test]
    fn outside_input_keypoints_are_errors_unless_kept() {
        let rows = [vec![1.0, 1.0], vec![4.0, 0.0]];
        let err = check(&rows, &KeypointParams::default(), (3, 4), "kp").unwrap_err();
        assert!(
            err.message().contains("`kp`, keypoint 1"),
            "{}",
            err.message()
        );
        let lenient = KeypointParams {
            remove_invisible: false,
            ..KeypointParams::default()
        };
        assert!(check(&rows, &lenient, (3, 4), "kp").is_ok());
    }

    #[test]
    fn reflecting_pads_mirror_keypoints_as_albumentations_does() {
        // A 20 x 30 image padded to 40 x 40: albumentations gives these four for (1, 1).
        let g = Geometry::Pad {
            margins: [10, 10, 5, 5],
            reflect: true,
        };
        let out = transform(vec![vec![1.0, 1.0, 3.0]], &g, (20, 30));
        assert_eq!(
            out,
            [
                vec![4.0, 9.0, 3.0],
                vec![6.0, 9.0, 3.0],
                vec![4.0, 11.0, 3.0],
                vec![6.0, 11.0, 3.0]
            ]
        );
    }
}
