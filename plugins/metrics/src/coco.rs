//! COCO's box evaluation (pycocotools' `COCOeval` with `iouType = "bbox"`, its four area
//! ranges, 100 detections per image), ported step by step so the numbers match: per image,
//! class and area range, ground truth that is a crowd or outside the range is ignored (sorted
//! last); detections sorted by score (stable) and cut to 100, greedily matched to the unmatched
//! ground truth of highest IoU at each threshold (a crowd by the detection's own area, any
//! number of times); a detection matched to ignored ground truth, or unmatched and outside the
//! range, is ignored; per class, all images' detections ranked by score, cumulative precision
//! made monotone, and read at 101 recall points.
//!
//! One deliberate difference: where pycocotools ranks detections of equal score by image id,
//! this ranks them by their box, class and score bits, so the result does not depend on how
//! images were split over workers (with distinct scores the two orders agree).

use std::collections::BTreeMap;

/// A box `[x, y, w, h]` (COCO's top-left corner, width and height).
pub(crate) type Box4 = [f64; 4];

/// One image's ground truth `(box, class, crowd)` and detections `(box, class, score)`, in row
/// order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Image {
    pub truth: Vec<(Box4, i64, bool)>,
    pub detections: Vec<(Box4, i64, f64)>,
}

/// Detections kept per image and class (COCO's `maxDets[-1]`).
const MAX_DETS: usize = 100;

/// COCO's area ranges: all, small, medium, large (`areaRng`), in pixels².
const AREAS: [(f64, f64); 4] = [
    (0.0, 1e10),
    (0.0, 32.0 * 32.0),
    (32.0 * 32.0, 96.0 * 96.0),
    (96.0 * 96.0, 1e10),
];

/// numpy's `linspace(start, stop, num)`: `i · step + start`, the last point exactly `stop`.
fn linspace(start: f64, stop: f64, num: usize) -> Vec<f64> {
    let step = (stop - start) / (num - 1) as f64;
    let mut points: Vec<f64> = (0..num).map(|i| i as f64 * step + start).collect();
    points[num - 1] = stop;
    points
}

/// pycocotools' `maskUtils.iou` for two boxes: over the union, or over the detection's own
/// area when the ground truth is a crowd (a detection inside a crowd region matches it).
fn iou(d: &Box4, g: &Box4, crowd: bool) -> f64 {
    let w = (d[0] + d[2]).min(g[0] + g[2]) - d[0].max(g[0]);
    if w <= 0.0 {
        return 0.0;
    }
    let h = (d[1] + d[3]).min(g[1] + g[3]) - d[1].max(g[1]);
    if h <= 0.0 {
        return 0.0;
    }
    let inter = w * h;
    let union = if crowd {
        d[2] * d[3]
    } else {
        d[2] * d[3] + g[2] * g[3] - inter
    };
    inter / union
}

fn outside(area: f64, (low, high): (f64, f64)) -> bool {
    area < low || area > high
}

/// One detection after matching: score, a sort key for ties, and at each threshold whether it
/// matched and whether it is ignored (matched to an ignored ground truth, or unmatched and
/// outside the area range).
struct Scored {
    score: f64,
    key: [u64; 6],
    matched: Vec<bool>,
    ignored: Vec<bool>,
}

