//! The plane geometry of one geometric op's call, as box and keypoint rules need it: what
//! the op did to the pixels, in numbers rather than in pixels.

use crate::flips::Move;

/// What one call of a geometric op did to the image plane.
#[derive(Debug, Clone, Copy, PartialEq)]
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
}

impl Geometry {
    /// The output `(height, width)` for an `(height, width)` input.
    pub(crate) fn out_size(&self, (h, w): (i64, i64)) -> (i64, i64) {
        match *self {
            Geometry::Dihedral(Move::Transpose | Move::Rot90(1 | 3)) => (w, h),
            Geometry::Dihedral(_) => (h, w),
            Geometry::Crop { out, .. } | Geometry::Resize { out, .. } => out,
            Geometry::Pad {
                margins: [t, b, l, r],
                ..
            } => (h + t + b, w + l + r),
        }
    }
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
