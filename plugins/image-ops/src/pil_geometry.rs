//! Pillow's geometric resampling on uint8 rasters, for FastEstimator's PIL-based `ShearX`,
//! `ShearY`, `TranslateX`, `TranslateY` and RUA's `Rotate`: `Image.transform(AFFINE)` with
//! bicubic or nearest sampling, and `Image.resize`'s antialiased bicubic along one axis. As in
//! `pil.rs`, each function restates the Pillow 13 C code it names.

use crate::pil::Raster;

/// FastEstimator's `ShearX._apply_shearx`: an affine shear onto a canvas widened by
/// `round(|s| w)`, then `resize` back to the original width.
pub(crate) fn shear_x(img: &Raster, s: f64) -> Raster {
    let shift = (s.abs() * img.w as f64).round_ties_even();
    let wide = img.w + shift as usize;
    let c = if s > 0.0 { -shift } else { 0.0 };
    let sheared = affine_bicubic(img, wide, img.h, [1.0, s, c, 0.0, 1.0, 0.0]);
    resize_axis(&sheared, Axis::X, img.w)
}

/// FastEstimator's `ShearY._apply_sheary`: [`shear_x`] along the height.
pub(crate) fn shear_y(img: &Raster, s: f64) -> Raster {
    let shift = (s.abs() * img.h as f64).round_ties_even();
    let tall = img.h + shift as usize;
    let f = if s > 0.0 { -shift } else { 0.0 };
    let sheared = affine_bicubic(img, img.w, tall, [1.0, 0.0, 0.0, s, 1.0, f]);
    resize_axis(&sheared, Axis::Y, img.h)
}

/// FastEstimator's `TranslateX._apply_translatex`: output `x` samples input `x + factor w`.
pub(crate) fn translate_x(img: &Raster, factor: f64) -> Raster {
    let d = factor * img.w as f64;
    affine_bicubic(img, img.w, img.h, [1.0, 0.0, d, 0.0, 1.0, 0.0])
}

/// FastEstimator's `TranslateY._apply_translatey`: output `y` samples input `y + factor h`.
pub(crate) fn translate_y(img: &Raster, factor: f64) -> Raster {
    let d = factor * img.h as f64;
    affine_bicubic(img, img.w, img.h, [1.0, 0.0, 0.0, 0.0, 1.0, d])
}

/// `Image.rotate(degrees)` with its defaults: counter-clockwise about the centre, nearest
/// neighbour, same size, black corners. Multiples of 180 degrees (and of 90 on square images)
/// are exact transposes, as in Pillow.
pub(crate) fn rotate(img: &Raster, degrees: f64) -> Raster {
    let angle = degrees.rem_euclid(360.0);
    let square = img.w == img.h;
    let (h, w) = (img.h, img.w);
    let turned = |src: &dyn Fn(usize, usize) -> (usize, usize)| {
        let mut out = img.clone();
        for y in 0..h {
            for x in 0..w {
                let (sy, sx) = src(y, x);
                for b in 0..img.c {
                    let i = out.at(y, x, b);
                    out.data[i] = img.data[img.at(sy, sx, b)];
                }
            }
        }
        out
    };
    if angle == 0.0 {
        return img.clone();
    }
    if angle == 180.0 {
        return turned(&|y, x| (h - 1 - y, w - 1 - x));
    }
    if angle == 90.0 && square {
        return turned(&|y, x| (x, w - 1 - y));
    }
    if angle == 270.0 && square {
        return turned(&|y, x| (h - 1 - x, y));
    }
    // Python's round(v, 15): the nearest float to the decimal rounded to 15 places.
    let round15 = |v: f64| format!("{v:.15}").parse::<f64>().unwrap_or(v);
    let rad = -angle.to_radians();
    let (cos, sin) = (round15(rad.cos()), round15(rad.sin()));
    let (cx, cy) = (w as f64 / 2.0, h as f64 / 2.0);
    let m = [
        cos,
        sin,
        cos * -cx + sin * -cy + cx,
        -sin,
        cos,
        -sin * -cx + cos * -cy + cy,
    ];
    affine_nearest(img, m)
}

