//! Boxes and keypoints under the dropout ops (`CoarseDropout`, `GridMask`), as
//! albumentations 2.0.8's `BaseDropout` treats them: nothing moves, but keypoints inside a
//! hole are dropped (with `remove_invisible`) and boxes are cut down to what the holes
//! leave of them (`filter_bboxes_by_holes`, `resize_boxes_to_visible_area`).

use crate::boxes::{BboxParams, Row};
use crate::remap_targets::albumentations_pixel;

/// The dropped pixels of one call, row-major `height × width`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Holes {
    pub height: i64,
    pub width: i64,
    pub dropped: Vec<bool>,
}

impl Holes {
    /// Rectangles `[x_min, y_min, x_max, y_max)` of an `height × width` image.
    pub(crate) fn rects(height: i64, width: i64, rects: &[[i64; 4]]) -> Holes {
        let mut dropped = vec![false; (height * width) as usize];
        for &[x0, y0, x1, y1] in rects {
            for y in y0.max(0)..y1.min(height) {
                let row = (y * width) as usize;
                dropped[row + x0.max(0) as usize..row + x1.min(width).max(x0) as usize].fill(true);
            }
        }
        Holes {
            height,
            width,
            dropped,
        }
    }

    fn at(&self, x: i64, y: i64) -> bool {
        self.dropped[(y * self.width + x) as usize]
    }
}

/// albumentations' `filter_bboxes_by_holes` + `resize_boxes_to_visible_area` on pixel
/// boxes: each box taken at whole pixels (coordinates truncated as numpy's `astype(int)`),
/// dropped when its visible pixels fall below `min_area`, `min_visibility` of its area, or
/// to none, and otherwise shrunk to the rows and columns that still show a pixel of it.
/// So boxes become whole pixels even where no hole touches them, as there.
pub(crate) fn boxes(rows: Vec<Row>, holes: &Holes, p: &BboxParams) -> Vec<Row> {
    let (h, w) = (holes.height, holes.width);
    rows.into_iter()
        .filter_map(|mut r| {
            let x0 = albumentations_pixel(r[0], w) as i64;
            let y0 = albumentations_pixel(r[1], h) as i64;
            let x1 = (albumentations_pixel(r[2], w) as i64).min(w);
            let y1 = (albumentations_pixel(r[3], h) as i64).min(h);
            let area = (x1 - x0) * (y1 - y0);
            let mut visible = 0;
            let (mut cols, mut lines) = ([i64::MAX, i64::MIN], [i64::MAX, i64::MIN]);
            for y in y0..y1 {
                for x in x0..x1 {
                    if !holes.at(x, y) {
                        visible += 1;
                        cols = [cols[0].min(x), cols[1].max(x)];
                        lines = [lines[0].min(y), lines[1].max(y)];
                    }
                }
            }
            let remaining = visible as f64;
            // numpy's `remaining / area` with area 0 is NaN or inf; `remaining > 0` decides.
            let keep = remaining >= p.min_area
                && remaining / area as f64 >= p.min_visibility
                && visible > 0;
            if !keep {
                return None;
            }
            let b = [cols[0], lines[0], cols[1] + 1, lines[1] + 1];
            r[..4].copy_from_slice(&b.map(|v| v as f64));
            Some(r)
        })
        .collect()
}

/// albumentations' `filter_keypoints_in_holes`: with `remove_invisible`, keypoints on a
/// dropped pixel go (`x_min <= x < x_max` per hole, i.e. the pixel `floor(x)`).
pub(crate) fn keypoints(rows: Vec<Row>, holes: &Holes, remove_invisible: bool) -> Vec<Row> {
    if !remove_invisible {
        return rows;
    }
    let (h, w) = (holes.height as f64, holes.width as f64);
    rows.into_iter()
        .filter(|r| {
            let inside = (0.0..w).contains(&r[0]) && (0.0..h).contains(&r[1]);
            !(inside && holes.at(r[0].floor() as i64, r[1].floor() as i64))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boxes::BboxFormat;

    fn params(min_area: f64, min_visibility: f64) -> BboxParams {
        BboxParams {
            format: BboxFormat::PascalVoc,
            min_area,
            min_visibility,
            min_width: 0.0,
            min_height: 0.0,
        }
    }

    #[test]
    fn boxes_shrink_to_what_the_holes_leave_or_go() {
        let holes = Holes::rects(10, 10, &[[0, 0, 4, 10]]);
        let rows = vec![
            vec![2.0, 1.0, 6.0, 3.0, 1.0], // left half covered: columns 4..6 stay
            vec![0.0, 0.0, 3.0, 3.0, 2.0], // wholly covered
            vec![5.5, 5.2, 8.9, 9.0, 3.0], // untouched, truncated to whole pixels
        ];
        let out = boxes(rows.clone(), &holes, &params(0.0, 0.0));
        assert_eq!(
            out,
            [vec![4.0, 1.0, 6.0, 3.0, 1.0], vec![5.0, 5.0, 8.0, 8.0, 3.0]]
        );
        // Half of the first box is visible: under min_visibility 0.6 it goes too.
        assert_eq!(boxes(rows, &holes, &params(0.0, 0.6)).len(), 1);
    }

    #[test]
    fn keypoints_in_holes_go_only_with_remove_invisible() {
        let holes = Holes::rects(10, 10, &[[2, 2, 4, 4]]);
        let rows = vec![
            vec![3.9, 2.0, 1.0],
            vec![4.0, 3.0, 2.0],
            vec![1.5, 1.5, 3.0],
        ];
        let out = keypoints(rows.clone(), &holes, true);
        assert_eq!(out, [vec![4.0, 3.0, 2.0], vec![1.5, 1.5, 3.0]]);
        assert_eq!(keypoints(rows, &holes, false).len(), 3);
    }
}
