//! The homographies of albumentations 2.0.8's `Perspective`: the moved corners ordered and
//! mapped onto the image (`order_points`, `compute_perspective_params`), the canvas grown
//! to hold the whole warped image (`expand_transform`, `fit_output`), and the inverse map
//! `cv2.warpPerspective` samples through.

use crate::geometry::project;

/// albumentations' `order_points` (float32 tl, tr, br, bl by position) and
/// `compute_perspective_params`: the matrix, `max_width`, `max_height`.
pub(crate) fn perspective_params(
    points: [[f64; 2]; 4],
    height: i64,
    width: i64,
) -> ([f64; 9], i64, i64) {
    let mut sorted = points;
    sorted.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let pair = |a: [f64; 2], b: [f64; 2]| if a[1] < b[1] { (a, b) } else { (b, a) };
    let (tl, bl) = pair(sorted[0], sorted[1]);
    let (tr, br) = pair(sorted[2], sorted[3]);
    let mut q = [tl, tr, br, bl].map(|p| p.map(|v| v as f32));
    let max_width = adjust(&mut q, 1, 0).max(adjust(&mut q, 2, 3));
    let max_height = adjust(&mut q, 2, 1).max(adjust(&mut q, 3, 0));
    let (w, h) = (width as f32, height as f32);
    let dst = [[0.0, 0.0], [w, 0.0], [w, h], [0.0, h]];
    (
        get_perspective_transform(&q, &dst),
        max_width as i64,
        max_height as i64,
    )
}

/// albumentations' `adjust_dimension` on corners `a` and `b` of `q` (float32): their
/// distance, or 2 after pushing them apart when they are closer than that.
fn adjust(q: &mut [[f32; 2]; 4], a: usize, b: usize) -> f32 {
    let size = ((q[a][0] - q[b][0]).powi(2) + (q[a][1] - q[b][1]).powi(2)).sqrt();
    if size >= 2.0 {
        return size;
    }
    let step = (2.0 - size) / 2.0;
    // numpy's four masked in-place updates, each mask taken after the previous update.
    let [pa, pb] = if a < b {
        let (lo, hi) = q.split_at_mut(b);
        [&mut lo[a], &mut hi[0]]
    } else {
        let (lo, hi) = q.split_at_mut(a);
        [&mut hi[0], &mut lo[b]]
    };
    for (u, v) in pa.iter_mut().zip(pb.iter_mut()) {
        if *u > *v {
            *u += step;
        }
        if *u > *v {
            *v -= step;
        }
        if *u <= *v {
            *u -= step;
        }
        if *u <= *v {
            *v += step;
        }
    }
    2.0
}

/// `cv2.getPerspectiveTransform`: the homography taking `src` to `dst`, from its 8 × 8
/// system solved in float64 as OpenCV's `LUImpl` does, step for step, so a `fit_output`
/// expansion (whose far corners amplify every rounding) lands where albumentations' does:
/// the float32 points multiplied in float32 (`-src.x * dst.x`), the first largest pivot,
/// elimination by `-1 / pivot`, back substitution by its reciprocal. A pivot under
/// `100 DBL_EPSILON` makes `cv::solve` fail with a zero solution, kept.
fn get_perspective_transform(src: &[[f32; 2]; 4], dst: &[[f32; 2]; 4]) -> [f64; 9] {
    let mut a = [[0.0f64; 9]; 8];
    for i in 0..4 {
        let ([x, y], [u, v]) = (src[i], dst[i]);
        let d = f64::from;
        a[i] = [d(x), d(y), 1.0, 0.0, 0.0, 0.0, d(-x * u), d(-y * u), d(u)];
        a[i + 4] = [0.0, 0.0, 0.0, d(x), d(y), 1.0, d(-x * v), d(-y * v), d(v)];
    }
    let mut m = [0.0; 9];
    m[8] = 1.0;
    for i in 0..8 {
        let mut k = i;
        for j in i + 1..8 {
            if a[j][i].abs() > a[k][i].abs() {
                k = j;
            }
        }
        if a[k][i].abs() < 100.0 * f64::EPSILON {
            return m;
        }
        a.swap(i, k);
        let d = -1.0 / a[i][i];
        let pivot = a[i];
        for row in &mut a[i + 1..] {
            let alpha = row[i] * d;
            for (cell, p) in row.iter_mut().zip(pivot).skip(i + 1) {
                *cell += alpha * p;
            }
        }
        a[i][i] = -d;
    }
    for i in (0..8).rev() {
        let mut s = a[i][8];
        for k in i + 1..8 {
            s -= a[i][k] * m[k];
        }
        m[i] = s * a[i][i];
    }
    m
}

/// albumentations' `expand_transform` (`fit_output`): the image corners moved by `m`
/// (`cv2.perspectiveTransform`, float32), shifted to start at 0 and rounded half to even
/// (`np.around`), and the homography from the corners to them; the canvas is their extent.
pub(crate) fn expand_transform(m: &[f64; 9], height: i64, width: i64) -> ([f64; 9], i64, i64) {
    let (w, h) = (width as f32, height as f32);
    let rect = [[0.0, 0.0], [w, 0.0], [w, h], [0.0, h]];
    let moved = rect.map(|[x, y]| {
        let (u, v) = project(m, f64::from(x), f64::from(y));
        [u as f32, v as f32]
    });
    let least = |i: usize| moved.iter().map(|p| p[i]).fold(f32::INFINITY, f32::min);
    let (x0, y0) = (least(0), least(1));
    let dst = moved.map(|[x, y]| [(x - x0).round_ties_even(), (y - y0).round_ties_even()]);
    let most = |i: usize| dst.iter().map(|p| p[i]).fold(f32::NEG_INFINITY, f32::max);
    (
        get_perspective_transform(&rect, &dst),
        most(0) as i64,
        most(1) as i64,
    )
}

/// `m` (row-major 3 × 3) with its rows scaled by `(sx, sy)` (albumentations' `keep_size`
/// resize onto the input size; 1 otherwise) and inverted: the map from output pixels back to
/// input pixels.
pub(crate) fn inverse_warp(m: &[f64; 9], (sx, sy): (f64, f64)) -> [f64; 9] {
    let a = [
        m[0] * sx,
        m[1] * sx,
        m[2] * sx,
        m[3] * sy,
        m[4] * sy,
        m[5] * sy,
        m[6],
        m[7],
        m[8],
    ];
    let cof = |r0: usize, r1: usize, c0: usize, c1: usize| {
        a[r0 * 3 + c0] * a[r1 * 3 + c1] - a[r0 * 3 + c1] * a[r1 * 3 + c0]
    };
    let adj = [
        cof(1, 2, 1, 2),
        -cof(0, 2, 1, 2),
        cof(0, 1, 1, 2),
        -cof(1, 2, 0, 2),
        cof(0, 2, 0, 2),
        -cof(0, 1, 0, 2),
        cof(1, 2, 0, 1),
        -cof(0, 2, 0, 1),
        cof(0, 1, 0, 1),
    ];
    let det = a[0] * adj[0] + a[1] * adj[3] + a[2] * adj[6];
    let d = if det != 0.0 { 1.0 / det } else { 0.0 };
    adj.map(|v| v * d)
}
