//! Bounding boxes under the geometric ops, after albumentations' `BboxParams`: format
//! conversion, the per-op coordinate rules, and the visibility / area filter. Boxes are
//! handled as rows `[x_min, y_min, x_max, y_max, extra...]` in pixels of the image they
//! belong to; extra columns (class labels, scores) ride along untouched.

use fe_plugin_api::{Error, Result};
use serde::Deserialize;

use crate::geometry::{
    affine_padding, enclosing_box, is_identity, project, reflection_grid, Geometry,
};

/// How the first four columns of a box row are written.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BboxFormat {
    /// `[x_min, y_min, x_max, y_max]` in pixels.
    PascalVoc,
    /// `[x_min, y_min, width, height]` in pixels.
    Coco,
    /// `[x_min, y_min, x_max, y_max]` as fractions of the image width / height.
    Albumentations,
    /// `[x_center, y_center, width, height]` as fractions of the image width / height.
    Yolo,
}

/// `bbox_params`: a format name alone, or a table with the filter thresholds.
#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(untagged)]
pub enum BboxParamsConfig {
    /// `bbox_params = "coco"`: no filtering beyond dropping boxes that vanish.
    Format(BboxFormat),
    /// `bbox_params = { format = "coco", min_visibility = 0.3 }`.
    Table(BboxParams),
}

/// albumentations' `BboxParams` (the fields fe-image-ops supports).
#[derive(Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BboxParams {
    /// Coordinate format of the input and output rows.
    pub format: BboxFormat,
    /// Boxes whose visible area (pixels) ends up below this are dropped (default 0).
    #[serde(default)]
    pub min_area: f64,
    /// Boxes keeping less than this fraction of their area inside the image are dropped.
    #[serde(default)]
    pub min_visibility: f64,
    /// Boxes narrower than this (pixels, after clipping) are dropped (default 0).
    #[serde(default)]
    pub min_width: f64,
    /// Boxes lower than this (pixels, after clipping) are dropped (default 0).
    #[serde(default)]
    pub min_height: f64,
}

impl BboxParamsConfig {
    /// The parameters, checked.
    pub(crate) fn params(self) -> Result<BboxParams> {
        let params = match self {
            BboxParamsConfig::Format(format) => BboxParams {
                format,
                min_area: 0.0,
                min_visibility: 0.0,
                min_width: 0.0,
                min_height: 0.0,
            },
            BboxParamsConfig::Table(params) => params,
        };
        if !(0.0..=1.0).contains(&params.min_visibility) {
            return Err(Error::config(
                "bbox_params.min_visibility",
                format!("must be in [0, 1], got {}", params.min_visibility),
            ));
        }
        for (field, v) in [
            ("min_area", params.min_area),
            ("min_width", params.min_width),
            ("min_height", params.min_height),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(Error::config(
                    format!("bbox_params.{field}"),
                    format!("must be >= 0, got {v}"),
                ));
            }
        }
        Ok(params)
    }
}

/// One box (or keypoint) row: coordinates first, extra columns after.
pub(crate) type Row = Vec<f64>;

/// `rows` in `format` on an `(height, width)` image, as pixel `[x_min, y_min, x_max, y_max]`,
/// after albumentations' input check (coordinates inside the image, positive size).
pub(crate) fn to_pixels(
    rows: Vec<Row>,
    format: BboxFormat,
    (h, w): (i64, i64),
    key: &str,
) -> Result<Vec<Row>> {
    let (h, w) = (h as f64, w as f64);
    rows.into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            let [a, b, c, d] = [r[0], r[1], r[2], r[3]];
            if format == BboxFormat::Yolo && [a, b, c, d].iter().any(|&v| !(v > 0.0 && v <= 1.0)) {
                return Err(Error::msg(format!(
                    "input `{key}`, box {i}: yolo coordinates must be in (0, 1], got {:?}",
                    &r[..4]
                )));
            }
            let normalized = match format {
                BboxFormat::PascalVoc => [a / w, b / h, c / w, d / h],
                BboxFormat::Coco => [a / w, b / h, (a + c) / w, (b + d) / h],
                BboxFormat::Albumentations => [a, b, c, d],
                BboxFormat::Yolo => [a - c / 2.0, b - d / 2.0, a + c / 2.0, b + d / 2.0],
            };
            check_normalized(&normalized, key, i, &r[..4])?;
            let [x0, y0, x1, y1] = normalized;
            r[..4].copy_from_slice(&[x0 * w, y0 * h, x1 * w, y1 * h]);
            Ok(r)
        })
        .collect()
}

