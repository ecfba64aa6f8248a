//! The plane geometry of one geometric op's call, as box and keypoint rules need it: what
//! the op did to the pixels, in numbers rather than in pixels.

use crate::flips::Move;
use crate::remap_targets::SourceMap;
use crate::warp::{invert, Affine2};

/// What one call of a geometric op did to the image plane.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Geometry {
    /// A flip, transpose or quarter turn of the whole image (or nothing).
    Dihedral(Move),
    /// The window `[x_min, y_min, x_max, y_max)` cut out and stretched to `out` `(h, w)`.
    Crop { window: [i64; 4], out: (i64, i64) },
    /// The whole image rescaled to `out` `(h, w)`. `point_scale` is the `(x, y)` factor
    /// albumentations applies to keypoints: `LongestMaxSize`'s unrounded
    /// `max_size / side`, where boxes follow the rounded output size.
    Resize {
        out: (i64, i64),
        point_scale: (f64, f64),
    },
    /// `[top, bottom, left, right]` pixels added; `reflect` for the mirroring borders, where
    /// albumentations also mirrors boxes and keypoints into the padding.
    Pad { margins: [i64; 4], reflect: bool },
    /// An affine warp onto an image of the same size: `points` maps pixel centres (for
    /// keypoints), `boxes` the continuous plane (albumentations' `bbox_matrix`, about
    /// `(w / 2, h / 2)`). `reflect` for the mirroring borders, whose mirrored objects
    /// albumentations adds as for pads.
    Affine {
        points: Affine2,
        boxes: Affine2,
        reflect: bool,
        /// Factor of keypoint scales: the larger drawn scale (albumentations' `max(scale)`).
        scale: f64,
    },
    /// `Perspective`: points go through the homography `matrix` (row-major 3 × 3, onto a
    /// `max_width × max_height` canvas), then are scaled by `scale` `(x, y)` onto the `out`
    /// `(h, w)` image, as albumentations' `perspective_bboxes` / `_keypoints` do (`keep_size`:
    /// back to the input size; otherwise `scale` is 1 and `out` the canvas).
    Perspective {
        matrix: [f64; 9],
        scale: (f64, f64),
        out: (i64, i64),
    },
    /// A per-pixel remap onto an image of the same size (boxes and keypoints follow masks
    /// of themselves through it, see `remap_targets`).
    Remap(SourceMap),
}

impl Geometry {
    /// The output `(height, width)` for an `(height, width)` input.
    pub(crate) fn out_size(&self, (h, w): (i64, i64)) -> (i64, i64) {
        match *self {
            Geometry::Dihedral(Move::Transpose | Move::Rot90(1 | 3)) => (w, h),
            Geometry::Dihedral(_) => (h, w),
            Geometry::Crop { out, .. }
            | Geometry::Resize { out, .. }
            | Geometry::Perspective { out, .. } => out,
            Geometry::Pad {
                margins: [t, b, l, r],
                ..
            } => (h + t + b, w + l + r),
            Geometry::Affine { .. } | Geometry::Remap(_) => (h, w),
        }
    }
}

/// `m` applied to the point `(x, y)`.
pub(crate) fn apply(m: &Affine2, x: f64, y: f64) -> (f64, f64) {
    (m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5])
}

/// `cv2.perspectiveTransform` of a float32 point: computed in float64, a point at
/// infinity (`|w| <= FLT_EPSILON`) sent to the origin, the result rounded to float32.
pub(crate) fn project(m: &[f64; 9], x: f64, y: f64) -> (f64, f64) {
    let (x, y) = (f64::from(x as f32), f64::from(y as f32));
    let w = x * m[6] + y * m[7] + m[8];
    if w.abs() <= f64::from(f32::EPSILON) {
        return (0.0, 0.0);
    }
    let w = 1.0 / w;
    let f = |v: f64| f64::from(v as f32);
    (
        f((x * m[0] + y * m[1] + m[2]) * w),
        f((x * m[3] + y * m[4] + m[5]) * w),
    )
}

/// albumentations' `bboxes_affine_largest_box`: the axis-aligned box around the four moved
/// corners of `[x_min, y_min, x_max, y_max]`.
pub(crate) fn enclosing_box(m: &Affine2, [x0, y0, x1, y1]: [f64; 4]) -> [f64; 4] {
    let corners = [(x0, y0), (x1, y0), (x1, y1), (x0, y1)].map(|(x, y)| apply(m, x, y));
    let fold = |f: fn(f64, f64) -> f64, pick: fn(&(f64, f64)) -> f64| {
        corners.iter().map(pick).reduce(f).unwrap_or(f64::NAN)
    };
    [
        fold(f64::min, |c| c.0),
        fold(f64::min, |c| c.1),
        fold(f64::max, |c| c.0),
        fold(f64::max, |c| c.1),
    ]
}

