//! The thin-plate-spline solve and maps of albumentations 2.0.8's `ThinPlateSpline`
//! (`generate_control_points`, `compute_tps_weights`, `tps_transform`), in the float32
//! arithmetic it runs: control points in the unit square, `dst = src + offsets`, the
//! `(N + 3)²` system solved by `cv2.solve(DECOMP_LU)`, and every pixel, divided by the size,
//! sent through the spline and scaled back. As there, the solve's kernel is `d² log d` of the
//! *squared* distance `d` while the transform's is `d log d`; both are kept.

/// albumentations' `generate_control_points`: the four corners and the centre for `n = 2`,
/// else an `n × n` grid of `np.linspace(0, 1, n)`, x fastest (`np.meshgrid` order).
pub(crate) fn control_points(n: usize) -> Vec<[f64; 2]> {
    if n == 2 {
        return vec![[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.5, 0.5]];
    }
    let step = 1.0 / (n - 1) as f64;
    let at = move |i: usize| if i == n - 1 { 1.0 } else { i as f64 * step };
    (0..n)
        .flat_map(|row| (0..n).map(move |col| [at(col), at(row)]))
        .collect()
}

fn f32s(p: [f64; 2]) -> [f32; 2] {
    p.map(|v| v as f32)
}

/// `cv2.log` of a float32; OpenCV's own is within 2 ulp of this correctly rounded one.
fn ln32(x: f32) -> f32 {
    f64::from(x).ln() as f32
}

/// albumentations' `compute_pairwise_distances` for one pair: `|p|² + |q|² - 2 p·q`, a
/// squared distance, in float32. The dot product is `cv2.gemm`'s: OpenCV sums float32
/// products in float64 below 100 rows and hands larger products to OpenBLAS's `sgemm`,
/// whose two-term sum is one fused multiply-add.
fn distance(p: [f32; 2], q: [f32; 2], fused: bool) -> f32 {
    let norm = |v: [f32; 2]| v[0] * v[0] + v[1] * v[1];
    let dot = if fused {
        p[1].mul_add(q[1], p[0] * q[0])
    } else {
        (f64::from(p[0]) * f64::from(q[0]) + f64::from(p[1]) * f64::from(q[1])) as f32
    };
    (norm(p) + norm(q)) - 2.0 * dot
}

/// The `(N + 3)²` system of `compute_tps_weights` for control points `src`, row-major:
/// the kernel `d² log(d + 1e-6)`, then the affine terms `[1, x, y]` and their transpose.
fn system(src: &[[f32; 2]]) -> Vec<f32> {
    let n = src.len();
    let m = n + 3;
    let mut a = vec![0f32; m * m];
    for (i, &p) in src.iter().enumerate() {
        for (j, &q) in src.iter().enumerate() {
            let d = distance(p, q, false);
            a[i * m + j] = if d > 0.0 { d * d * ln32(d + 1e-6) } else { 0.0 };
        }
        for (k, v) in [1.0, p[0], p[1]].into_iter().enumerate() {
            a[i * m + n + k] = v;
            a[(n + k) * m + i] = v;
        }
    }
    a
}

/// OpenCV's `LUImpl<float>` (`cv2.solve` with `DECOMP_LU` below 100 unknowns): Gaussian
/// elimination with partial pivoting on `a` (`m × m`) and `b` (`m × 2`), in place; `false`
/// when a pivot is below `10 · FLT_EPSILON` (singular for OpenCV).
fn lu_solve(a: &mut [f32], b: &mut [[f32; 2]]) -> bool {
    let m = b.len();
    for i in 0..m {
        let mut k = i;
        for j in i + 1..m {
            if a[j * m + i].abs() > a[k * m + i].abs() {
                k = j;
            }
        }
        if a[k * m + i].abs() < f32::EPSILON * 10.0 {
            return false;
        }
        if k != i {
            for j in i..m {
                a.swap(i * m + j, k * m + j);
            }
            b.swap(i, k);
        }
        let d = -1.0 / a[i * m + i];
        for j in i + 1..m {
            let alpha = a[j * m + i] * d;
            for k in i + 1..m {
                a[j * m + k] += alpha * a[i * m + k];
            }
            let pivot = b[i];
            for (v, p) in b[j].iter_mut().zip(pivot) {
                *v += alpha * p;
            }
        }
        a[i * m + i] = -d;
    }
    for i in (0..m).rev() {
        let (done, rest) = b.split_at_mut(i + 1);
        let upper = &a[i * m + i + 1..(i + 1) * m];
        for (c, v) in done[i].iter_mut().enumerate() {
            for (u, r) in upper.iter().zip(rest.iter()) {
                *v -= u * r[c];
            }
            *v *= a[i * m + i];
        }
    }
    true
}