/// albumentations' `check_bboxes`: inside [0, 1] (up to `np.isclose`) and non-empty.
fn check_normalized(n: &[f64; 4], key: &str, i: usize, given: &[f64]) -> Result<()> {
    let inside = |v: f64| (0.0..=1.0).contains(&v) || v.abs() <= 1e-8 || (v - 1.0).abs() <= 1.1e-5;
    if !n.iter().all(|&v| inside(v)) {
        return Err(Error::msg(format!(
            "input `{key}`, box {i} {given:?} is not inside the image (albumentations' check)"
        )));
    }
    if n[2] <= n[0] || n[3] <= n[1] {
        return Err(Error::msg(format!(
            "input `{key}`, box {i} {given:?} has x_max <= x_min or y_max <= y_min"
        )));
    }
    Ok(())
}

/// Pixel `[x_min, y_min, x_max, y_max]` rows back to `format` on an `(height, width)` image.
pub(crate) fn from_pixels(rows: Vec<Row>, format: BboxFormat, (h, w): (i64, i64)) -> Vec<Row> {
    let (h, w) = (h as f64, w as f64);
    rows.into_iter()
        .map(|mut r| {
            let [x0, y0, x1, y1] = [r[0], r[1], r[2], r[3]];
            let out = match format {
                BboxFormat::PascalVoc => [x0, y0, x1, y1],
                BboxFormat::Coco => [x0, y0, x1 - x0, y1 - y0],
                BboxFormat::Albumentations => [x0 / w, y0 / h, x1 / w, y1 / h],
                BboxFormat::Yolo => [
                    (x0 + x1) / 2.0 / w,
                    (y0 + y1) / 2.0 / h,
                    (x1 - x0) / w,
                    (y1 - y0) / h,
                ],
            };
            r[..4].copy_from_slice(&out);
            r
        })
        .collect()
}

/// Pixel boxes of an `(height, width)` image moved by `g`, in pixels of the output image.
/// Reflecting pads add the mirrored copies albumentations adds (the objects the mirror
/// shows); copies wholly outside the output are left out.
pub(crate) fn transform(rows: Vec<Row>, g: &Geometry, (h, w): (i64, i64)) -> Vec<Row> {
    let (hf, wf) = (h as f64, w as f64);
    let map = |mut r: Row, f: &dyn Fn([f64; 4]) -> [f64; 4]| {
        let out = f([r[0], r[1], r[2], r[3]]);
        r[..4].copy_from_slice(&out);
        r
    };
    match *g {
        Geometry::Dihedral(m) => {
            use crate::flips::Move;
            let f = move |[x0, y0, x1, y1]: [f64; 4]| match m {
                Move::Keep => [x0, y0, x1, y1],
                Move::Flip(0) => [x0, hf - y1, x1, hf - y0],
                Move::Flip(1) => [wf - x1, y0, wf - x0, y1],
                Move::Flip(_) | Move::Rot90(2) => [wf - x1, hf - y1, wf - x0, hf - y0],
                Move::Transpose => [y0, x0, y1, x1],
                Move::Rot90(1) => [y0, wf - x1, y1, wf - x0],
                Move::Rot90(3) => [hf - y1, x0, hf - y0, x1],
                Move::Rot90(_) => [x0, y0, x1, y1],
            };
            rows.into_iter().map(|r| map(r, &f)).collect()
        }
        Geometry::Crop { window, out } => {
            let [cx, cy, cx1, cy1] = window.map(|v| v as f64);
            let (sx, sy) = (out.1 as f64 / (cx1 - cx), out.0 as f64 / (cy1 - cy));
            let f = |[x0, y0, x1, y1]: [f64; 4]| {
                [
                    (x0 - cx) * sx,
                    (y0 - cy) * sy,
                    (x1 - cx) * sx,
                    (y1 - cy) * sy,
                ]
            };
            rows.into_iter().map(|r| map(r, &f)).collect()
        }
        Geometry::Resize { out, .. } => {
            // Boxes are scale invariant in albumentations' normalised coordinates: the actual
            // size ratio, not LongestMaxSize's unrounded scale, applies.
            let (sx, sy) = (out.1 as f64 / wf, out.0 as f64 / hf);
            let f = |[x0, y0, x1, y1]: [f64; 4]| [x0 * sx, y0 * sy, x1 * sx, y1 * sy];
            rows.into_iter().map(|r| map(r, &f)).collect()
        }
        Geometry::Pad { margins, reflect } => {
            let [top, bottom, left, right] = margins.map(|v| v as f64);
            if !reflect {
                let f = |[x0, y0, x1, y1]: [f64; 4]| [x0 + left, y0 + top, x1 + left, y1 + top];
                return rows.into_iter().map(|r| map(r, &f)).collect();
            }
            let (nh, nw) = (hf + top + bottom, wf + left + right);
            let mut out = Vec::new();
            for cell in reflection_grid(margins, (h, w)) {
                for r in &rows {
                    let mut r = r.clone();
                    let [mut x0, mut y0, mut x1, mut y1] = [r[0], r[1], r[2], r[3]];
                    if cell.flip_x {
                        (x0, x1) = (wf - x1, wf - x0);
                    }
                    if cell.flip_y {
                        (y0, y1) = (hf - y1, hf - y0);
                    }
                    let (dx, dy) = (cell.dx as f64, cell.dy as f64);
                    r[..4].copy_from_slice(&[x0 + dx, y0 + dy, x1 + dx, y1 + dy]);
                    if r[2] > 0.0 && r[3] > 0.0 && r[0] < nw && r[1] < nh {
                        out.push(r);
                    }
                }
            }
            out
        }
        Geometry::Affine {
            boxes: m, reflect, ..
        } => {
            if is_identity(&m) {
                return rows;
            }
            let copies = if reflect {
                // The mirrored tiling around the image, placed as the warp sees it.
                let margins = affine_padding(&m, (h, w));
                let mut copies = Vec::new();
                for cell in reflection_grid(margins, (h, w)) {
                    let (dx, dy) = ((cell.dx - margins[2]) as f64, (cell.dy - margins[0]) as f64);
                    copies.extend(rows.iter().map(|r| {
                        let mut r = r.clone();
                        if cell.flip_x {
                            (r[0], r[2]) = (wf - r[2], wf - r[0]);
                        }
                        if cell.flip_y {
                            (r[1], r[3]) = (hf - r[3], hf - r[1]);
                        }
                        let moved = [r[0] + dx, r[1] + dy, r[2] + dx, r[3] + dy];
                        r[..4].copy_from_slice(&moved);
                        r
                    }));
                }
                copies
            } else {
                rows
            };
            copies
                .into_iter()
                .map(|r| map(r, &|b| enclosing_box(&m, b)))
                .filter(|r| r[2] > 0.0 && r[3] > 0.0 && r[0] < wf && r[1] < hf)
                .collect()
        }
        Geometry::Perspective {
            matrix,
            scale: (sx, sy),
            ..
        } => {
            let f = |[x0, y0, x1, y1]: [f64; 4]| {
                let c =
                    [(x0, y0), (x1, y0), (x1, y1), (x0, y1)].map(|(x, y)| project(&matrix, x, y));
                let xs = c.map(|p| p.0);
                let ys = c.map(|p| p.1);
                let min = |v: [f64; 4]| v.into_iter().fold(f64::INFINITY, f64::min);
                let max = |v: [f64; 4]| v.into_iter().fold(f64::NEG_INFINITY, f64::max);
                [min(xs) * sx, min(ys) * sy, max(xs) * sx, max(ys) * sy]
            };
            rows.into_iter().map(|r| map(r, &f)).collect()
        }
        Geometry::Remap(ref source) => crate::remap_targets::boxes(rows, source),
    }
}