/// `np.allclose(m, eye(3))`: albumentations leaves boxes and keypoints alone then.
pub(crate) fn is_identity(m: &Affine2) -> bool {
    let eye = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0];
    m.iter()
        .zip(eye)
        .all(|(a, b): (&f64, f64)| (a - b).abs() <= 1e-8 + 1e-5 * b.abs())
}

/// albumentations' `calculate_affine_transform_padding` as `[top, bottom, left, right]`:
/// how far the mirrored tiling must reach for the warp of an `(h, w)` image to see only
/// image copies.
pub(crate) fn affine_padding(m: &Affine2, (h, w): (i64, i64)) -> [i64; 4] {
    if is_identity(m) {
        return [0; 4];
    }
    let (hf, wf) = (h as f64, w as f64);
    let corners = [(0.0, 0.0), (wf, 0.0), (wf, hf), (0.0, hf)];
    let all: Vec<(f64, f64)> = corners
        .iter()
        .copied()
        .chain(corners.iter().map(|&(x, y)| apply(m, x, y)))
        .collect();
    let bounds = |pts: &[(f64, f64)]| {
        pts.iter().fold(
            [
                f64::INFINITY,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NEG_INFINITY,
            ],
            |[a, b, c, d], &(x, y)| [a.min(x), b.min(y), c.max(x), d.max(y)],
        )
    };
    let [x0, y0, x1, y1] = bounds(&all);
    let inv = invert(m);
    let back = [(x0, y0), (x1, y0), (x1, y1), (x0, y1)].map(|(x, y)| apply(&inv, x, y));
    let [x0, y0, x1, y1] = bounds(&back);
    let up = |v: f64| (v.ceil() as i64).max(0);
    [up(-y0), up(y1 - hf), up(-x0), up(x1 - wf)]
}

/// One cell of albumentations' reflection grid: a copy of the image, mirrored or not,
/// whose origin lands at `(dx, dy)` in the padded output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cell {
    pub flip_x: bool,
    pub flip_y: bool,
    pub dx: i64,
    pub dy: i64,
}

/// albumentations' `get_pad_grid_dimensions` + `generate_reflected_*`: the image tiled,
/// alternately mirrored, far enough to cover the `[top, bottom, left, right]` padding of an
/// `(h, w)` image, row by row (the order albumentations stacks the copies in).
pub(crate) fn reflection_grid(
    [top, bottom, left, right]: [i64; 4],
    (h, w): (i64, i64),
) -> Vec<Cell> {
    let ceil = |a: i64, b: i64| (a + b - 1) / b;
    let (row0, col0) = (ceil(top, h), ceil(left, w));
    let rows = 1 + row0 + ceil(bottom, h);
    let cols = 1 + col0 + ceil(right, w);
    let mut cells = Vec::new();
    for row in 0..rows {
        for col in 0..cols {
            let (i, j) = (row - row0, col - col0);
            cells.push(Cell {
                flip_x: j % 2 != 0,
                flip_y: i % 2 != 0,
                dx: j * w + left,
                dy: i * h + top,
            });
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reflection_grid_covers_the_padding_in_albumentations_order() {
        // 10 rows above a 20-row image need one mirrored copy; 25 columns left of a 10-wide
        // one need three (mirrored, plain, mirrored).
        let cells = reflection_grid([10, 0, 25, 0], (20, 10));
        assert_eq!(cells.len(), 2 * 4);
        assert_eq!(
            cells[0],
            Cell {
                flip_x: true,
                flip_y: true,
                dx: -30 + 25,
                dy: -20 + 10
            }
        );
        assert_eq!(
            cells[7],
            Cell {
                flip_x: false,
                flip_y: false,
                dx: 25,
                dy: 10
            }
        );
        assert_eq!(reflection_grid([0; 4], (5, 5)).len(), 1);
    }

    #[test]
    fn output_sizes_follow_the_move() {
        assert_eq!(Geometry::Dihedral(Move::Rot90(1)).out_size((3, 5)), (5, 3));
        assert_eq!(Geometry::Dihedral(Move::Flip(0)).out_size((3, 5)), (3, 5));
        let pad = Geometry::Pad {
            margins: [1, 2, 3, 4],
            reflect: false,
        };
        assert_eq!(pad.out_size((3, 5)), (6, 12));
    }
}