/// Whether the system of `n_control` control points per side can be solved: it depends on
/// the control points only, so a count OpenCV finds singular fails for every draw.
pub(crate) fn solvable(n_control: usize) -> bool {
    let src: Vec<[f32; 2]> = control_points(n_control).into_iter().map(f32s).collect();
    let mut b = vec![[0f32; 2]; src.len() + 3];
    lu_solve(&mut system(&src), &mut b)
}

/// The spline's weights for control points `src` moved to `dst`: `N` kernel rows, then the
/// affine rows (constant, x, y); all zero when OpenCV would find the system singular, as
/// `cv2.solve` leaves its output then.
fn weights(src: &[[f32; 2]], dst: &[[f64; 2]]) -> Vec<[f32; 2]> {
    let mut b: Vec<[f32; 2]> = dst.iter().map(|&p| f32s(p)).collect();
    b.extend([[0.0; 2]; 3]);
    if !lu_solve(&mut system(src), &mut b) {
        b.iter_mut().for_each(|r| *r = [0.0; 2]);
    }
    b
}

/// The float32 `(map_x, map_y)`, row-major `height × width`, of the spline taking control
/// points `src` (unit square) to `dst`: `get_params_dependent_on_data` after its draws.
pub(crate) fn tps_maps(
    src: &[[f64; 2]],
    dst: &[[f64; 2]],
    height: usize,
    width: usize,
) -> [Vec<f32>; 2] {
    let src: Vec<[f32; 2]> = src.iter().map(|&p| f32s(p)).collect();
    let w = weights(&src, dst);
    let (kernel, affine) = w.split_at(src.len());
    let fused = height * width >= 100;
    let (mut map_x, mut map_y) = (Vec::new(), Vec::new());
    let mut row = vec![0f32; src.len()];
    for y in 0..height {
        for x in 0..width {
            // `points / [width, height]` divides in float64 before the float32 cast.
            let p = f32s([x as f64 / width as f64, y as f64 / height as f64]);
            for (k, &q) in row.iter_mut().zip(&src) {
                let d = distance(p, q, fused);
                *k = if d > 0.0 { d * ln32(d + 1e-6) } else { 0.0 };
            }
            // The two products are float32 GEMMs; summed in float64 here, as OpenCV's own
            // GEMM does (OpenBLAS's order differs by an ulp or so).
            let out = [0, 1].map(|c| {
                let bend: f64 = row
                    .iter()
                    .zip(kernel)
                    .map(|(&k, w)| f64::from(k) * f64::from(w[c]))
                    .sum();
                let plane = f64::from(affine[0][c])
                    + f64::from(p[0]) * f64::from(affine[1][c])
                    + f64::from(p[1]) * f64::from(affine[2][c]);
                (bend as f32) + (plane as f32)
            });
            // `transformed *= [width, height]`: a float64 product stored back as float32.
            map_x.push((f64::from(out[0]) * width as f64) as f32);
            map_y.push((f64::from(out[1]) * height as f64) as f32);
        }
    }
    [map_x, map_y]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_points_are_numpys_grid() {
        let p = control_points(3);
        assert_eq!(p.len(), 9);
        assert_eq!(p[1], [0.5, 0.0]);
        assert_eq!(p[3], [0.0, 0.5]);
        assert_eq!(p[8], [1.0, 1.0]);
        assert_eq!(control_points(2)[4], [0.5, 0.5]);
    }

    #[test]
    fn unmoved_control_points_give_the_identity() {
        for n in 2..=5 {
            assert!(solvable(n), "{n}");
            let src = control_points(n);
            let [mx, my] = tps_maps(&src, &src, 12, 17);
            for (i, (x, y)) in mx.iter().zip(&my).enumerate() {
                let (ex, ey) = ((i % 17) as f32, (i / 17) as f32);
                assert!((x - ex).abs() < 2e-3 && (y - ey).abs() < 2e-3, "{n}: {i}");
            }
        }
    }

    #[test]
    fn a_shift_of_every_control_point_shifts_the_map() {
        let src = control_points(4);
        let dst: Vec<[f64; 2]> = src.iter().map(|p| [p[0] + 0.1, p[1] - 0.05]).collect();
        let [mx, my] = tps_maps(&src, &dst, 10, 20);
        for (i, (x, y)) in mx.iter().zip(&my).enumerate() {
            let (ex, ey) = ((i % 20) as f32 + 2.0, (i / 20) as f32 - 0.5);
            assert!(
                (x - ex).abs() < 2e-3 && (y - ey).abs() < 2e-3,
                "{i}: {x}, {y}"
            );
        }
    }
}
