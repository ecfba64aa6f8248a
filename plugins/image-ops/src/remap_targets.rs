//! Boxes and keypoints under the per-pixel remaps (`GridDistortion`, `ElasticTransform`,
//! `OpticalDistortion`), as albumentations 2.0.8 moves them: not through an inverted map
//! but by remapping a mask of each target (`remap_bboxes`, `remap_keypoints_via_mask`, its
//! default `keypoint_remapping_method = "mask"`) with `cv2.remap`'s nearest pixel and a
//! zero constant border, whatever the op's own sampling and border are. Its `"direct"`
//! keypoint method (an approximate inverse map) is here too.

use crate::boxes::Row;

/// Where every output pixel of a remap reads from: the float32 `cv2.remap` maps, row-major
/// `height × width`; `direct` for `keypoint_remapping_method = "direct"`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SourceMap {
    pub height: i64,
    pub width: i64,
    pub map_x: Vec<f32>,
    pub map_y: Vec<f32>,
    pub direct: bool,
}

impl SourceMap {
    /// A separable map: output `(y, x)` reads column `xs[x]`, row `ys[y]`.
    pub(crate) fn separable(xs: &[f64], ys: &[f64]) -> SourceMap {
        let (w, h) = (xs.len(), ys.len());
        let mut map_x = Vec::with_capacity(h * w);
        let mut map_y = Vec::with_capacity(h * w);
        for &y in ys {
            map_x.extend(xs.iter().map(|&x| x as f32));
            map_y.extend(std::iter::repeat_n(y as f32, w));
        }
        SourceMap {
            height: h as i64,
            width: w as i64,
            map_x,
            map_y,
            direct: false,
        }
    }

    /// The source pixel `(x, y)` of every output pixel in row-major order, `None` where
    /// nearest sampling (`rint`, OpenCV's `saturate_cast<int>`) lands outside the image.
    fn sources(&self) -> impl Iterator<Item = (i64, i64, Option<(i64, i64)>)> + '_ {
        let (h, w) = (self.height, self.width);
        (0..h)
            .flat_map(move |y| (0..w).map(move |x| (x, y)))
            .map(move |(x, y)| {
                let i = (y * w + x) as usize;
                let sx = self.map_x[i].round_ties_even();
                let sy = self.map_y[i].round_ties_even();
                let inside = (0.0..w as f32).contains(&sx) && (0.0..h as f32).contains(&sy);
                (x, y, inside.then_some((sx as i64, sy as i64)))
            })
    }
}

/// A pixel coordinate as albumentations holds it: normalised in float32, scaled back in
/// float64 (so `23` on a 24-pixel axis is `22.9999995`).
pub(crate) fn albumentations_pixel(v: f64, n: i64) -> f64 {
    f64::from((v / n as f64) as f32) * n as f64
}

/// albumentations' `remap_bboxes`: each box's pixels (`bboxes_to_mask`: corners rounded half
/// to even, clamped into the image, both ends included) remapped, and the box replaced by
/// the first and last row and column its pixels reach (last ones included, so not `+ 1`).
/// A box whose pixels all leave keeps its coordinates, as albumentations keeps them.
pub(crate) fn boxes(rows: Vec<Row>, map: &SourceMap) -> Vec<Row> {
    let (h, w) = (map.height, map.width);
    let snap =
        |v: f64, n: i64| (albumentations_pixel(v, n).round_ties_even() as i64).clamp(0, n - 1);
    let rects: Vec<[i64; 4]> = rows
        .iter()
        .map(|r| [snap(r[0], w), snap(r[1], h), snap(r[2], w), snap(r[3], h)])
        .collect();
    let mut reach: Vec<Option<[i64; 4]>> = vec![None; rows.len()];
    for (x, y, source) in map.sources() {
        let Some((sx, sy)) = source else { continue };
        for (rect, reach) in rects.iter().zip(reach.iter_mut()) {
            if !(rect[0] <= sx && sx <= rect[2] && rect[1] <= sy && sy <= rect[3]) {
                continue;
            }
            *reach = Some(match *reach {
                None => [x, y, x, y],
                Some([x0, y0, x1, y1]) => [x0.min(x), y0.min(y), x1.max(x), y1.max(y)],
            });
        }
    }
    rows.into_iter()
        .zip(reach)
        .map(|(mut r, reach)| {
            if let Some(b) = reach {
                r[..4].copy_from_slice(&b.map(|v| v as f64));
            }
            r
        })
        .collect()
}

