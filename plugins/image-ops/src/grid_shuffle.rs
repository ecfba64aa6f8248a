//! `RandomGridShuffle`: the image cut into a `rows × cols` grid of near-equal cells whose
//! cells of equal shape swap places at random; masks, boxes and keypoints move with them.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::seq::SliceRandom;
use rand::Rng;
use serde::Deserialize;

use crate::boxes::{self, BboxParamsConfig, Row};
use crate::components::components;
use crate::keypoints::{self, KeypointParamsConfig};
use crate::layout::{paired_keys, probability, rng, same_size};
use crate::remap_targets::albumentations_pixel;
use crate::targets::Targets;

/// `RandomGridShuffle` configuration (FastEstimator's and albumentations' names).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RandomGridShuffleConfig {
    /// Grid `[rows, columns]`, each at least 1 (default [3, 3]).
    #[serde(default = "three_by_three")]
    pub grid: [i64; 2],
    /// Probability of shuffling a sample (default 0.5).
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

fn three_by_three() -> [i64; 2] {
    [3, 3]
}

fn half() -> f64 {
    0.5
}

/// One call's shuffle: cells `[y_min, x_min, y_max, x_max)` in row-major order
/// (albumentations' `tiles`), and where each goes (`mapping[i]`: the cell whose place cell
/// `i` takes).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shuffle {
    pub tiles: Vec<[i64; 4]>,
    pub mapping: Vec<usize>,
}

/// Shuffles grid cells of equal shape among themselves (the same for every input).
pub struct RandomGridShuffle {
    keys: Vec<String>,
    targets: Targets,
    grid: [i64; 2],
    p: f64,
}

impl FromConfig for RandomGridShuffle {
    type Config = RandomGridShuffleConfig;
    fn from_config(c: RandomGridShuffleConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        if c.grid.iter().any(|&n| n < 1) {
            return Err(Error::config(
                "grid",
                format!("needs rows, columns >= 1, got {:?}", c.grid),
            ));
        }
        let keys = paired_keys(ctx)?;
        Ok(RandomGridShuffle {
            targets: Targets::new(
                &keys,
                &c.bboxes,
                c.bbox_params,
                &c.keypoints,
                c.keypoint_params,
            )?,
            keys,
            grid: c.grid,
            p: probability("p", c.p)?,
        })
    }
}

/// albumentations' `generate_shuffled_splits`: `parts` near-equal lengths (the longer ones
/// first) in random order, as cumulative edges from 0.
fn splits(rng: &mut impl Rng, n: i64, parts: i64) -> Vec<i64> {
    let (size, extra) = (n / parts, n % parts);
    let mut lengths: Vec<i64> = (0..parts).map(|i| size + i64::from(i < extra)).collect();
    lengths.shuffle(rng);
    std::iter::once(0)
        .chain(lengths.iter().scan(0, |edge, l| {
            *edge += l;
            Some(*edge)
        }))
        .collect()
}

impl RandomGridShuffle {
    /// The shuffle of the call seeded `seed` on an `height × width` image; `None` when the
    /// `p` draw says skip.
    pub(crate) fn shuffle(&self, height: i64, width: i64, seed: u64) -> Option<Shuffle> {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.p {
            return None;
        }
        let ys = splits(&mut rng, height, self.grid[0]);
        let xs = splits(&mut rng, width, self.grid[1]);
        let mut tiles = Vec::new();
        for y in ys.windows(2) {
            for x in xs.windows(2) {
                tiles.push([y[0], x[0], y[1], x[1]]);
            }
        }
        // Groups in order of first appearance, as albumentations' `create_shape_groups`.
        let mut groups: Vec<((i64, i64), Vec<usize>)> = Vec::new();
        for (i, t) in tiles.iter().enumerate() {
            let shape = (t[2] - t[0], t[3] - t[1]);
            match groups.iter_mut().find(|(s, _)| *s == shape) {
                Some((_, members)) => members.push(i),
                None => groups.push((shape, vec![i])),
            }
        }
        let mut mapping = vec![0; tiles.len()];
        for (_, members) in groups {
            let mut shuffled = members.clone();
            shuffled.shuffle(&mut rng);
            for (old, new) in members.into_iter().zip(shuffled) {
                mapping[old] = new;
            }
        }
        Some(Shuffle { tiles, mapping })
    }
}