/// `evaluateImg` for one image, class and area range: the kept detections, and how many ground
/// truths count (neither crowds nor outside the range).
fn evaluate_image(
    truth: &[(Box4, bool)],
    dets: &[(Box4, f64)],
    thresholds: &[f64],
    range: (f64, f64),
) -> (Vec<Scored>, usize) {
    // Ground truth that counts first, the ignored after it (a stable sort, as mergesort).
    let mut truth: Vec<(Box4, bool, bool)> = truth
        .iter()
        .map(|&(b, crowd)| (b, crowd, crowd || outside(b[2] * b[3], range)))
        .collect();
    truth.sort_by_key(|g| g.2);
    let counted = truth.iter().filter(|g| !g.2).count();
    let mut order: Vec<usize> = (0..dets.len()).collect();
    order.sort_by(|&a, &b| dets[b].1.total_cmp(&dets[a].1));
    order.truncate(MAX_DETS);
    let mut out: Vec<Scored> = order
        .iter()
        .map(|&d| {
            let (b, score) = dets[d];
            let mut key = [0u64; 6];
            for (k, v) in key.iter_mut().zip(b.iter().chain([score].iter())) {
                *k = v.to_bits();
            }
            Scored {
                score,
                key,
                matched: vec![false; thresholds.len()],
                ignored: vec![false; thresholds.len()],
            }
        })
        .collect();
    for (t, &threshold) in thresholds.iter().enumerate() {
        let mut taken = vec![false; truth.len()];
        for (scored, &d) in out.iter_mut().zip(&order) {
            let mut best = threshold.min(1.0 - 1e-10);
            let mut m: Option<usize> = None;
            for (g, &(gt, crowd, ignored)) in truth.iter().enumerate() {
                // A crowd can match many detections; anything else once.
                if taken[g] && !crowd {
                    continue;
                }
                // Matched to a counted ground truth: ignored ones (sorted last) cannot win.
                if m.is_some_and(|m| !truth[m].2) && ignored {
                    break;
                }
                let overlap = iou(&dets[d].0, &gt, crowd);
                if overlap < best {
                    continue;
                }
                best = overlap;
                m = Some(g);
            }
            match m {
                Some(g) => {
                    taken[g] = true;
                    scored.matched[t] = true;
                    scored.ignored[t] = truth[g].2;
                }
                None => {
                    let b = dets[d].0;
                    scored.ignored[t] = outside(b[2] * b[3], range);
                }
            }
        }
    }
    (out, counted)
}

/// `accumulate` for one class: precision at each recall point, per threshold (`None` when
/// the class has no counted ground truth: COCO's -1, left out of the means).
fn class_precision(
    scored: &mut [Scored],
    truth: usize,
    thresholds: usize,
    recalls: &[f64],
) -> Option<Vec<Vec<f64>>> {
    if truth == 0 {
        return None;
    }
    scored.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.key.cmp(&b.key)));
    let per_threshold = (0..thresholds)
        .map(|t| {
            let (mut tp, mut fp) = (0u64, 0u64);
            let mut rc = Vec::with_capacity(scored.len());
            let mut pr = Vec::with_capacity(scored.len());
            for s in scored.iter() {
                // An ignored detection counts as neither, but keeps its place in the curve.
                if !s.ignored[t] {
                    if s.matched[t] {
                        tp += 1;
                    } else {
                        fp += 1;
                    }
                }
                rc.push(tp as f64 / truth as f64);
                pr.push(tp as f64 / (fp as f64 + tp as f64 + f64::EPSILON));
            }
            for i in (1..pr.len()).rev() {
                if pr[i] > pr[i - 1] {
                    pr[i - 1] = pr[i];
                }
            }
            recalls
                .iter()
                .map(|&r| {
                    // numpy's searchsorted(rc, r, side="left").
                    let at = rc.partition_point(|&v| v < r);
                    pr.get(at).copied().unwrap_or(0.0)
                })
                .collect()
        })
        .collect();
    Some(per_threshold)
}

/// Every class's precision rows (per threshold) over `images` in area range `range`.
fn precision_rows(images: &[Image], range: (f64, f64)) -> Vec<Vec<Vec<f64>>> {
    let thresholds = linspace(0.5, 0.95, 10);
    let recalls = linspace(0.0, 1.0, 101);
    let mut by_class: BTreeMap<i64, (Vec<Scored>, usize)> = BTreeMap::new();
    for image in images {
        let mut classes: Vec<i64> = image.truth.iter().map(|t| t.1).collect();
        classes.extend(image.detections.iter().map(|d| d.1));
        classes.sort_unstable();
        classes.dedup();
        for class in classes {
            let truth: Vec<(Box4, bool)> = image
                .truth
                .iter()
                .filter(|t| t.1 == class)
                .map(|t| (t.0, t.2))
                .collect();
            let dets: Vec<(Box4, f64)> = image
                .detections
                .iter()
                .filter(|d| d.1 == class)
                .map(|d| (d.0, d.2))
                .collect();
            let (scored, counted) = evaluate_image(&truth, &dets, &thresholds, range);
            let entry = by_class.entry(class).or_default();
            entry.0.extend(scored);
            entry.1 += counted;
        }
    }
    by_class
        .values_mut()
        .filter_map(|(scored, truth)| class_precision(scored, *truth, thresholds.len(), &recalls))
        .collect()
}