/// The keypoints moved by albumentations' method for `map` (`"mask"` unless `direct`).
pub(crate) fn keypoints(rows: Vec<Row>, map: &SourceMap) -> Vec<Row> {
    if map.direct {
        keypoints_direct(rows, map)
    } else {
        keypoints_via_mask(rows, map)
    }
}

/// albumentations' `remap_keypoints_via_mask`: each keypoint drawn as a radius-1 disc (the
/// pixel and its four neighbours; later keypoints over earlier ones) at its rounded
/// position, the label image remapped, and the keypoint moved to the first pixel (row-major)
/// that still shows it. Keypoints no pixel shows are dropped, `remove_invisible` or not.
fn keypoints_via_mask(rows: Vec<Row>, map: &SourceMap) -> Vec<Row> {
    let (h, w) = (map.height, map.width);
    let mut labels = vec![0usize; (h * w) as usize];
    for (i, r) in rows.iter().enumerate() {
        let (x, y) = (r[0].round_ties_even(), r[1].round_ties_even());
        if !((0.0..w as f64).contains(&x) && (0.0..h as f64).contains(&y)) {
            continue;
        }
        let (x, y) = (x as i64, y as i64);
        for (dx, dy) in [(0, -1), (-1, 0), (0, 0), (1, 0), (0, 1)] {
            let (px, py) = (x + dx, y + dy);
            if (0..w).contains(&px) && (0..h).contains(&py) {
                labels[(py * w + px) as usize] = i + 1;
            }
        }
    }
    let mut found: Vec<Option<(i64, i64)>> = vec![None; rows.len()];
    for (x, y, source) in map.sources() {
        let Some((sx, sy)) = source else { continue };
        let label = labels[(sy * w + sx) as usize];
        if label > 0 && found[label - 1].is_none() {
            found[label - 1] = Some((x, y));
        }
    }
    rows.into_iter()
        .zip(found)
        .filter_map(|(mut r, at)| {
            let (x, y) = at?;
            (r[0], r[1]) = (x as f64, y as f64);
            Some(r)
        })
        .collect()
}

/// albumentations' `generate_inverse_distortion_map`, in its float32 arithmetic: every
/// source pixel whose map point lies in the image claims the up to 2 × 2 pixels around that
/// point, unless a claim already there looks closer (albumentations compares the distance
/// to the map point with the distance to the earlier claimant's source pixel, and takes a
/// zero x as unclaimed; both kept).
fn inverse(map: &SourceMap) -> [Vec<f32>; 2] {
    let (h, w) = (map.height, map.width);
    let mut inv_x = vec![0f32; (h * w) as usize];
    let mut inv_y = vec![0f32; (h * w) as usize];
    for y in 0..h {
        for x in 0..w {
            let i = (y * w + x) as usize;
            let (dx, dy) = (map.map_x[i], map.map_y[i]);
            if !((0.0..w as f32).contains(&dx) && (0.0..h as f32).contains(&dy)) {
                continue;
            }
            let (fx, fy) = (dx.floor() as i64, dy.floor() as i64);
            for ny in fy..=(fy + 1).min(h - 1) {
                for nx in fx..=(fx + 1).min(w - 1) {
                    let j = (ny * w + nx) as usize;
                    let (nxf, nyf) = (nx as f32, ny as f32);
                    let here = (nxf - dx).abs() + (nyf - dy).abs();
                    let there = (nxf - inv_x[j]).abs() + (nyf - inv_y[j]).abs();
                    if inv_x[j] == 0.0 || here < there {
                        (inv_x[j], inv_y[j]) = (x as f32, y as f32);
                    }
                }
            }
        }
    }
    [inv_x, inv_y]
}