impl NumpyOp for RandomGridShuffle {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let layouts = same_size(&pixels.keys, &pixels.inputs)?;
        let size = (layouts[0].height, layouts[0].width);
        let shuffle = self.shuffle(size.0, size.1, ctx.seed);
        let out = pixels
            .inputs
            .iter()
            .zip(&layouts)
            .map(|(x, layout)| {
                let Some(s) = &shuffle else {
                    return Ok(x.shallow_clone());
                };
                let out = x.f_empty_like()?;
                let (h, w) = (layout.h_axis, layout.w_axis());
                for (from, &to) in s.tiles.iter().zip(&s.mapping) {
                    let to = s.tiles[to];
                    let mut dst =
                        out.f_narrow(h, to[0], to[2] - to[0])?
                            .f_narrow(w, to[1], to[3] - to[1])?;
                    let src = x.f_narrow(h, from[0], from[2] - from[0])?.f_narrow(
                        w,
                        from[1],
                        from[3] - from[1],
                    )?;
                    dst.f_copy_(&src)?;
                }
                Ok(out)
            })
            .collect::<Result<Vec<_>>>()?;
        self.targets.each(
            (&self.keys, inputs, out),
            (size, size),
            |rows, p| {
                let moved = match &shuffle {
                    Some(s) => shuffle_boxes(rows, s, size, (p.min_area, p.min_visibility)),
                    None => rows,
                };
                boxes::filter(moved, p, size)
            },
            |rows, p| {
                let moved = match &shuffle {
                    Some(s) => shuffle_points(rows, s),
                    None => rows,
                };
                keypoints::filter(moved, p, size)
            },
        )
    }
}

/// albumentations' `swap_tiles_on_keypoints`: a keypoint moves with the cell it lies in
/// (`y_min <= y < y_max`, likewise x); one in no cell stays.
fn shuffle_points(rows: Vec<Row>, s: &Shuffle) -> Vec<Row> {
    rows.into_iter()
        .map(|mut r| {
            let cell = s.tiles.iter().position(|t| {
                (t[0] as f64..t[2] as f64).contains(&r[1])
                    && (t[1] as f64..t[3] as f64).contains(&r[0])
            });
            if let Some(i) = cell {
                let (from, to) = (s.tiles[i], s.tiles[s.mapping[i]]);
                r[0] += (to[1] - from[1]) as f64;
                r[1] += (to[0] - from[0]) as f64;
            }
            r
        })
        .collect()
}

/// albumentations' `bboxes_grid_shuffle`: each box as a mask of whole pixels (its corners
/// truncated), shuffled with the image, and replaced by one box per 8-connected piece of
/// the result, in OpenCV's label order, pieces below `min_area` pixels or `min_visibility`
/// of the box's pixels left out.
fn shuffle_boxes(
    rows: Vec<Row>,
    s: &Shuffle,
    (h, w): (i64, i64),
    (min_area, min_visibility): (f64, f64),
) -> Vec<Row> {
    let mut out = Vec::new();
    for r in rows {
        let corner = |v: f64, n: i64| (albumentations_pixel(v, n) as i64).clamp(0, n);
        let [x0, y0, x1, y1] = [
            corner(r[0], w),
            corner(r[1], h),
            corner(r[2], w),
            corner(r[3], h),
        ];
        let mut mask = vec![false; (h * w) as usize];
        let mut area = 0usize;
        for (from, &to) in s.tiles.iter().zip(&s.mapping) {
            let to = s.tiles[to];
            for y in from[0].max(y0)..from[2].min(y1) {
                for x in from[1].max(x0)..from[3].min(x1) {
                    let (ty, tx) = (y - from[0] + to[0], x - from[1] + to[1]);
                    mask[(ty * w + tx) as usize] = true;
                    area += 1;
                }
            }
        }
        for piece in components(&mask, h, w) {
            let visible = piece.len() as f64;
            if visible >= min_area && visible / area as f64 >= min_visibility {
                // `bboxes_from_masks`: the first and last row and column, ends exclusive.
                let (xs, ys) = (
                    piece.iter().map(|&i| i as i64 % w),
                    piece.iter().map(|&i| i as i64 / w),
                );
                let bounds = [xs.clone().min(), ys.clone().min(), xs.max(), ys.max()];
                let [Some(x0), Some(y0), Some(x1), Some(y1)] = bounds else {
                    continue;
                };
                let mut b = r.clone();
                b[..4].copy_from_slice(&[x0, y0, x1 + 1, y1 + 1].map(|v| v as f64));
                out.push(b);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cover_the_axis_with_near_equal_cells() {
        let mut rng = rng(3);
        let edges = splits(&mut rng, 20, 3);
        assert_eq!((edges[0], edges[3]), (0, 20));
        let mut lengths: Vec<i64> = edges.windows(2).map(|e| e[1] - e[0]).collect();
        lengths.sort();
        assert_eq!(lengths, [6, 7, 7]);
    }
}