/// `ImagingTransformAffine` with nearest sampling: 16.16 fixed point (`affine_fixed`) when
/// the corners fit, else the double-precision loop; outside pixels are black.
fn affine_nearest(img: &Raster, a: [f64; 6]) -> Raster {
    let (w, h) = (img.w, img.h);
    let mut out = Raster::zeros(h, w, img.c);
    let fits = |x: f64, y: f64| {
        (x * a[0] + y * a[1] + a[2]).abs() < 32768.0 && (x * a[3] + y * a[4] + a[5]).abs() < 32768.0
    };
    let (wf, hf) = (w as f64, h as f64);
    let fixed = fits(0.0, 0.0) && fits(wf, hf) && fits(0.0, hf) && fits(wf, 0.0);
    let mut copy = |y: usize, x: usize, sy: i64, sx: i64| {
        if (0..w as i64).contains(&sx) && (0..h as i64).contains(&sy) {
            for b in 0..img.c {
                out.data[(y * w + x) * img.c + b] = img.data[img.at(sy as usize, sx as usize, b)];
            }
        }
    };
    if fixed {
        let fix = |v: f64| floor(v * 65536.0 + 0.5);
        let (a0, a1, a3, a4) = (fix(a[0]), fix(a[1]), fix(a[3]), fix(a[4]));
        let mut a2 = fix(a[2] + a[0] * 0.5 + a[1] * 0.5);
        let mut a5 = fix(a[5] + a[3] * 0.5 + a[4] * 0.5);
        for y in 0..h {
            let (mut xx, mut yy) = (a2, a5);
            for x in 0..w {
                copy(y, x, i64::from(yy >> 16), i64::from(xx >> 16));
                xx = xx.wrapping_add(a0);
                yy = yy.wrapping_add(a3);
            }
            a2 = a2.wrapping_add(a1);
            a5 = a5.wrapping_add(a4);
        }
    } else {
        let coord = |v: f64| if v < 0.0 { -1 } else { v as i64 };
        let mut xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
        let mut yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
        for y in 0..h {
            let (mut xx, mut yy) = (xo, yo);
            for x in 0..w {
                copy(y, x, coord(yy), coord(xx));
                xx += a[0];
                yy += a[3];
            }
            xo += a[1];
            yo += a[4];
        }
    }
    out
}

/// Pillow's `FLOOR`: `floor` below zero, truncation above.
fn floor(v: f64) -> i32 {
    if v < 0.0 {
        v.floor() as i32
    } else {
        v as i32
    }
}

/// `ImagingGenericTransform` with `affine_transform` and `bicubic_filter8` / `32RGB`: output
/// pixel `(x, y)` samples the input at `a · (x + 0.5, y + 0.5, 1)`; points outside the input
/// are black.
fn affine_bicubic(img: &Raster, out_w: usize, out_h: usize, a: [f64; 6]) -> Raster {
    let mut out = Raster::zeros(out_h, out_w, img.c);
    for y in 0..out_h {
        for x in 0..out_w {
            let (xi, yi) = (x as f64 + 0.5, y as f64 + 0.5);
            let xin = a[0] * xi + a[1] * yi + a[2];
            let yin = a[3] * xi + a[4] * yi + a[5];
            if xin < 0.0 || xin >= img.w as f64 || yin < 0.0 || yin >= img.h as f64 {
                continue;
            }
            for b in 0..img.c {
                out.data[(y * out_w + x) * img.c + b] = bicubic(img, xin, yin, b);
            }
        }
    }
    out
}

/// Pillow's `BICUBIC` step (a = -1 cubic convolution) through four values at offset `d`.
fn cubic(v1: f64, v2: f64, v3: f64, v4: f64, d: f64) -> f64 {
    let p1 = v2;
    let p2 = -v1 + v3;
    let p3 = 2.0 * (v1 - v2) + v3 - v4;
    let p4 = -v1 + v2 - v3 + v4;
    p1 + d * (p2 + d * (p3 + d * p4))
}