/// COCOeval's first six stats over `images`: mAP@[.5:.95], mAP@.5 and mAP@.75 over all areas,
/// then mAP@[.5:.95] of small, medium and large objects (NaN where COCO prints -1: no class
/// has counted ground truth in that range).
pub(crate) fn mean_average_precision(images: &[Image]) -> [f64; 6] {
    let mean = |v: &[f64]| {
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let mut stats = [f64::NAN; 6];
    for (a, &range) in AREAS.iter().enumerate() {
        let (mut all, mut half, mut three_quarters) = (Vec::new(), Vec::new(), Vec::new());
        for precision in precision_rows(images, range) {
            for (t, row) in precision.iter().enumerate() {
                all.extend_from_slice(row);
                match t {
                    0 => half.extend_from_slice(row),
                    5 => three_quarters.extend_from_slice(row),
                    _ => {}
                }
            }
        }
        if a == 0 {
            stats[..3].copy_from_slice(&[mean(&all), mean(&half), mean(&three_quarters)]);
        } else {
            stats[2 + a] = mean(&all);
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_linspace_points() {
        let t = linspace(0.5, 0.95, 10);
        assert_eq!(t[0], 0.5);
        assert_eq!(t[9], 0.95);
        assert_eq!(t[1], 0.5 + (0.95 - 0.5) / 9.0);
        assert_eq!(linspace(0.0, 1.0, 101)[50], 0.5);
        // pycocotools finds .75 among its thresholds with `==`.
        assert_eq!(t[5], 0.75);
    }

    #[test]
    fn a_perfect_detector_scores_one_and_a_miss_half() {
        let gt = ([10.0, 10.0, 20.0, 20.0], 1, false);
        let perfect = Image {
            truth: vec![gt],
            detections: vec![([10.0, 10.0, 20.0, 20.0], 1, 0.9)],
        };
        // Precision tp / (tp + fp + eps), as pycocotools computes it: 1 up to the eps.
        // A 20×20 box is small: APs is 1 too, and medium and large have nothing to count.
        let values = mean_average_precision(std::slice::from_ref(&perfect));
        for value in &values[..4] {
            assert!((value - 1.0).abs() < 1e-15, "{value}");
        }
        assert!(values[4].is_nan() && values[5].is_nan(), "{values:?}");
        // A second, undetected ground truth: recall stops at 0.5, so 51 of 101 points.
        let mut half = perfect;
        half.truth.push(([50.0, 50.0, 5.0, 5.0], 1, false));
        let [all, at_half, ..] = mean_average_precision(&[half]);
        assert!((at_half - 51.0 / 101.0).abs() < 1e-12, "{at_half}");
        assert!((all - 51.0 / 101.0).abs() < 1e-12, "{all}");
        // A class with ground truth but no detection scores 0 at every threshold.
        let missed = Image {
            truth: vec![([0.0, 0.0, 1.0, 1.0], 2, false)],
            detections: Vec::new(),
        };
        let with_missed = mean_average_precision(&[
            missed,
            Image {
                truth: vec![gt],
                detections: vec![([10.0, 10.0, 20.0, 20.0], 1, 0.9)],
            },
        ]);
        assert!((with_missed[0] - 0.5).abs() < 1e-15, "{with_missed:?}");
    }

    #[test]
    fn iou_of_overlapping_boxes() {
        // Two 2×2 boxes overlapping in a 1×2 strip: 2 / (4 + 4 - 2).
        assert_eq!(
            iou(&[0.0, 0.0, 2.0, 2.0], &[1.0, 0.0, 2.0, 2.0], false),
            2.0 / 6.0
        );
        assert_eq!(
            iou(&[0.0, 0.0, 1.0, 1.0], &[1.0, 0.0, 1.0, 1.0], false),
            0.0
        );
        // Against a crowd: the intersection over the detection's own area.
        assert_eq!(
            iou(&[0.0, 0.0, 2.0, 2.0], &[1.0, 0.0, 2.0, 2.0], true),
            2.0 / 4.0
        );
    }
}