/// albumentations' `filter_bboxes` on an `(height, width)` image: boxes clipped to the image,
/// dropped when empty before clipping or below the thresholds after.
fn filter_once(rows: Vec<Row>, p: &BboxParams, (h, w): (i64, i64)) -> Vec<Row> {
    const EPS: f64 = 1e-7;
    let (h, w) = (h as f64, w as f64);
    rows.into_iter()
        .filter_map(|mut r| {
            let area = (r[2] - r[0]) * (r[3] - r[1]);
            let [x0, x1] = [r[0], r[2]].map(|v| v.clamp(0.0, w));
            let [y0, y1] = [r[1], r[3]].map(|v| v.clamp(0.0, h));
            let (cw, ch) = (x1 - x0, y1 - y0);
            let clipped = cw * ch;
            let keep = area >= EPS
                && clipped >= p.min_area - EPS
                && clipped / (area + EPS) >= p.min_visibility
                && cw >= p.min_width - EPS
                && ch >= p.min_height - EPS;
            r[..4].copy_from_slice(&[x0, y0, x1, y1]);
            keep.then_some(r)
        })
        .collect()
}

/// The filter as albumentations' `Compose` runs it around one transform: once after the
/// transform and again before converting back. The second pass is what drops boxes that
/// clipping squashed to zero area (e.g. wholly outside a crop), so both run.
pub(crate) fn filter(rows: Vec<Row>, p: &BboxParams, size: (i64, i64)) -> Vec<Row> {
    filter_once(filter_once(rows, p, size), p, size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flips::Move;

    fn params(min_visibility: f64, min_area: f64) -> BboxParams {
        BboxParams {
            format: BboxFormat::PascalVoc,
            min_area,
            min_visibility,
            min_width: 0.0,
            min_height: 0.0,
        }
    }

    #[test]
    fn formats_round_trip_through_pixels() {
        let pascal = [2.0, 4.0, 6.0, 10.0, 7.0];
        for (format, row) in [
            (BboxFormat::PascalVoc, vec![2.0, 4.0, 6.0, 10.0, 7.0]),
            (BboxFormat::Coco, vec![2.0, 4.0, 4.0, 6.0, 7.0]),
            (BboxFormat::Albumentations, vec![0.2, 0.2, 0.6, 0.5, 7.0]),
            (BboxFormat::Yolo, vec![0.4, 0.35, 0.4, 0.3, 7.0]),
        ] {
            let px = to_pixels(vec![row.clone()], format, (20, 10), "b").unwrap();
            for (a, b) in px[0].iter().zip(&pascal) {
                assert!((a - b).abs() < 1e-12, "{format:?} to pixels: {px:?}");
            }
            let back = from_pixels(px, format, (20, 10));
            for (a, b) in back[0].iter().zip(&row) {
                assert!((a - b).abs() < 1e-12, "{format:?} back: {back:?}");
            }
        }
    }

    #[test]
    fn invalid_input_boxes_are_errors_naming_the_key() {
        let outside = to_pixels(
            vec![vec![2.0, 4.0, 11.0, 9.0]],
            BboxFormat::PascalVoc,
            (20, 10),
            "bbox",
        );
        assert!(outside.unwrap_err().message().contains("`bbox`, box 0"));
        let empty = to_pixels(
            vec![vec![2.0, 4.0, 0.0, 3.0]],
            BboxFormat::Coco,
            (20, 10),
            "bbox",
        );
        assert!(empty.unwrap_err().message().contains("x_max <= x_min"));
    }

    #[test]
    fn dihedral_moves_map_corners_onto_the_moved_image() {
        let r = vec![vec![1.0, 2.0, 4.0, 3.0]];
        let t = |m| transform(r.clone(), &Geometry::Dihedral(m), (5, 8))[0].clone();
        assert_eq!(t(Move::Flip(1)), [4.0, 2.0, 7.0, 3.0]);
        assert_eq!(t(Move::Flip(0)), [1.0, 2.0, 4.0, 3.0]);
        assert_eq!(t(Move::Flip(-1)), [4.0, 2.0, 7.0, 3.0]);
        assert_eq!(t(Move::Transpose), [2.0, 1.0, 3.0, 4.0]);
        // One counter-clockwise turn: the 8-wide image becomes 8 high, x -> 8 - x on y.
        assert_eq!(t(Move::Rot90(1)), [2.0, 4.0, 3.0, 7.0]);
        assert_eq!(t(Move::Rot90(3)), [2.0, 1.0, 3.0, 4.0]);
    }

    #[test]
    fn the_filter_clips_and_drops_by_visibility_area_and_emptiness() {
        let rows = vec![
            vec![-2.0, 0.0, 2.0, 4.0, 1.0],  // half visible
            vec![12.0, 0.0, 14.0, 2.0, 2.0], // wholly outside: clipped to zero width
            vec![1.0, 1.0, 3.0, 3.0, 3.0],   // inside, area 4
        ];
        let kept = filter(rows.clone(), &params(0.0, 0.0), (10, 10));
        assert_eq!(
            kept,
            [vec![0.0, 0.0, 2.0, 4.0, 1.0], vec![1.0, 1.0, 3.0, 3.0, 3.0]]
        );
        let kept = filter(rows.clone(), &params(0.6, 0.0), (10, 10));
        assert_eq!(kept, [vec![1.0, 1.0, 3.0, 3.0, 3.0]]);
        let kept = filter(rows, &params(0.0, 5.0), (10, 10));
        assert_eq!(kept, [vec![0.0, 0.0, 2.0, 4.0, 1.0]]);
    }

    #[test]
    fn reflecting_pads_add_the_mirrored_boxes_inside_the_output() {
        // A 20 x 30 image padded to 40 x 40 (10 rows above and below, 5 columns each side):
        // albumentations' rows for the box [1, 1, 5, 5].
        let g = Geometry::Pad {
            margins: [10, 10, 5, 5],
            reflect: true,
        };
        let out = transform(vec![vec![1.0, 1.0, 5.0, 5.0, 7.0]], &g, (20, 30));
        let out = filter(out, &params(0.0, 0.0), (40, 40));
        assert_eq!(
            out,
            [
                vec![0.0, 5.0, 4.0, 9.0, 7.0],
                vec![6.0, 5.0, 10.0, 9.0, 7.0],
                vec![0.0, 11.0, 4.0, 15.0, 7.0],
                vec![6.0, 11.0, 10.0, 15.0, 7.0],
            ]
        );
    }
}