/// albumentations' `remap_keypoints` (`"direct"`): each keypoint, clamped into the image and
/// truncated to a pixel, takes that pixel's inverse-map entry, clamped into the image. No
/// keypoint is dropped here.
fn keypoints_direct(rows: Vec<Row>, map: &SourceMap) -> Vec<Row> {
    let (h, w) = (map.height, map.width);
    let [inv_x, inv_y] = inverse(map);
    let (wl, hl) = ((w - 1) as f64, (h - 1) as f64);
    rows.into_iter()
        .map(|mut r| {
            let x = r[0].clamp(0.0, wl) as i64;
            let y = r[1].clamp(0.0, hl) as i64;
            let j = (y * w + x) as usize;
            r[0] = f64::from(inv_x[j]).clamp(0.0, wl);
            r[1] = f64::from(inv_y[j]).clamp(0.0, hl);
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shift by `(dx, dy)`: output `(x, y)` reads `(x - dx, y - dy)`.
    fn shift(h: usize, w: usize, dx: f64, dy: f64) -> SourceMap {
        let xs: Vec<f64> = (0..w).map(|x| x as f64 - dx).collect();
        let ys: Vec<f64> = (0..h).map(|y| y as f64 - dy).collect();
        SourceMap::separable(&xs, &ys)
    }

    #[test]
    fn a_shift_moves_boxes_to_their_inclusive_pixel_extent() {
        let rows = vec![vec![2.0, 1.0, 5.0, 4.0, 7.0], vec![0.0, 0.0, 1.0, 1.0, 8.0]];
        let out = boxes(rows, &shift(10, 10, 3.0, 2.0));
        // Columns 2..=5 move to 5..=8; the second box's pixels leave: kept as it was.
        assert_eq!(out[0], [5.0, 3.0, 8.0, 6.0, 7.0]);
        let out = boxes(
            vec![vec![0.0, 0.0, 1.0, 1.0, 8.0]],
            &shift(10, 10, -5.0, 0.0),
        );
        assert_eq!(out[0], [0.0, 0.0, 1.0, 1.0, 8.0]);
    }

    #[test]
    fn the_direct_method_reads_keypoints_through_the_inverse_map() {
        // Output (x, y) reads (x - 2, y - 1), so source pixel (1, 1) shows at (3, 2). No
        // output reads the corner (7, 5): its entry stays unclaimed, (0, 0), as there.
        let map = SourceMap {
            direct: true,
            ..shift(6, 8, 2.0, 1.0)
        };
        let out = keypoints(vec![vec![1.5, 1.0, 9.0], vec![7.0, 5.0, 8.0]], &map);
        assert_eq!(out, [vec![3.0, 2.0, 9.0], vec![0.0, 0.0, 8.0]]);
    }

    #[test]
    fn keypoints_follow_their_disc_and_vanish_with_it() {
        let rows = vec![
            vec![4.0, 4.0, 1.0],
            vec![0.0, 0.0, 2.0],
            vec![8.6, 2.4, 3.0],
        ];
        let out = keypoints(rows, &shift(10, 10, 1.0, 0.0));
        // The disc's first pixel row-major is the one above the centre.
        assert_eq!(
            out,
            [
                vec![5.0, 3.0, 1.0],
                vec![1.0, 0.0, 2.0],
                vec![9.0, 2.0, 3.0]
            ]
        );
        let out = keypoints(vec![vec![1.0, 1.0, 1.0]], &shift(10, 10, 12.0, 0.0));
        assert!(out.is_empty());
    }
}
