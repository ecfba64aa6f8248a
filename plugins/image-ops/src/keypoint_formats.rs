//! Keypoint formats beyond `"xy"` (albumentations' `yx`, `xya`, `xys`, `xyas`, `xysa`): rows are
//! read into albumentations' internal `[x, y, angle, scale, extra...]` (angle in radians within
//! [0, 2π)), moved, and written back in their own format, the angle in degrees unless
//! `angle_in_degrees = false`.
//!
//! Angles and scales follow albumentations' keypoint functions rule for rule, including where
//! they are not the geometry's own: a transpose maps angles above π to `3π/2 - a` (half a turn
//! from the mirror image), the mirrored copies of a reflecting pad or warp negate the angle
//! (where a horizontal flip gives `π - a`), and an anisotropic resize scales the keypoint scale
//! by the larger factor but leaves the angle alone.

use std::f64::consts::{FRAC_PI_2, PI, TAU};

use crate::boxes::Row;
use crate::flips::Move;
use crate::geometry::{affine_padding, apply, is_identity, reflection_grid, Geometry};
use crate::keypoints::{self, KeypointFormat, KeypointParams};

impl KeypointFormat {
    /// How many leading columns the format names.
    pub(crate) fn columns(self) -> i64 {
        match self {
            KeypointFormat::Xy | KeypointFormat::Yx => 2,
            KeypointFormat::Xya | KeypointFormat::Xys => 3,
            KeypointFormat::Xyas | KeypointFormat::Xysa => 4,
        }
    }

    /// Where the angle and the scale sit in a row of this format; `None` for `xy` / `yx`,
    /// which move as plain points.
    fn slots(self) -> Option<(Option<usize>, Option<usize>)> {
        match self {
            KeypointFormat::Xy | KeypointFormat::Yx => None,
            KeypointFormat::Xya => Some((Some(2), None)),
            KeypointFormat::Xys => Some((None, Some(2))),
            KeypointFormat::Xyas => Some((Some(2), Some(3))),
            KeypointFormat::Xysa => Some((Some(3), Some(2))),
        }
    }
}

/// Rows of `p.format` as the rows the moves work on: `x, y` first; with an angle or a scale,
/// `[x, y, angle (radians, [0, 2π)), scale, extra...]`, a missing one 0 as albumentations
/// fills it.
pub(crate) fn to_internal(rows: Vec<Row>, p: &KeypointParams) -> Vec<Row> {
    let n = p.format.columns() as usize;
    rows.into_iter()
        .map(|r| match p.format.slots() {
            None if p.format == KeypointFormat::Yx => {
                let mut r = r;
                r.swap(0, 1);
                r
            }
            None => r,
            Some((a, s)) => {
                let angle = a.map_or(0.0, |i| {
                    if p.angle_in_degrees {
                        r[i].to_radians()
                    } else {
                        r[i]
                    }
                });
                let mut out = vec![r[0], r[1], angle.rem_euclid(TAU), s.map_or(0.0, |i| r[i])];
                out.extend_from_slice(&r[n..]);
                out
            }
        })
        .collect()
}

/// Moved internal rows back in `p.format`, angles within [0, 2π) (or [0°, 360°)).
pub(crate) fn from_internal(rows: Vec<Row>, p: &KeypointParams) -> Vec<Row> {
    rows.into_iter()
        .map(|r| match p.format.slots() {
            None if p.format == KeypointFormat::Yx => {
                let mut r = r;
                r.swap(0, 1);
                r
            }
            None => r,
            Some((_, s)) => {
                // `+ 0.0` turns a negative zero into the 0 numpy writes.
                let angle = r[2].rem_euclid(TAU) + 0.0;
                let angle = if p.angle_in_degrees {
                    angle.to_degrees()
                } else {
                    angle
                };
                let mut out = vec![r[0], r[1]];
                // The slots after x, y hold the angle or, where `s` says, the scale.
                for slot in 2..p.format.columns() as usize {
                    out.push(if Some(slot) == s { r[3] } else { angle });
                }
                out.extend_from_slice(&r[4..]);
                out
            }
        })
        .collect()
}