/// `BICUBIC_HEAD` + `BICUBIC_BODY` for band `b`: columns clamp to the edge; rows below the
/// image repeat the previous row's value, the first row clamps.
fn bicubic(img: &Raster, xin: f64, yin: f64, b: usize) -> u8 {
    let (xin, yin) = (xin - 0.5, yin - 0.5);
    let (x, y) = (floor(xin) as i64, floor(yin) as i64);
    let (dx, dy) = (xin - x as f64, yin - y as f64);
    let (x, y) = (x - 1, y - 1);
    let (w, h) = (img.w as i64, img.h as i64);
    let clip = |v: i64, n: i64| v.clamp(0, n - 1) as usize;
    let cols = [0, 1, 2, 3].map(|i| clip(x + i, w));
    let row = |r: usize| {
        let v = cols.map(|c| f64::from(img.data[img.at(r, c, b)]));
        cubic(v[0], v[1], v[2], v[3], dx)
    };
    let v1 = row(clip(y, h));
    let inside = |r: i64| (0..h).contains(&r);
    let v2 = if inside(y + 1) {
        row((y + 1) as usize)
    } else {
        v1
    };
    let v3 = if inside(y + 2) {
        row((y + 2) as usize)
    } else {
        v2
    };
    let v4 = if inside(y + 3) {
        row((y + 3) as usize)
    } else {
        v3
    };
    let v = cubic(v1, v2, v3, v4, dy);
    // Truncation, as the C cast does; `as u8` also saturates below 0 and above 255.
    v as u8
}

/// The axis a one-dimensional resize runs along.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Axis {
    X,
    Y,
}

/// Bits of Pillow's fixed-point resampling coefficients (`PRECISION_BITS`).
const PRECISION_BITS: u32 = 32 - 8 - 2;

/// Pillow's `bicubic_filter` (a = -0.5), support 2.
fn bicubic_weight(x: f64) -> f64 {
    let a = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * a
    } else {
        0.0
    }
}

/// `precompute_coeffs` + `normalize_coeffs_8bpc` for `in_size → out_size` over the whole
/// input: per output pixel, the first input index and its fixed-point weights.
fn coefficients(in_size: usize, out_size: usize) -> Vec<(usize, Vec<i32>)> {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = 2.0 * filterscale;
    let inv = 1.0 / filterscale;
    (0..out_size)
        .map(|xx| {
            let center = (xx as f64 + 0.5) * scale;
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let mut k: Vec<f64> = (xmin..xmax)
                .map(|x| bicubic_weight((x as f64 - center + 0.5) * inv))
                .collect();
            let ww: f64 = k.iter().sum();
            if ww != 0.0 {
                k.iter_mut().for_each(|v| *v /= ww);
            }
            let one = f64::from(1u32 << PRECISION_BITS);
            let fixed = k
                .iter()
                .map(|&v| {
                    if v < 0.0 {
                        (-0.5 + v * one) as i32
                    } else {
                        (0.5 + v * one) as i32
                    }
                })
                .collect();
            (xmin, fixed)
        })
        .collect()
}

/// `Image.resize` with its default (bicubic) filter when only one side changes: Pillow's
/// antialiased convolution in fixed point (`ImagingResampleHorizontal_8bpc` / `Vertical`).
fn resize_axis(img: &Raster, axis: Axis, size: usize) -> Raster {
    let len = if axis == Axis::X { img.w } else { img.h };
    if len == size {
        return img.clone();
    }
    let coeffs = coefficients(len, size);
    let (h, w) = if axis == Axis::X {
        (img.h, size)
    } else {
        (size, img.w)
    };
    let mut out = Raster::zeros(h, w, img.c);
    for y in 0..h {
        for x in 0..w {
            let (first, k) = &coeffs[if axis == Axis::X { x } else { y }];
            for b in 0..img.c {
                let mut ss: i32 = 1 << (PRECISION_BITS - 1);
                for (i, &kv) in k.iter().enumerate() {
                    let (sy, sx) = if axis == Axis::X {
                        (y, first + i)
                    } else {
                        (first + i, x)
                    };
                    ss = ss.wrapping_add(i32::from(img.data[img.at(sy, sx, b)]) * kv);
                }
                let i = out.at(y, x, b);
                out.data[i] = (ss >> PRECISION_BITS).clamp(0, 255) as u8;
            }
        }
    }
    out
}