/// `rows` (from [`to_internal`]) moved by `g` from an `(height, width)` image.
pub(crate) fn transform(
    rows: Vec<Row>,
    p: &KeypointParams,
    g: &Geometry,
    size: (i64, i64),
) -> Vec<Row> {
    if p.format.slots().is_none() {
        return keypoints::transform(rows, g, size);
    }
    match *g {
        Geometry::Pad {
            margins,
            reflect: true,
        } => {
            let copies = mirrored(rows, margins, size, (0, 0));
            let out = g.out_size(size);
            // As keypoints::transform: copies outside the output go whatever the filter.
            copies
                .into_iter()
                .filter(|r| {
                    (0.0..out.1 as f64).contains(&r[0]) && (0.0..out.0 as f64).contains(&r[1])
                })
                .collect()
        }
        Geometry::Affine {
            points: m,
            reflect,
            scale,
            ..
        } => {
            if is_identity(&m) {
                return rows;
            }
            let copies = if reflect {
                // The tiling is centred on the image, as `center_in_origin = True` asks.
                let margins = affine_padding(&m, size);
                mirrored(rows, margins, size, (margins[2], margins[0]))
            } else {
                rows
            };
            // albumentations' rotation2d_matrix_to_euler_angles(y_up = False).
            let turn = (-m[3]).atan2(m[0]);
            copies
                .into_iter()
                .map(|mut r| {
                    (r[0], r[1]) = apply(&m, r[0], r[1]);
                    r[2] += turn;
                    r[3] *= scale;
                    r
                })
                .collect()
        }
        Geometry::Perspective {
            matrix: m,
            scale: (sx, sy),
            ..
        } => {
            // albumentations' perspective_keypoints: the angle turns by the matrix's y-up
            // rotation, the scale grows by its larger axis scale (signed, as numpy's sign,
            // 0 for 0), then by the larger factor back to the image size.
            let sign = |v: f64| if v == 0.0 { 0.0 } else { v.signum() };
            let scale_x = sign(m[0]) * m[0].hypot(m[1]);
            let scale_y = sign(m[4]) * m[3].hypot(m[4]);
            let turn = m[3].atan2(m[0]);
            let factor = scale_x.max(scale_y) * sx.max(sy);
            let turned = rows
                .into_iter()
                .map(|mut r| {
                    r[2] += turn;
                    r[3] *= factor;
                    r
                })
                .collect();
            keypoints::transform(turned, g, size)
        }
        _ => {
            let (turn, factor) = plain(g);
            let turned = rows
                .into_iter()
                .map(|mut r| {
                    r[2] = turn(r[2].rem_euclid(TAU));
                    r[3] *= factor;
                    r
                })
                .collect();
            keypoints::transform(turned, g, size)
        }
    }
}

/// The angle map and scale factor of a move that keeps one copy of each keypoint.
fn plain(g: &Geometry) -> (fn(f64) -> f64, f64) {
    let keep: fn(f64) -> f64 = |a| a;
    match *g {
        Geometry::Dihedral(m) => {
            let turn: fn(f64) -> f64 = match m {
                Move::Flip(0) => |a| -a,
                Move::Flip(1) => |a| PI - a,
                Move::Flip(_) | Move::Rot90(2) => |a| a - PI,
                // albumentations compares its float32 angles with π as float32.
                Move::Transpose => |a| {
                    if a as f32 <= PI as f32 {
                        FRAC_PI_2 - a
                    } else {
                        3.0 * FRAC_PI_2 - a
                    }
                },
                Move::Rot90(1) => |a| a - FRAC_PI_2,
                Move::Rot90(3) => |a| a + FRAC_PI_2,
                Move::Keep | Move::Rot90(_) => keep,
            };
            (turn, 1.0)
        }
        Geometry::Crop { window, out } => {
            let [x0, y0, x1, y1] = window.map(|v| v as f64);
            (
                keep,
                (out.1 as f64 / (x1 - x0)).max(out.0 as f64 / (y1 - y0)),
            )
        }
        Geometry::Resize {
            point_scale: (sx, sy),
            ..
        } => (keep, sx.max(sy)),
        // Plain pads shift; moves added later keep angles and scales unless they say.
        _ => (keep, 1.0),
    }
}

/// albumentations' `generate_reflected_keypoints`: a copy of every row per cell of the
/// mirror tiling, shifted by the cell's origin less `origin`; a mirrored copy's angle is
/// negated once per mirrored axis.
fn mirrored(rows: Vec<Row>, margins: [i64; 4], (h, w): (i64, i64), origin: (i64, i64)) -> Vec<Row> {
    let (hf, wf) = (h as f64, w as f64);
    let mut out = Vec::new();
    for cell in reflection_grid(margins, (h, w)) {
        let (dx, dy) = ((cell.dx - origin.0) as f64, (cell.dy - origin.1) as f64);
        for r in &rows {
            let mut c = r.clone();
            if cell.flip_x {
                c[0] = wf - c[0];
                c[2] = -c[2];
            }
            if cell.flip_y {
                c[1] = hf - c[1];
                c[2] = -c[2];
            }
            c[0] += dx;
            c[1] += dy;
            out.push(c);
        }
    }
    out
}
