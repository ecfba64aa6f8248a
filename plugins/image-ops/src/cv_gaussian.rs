//! `cv2.GaussianBlur` as albumentations calls it (`Sharpen`'s "gaussian" method, `GlassBlur`),
//! reproduced rather than approximated: uint8 images take OpenCV's bit-exact fixed-point path,
//! where a rounding difference of one grey level would flip albumentations' later comparisons,
//! and floats its float32 (float64) separable filter. Border reflect-101 in both.

use std::ops::Add;

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{Error, Result};

use crate::color::values;
use crate::layout::Spatial;
use crate::sharpen::reflect;

/// `(height, width, channels)` of a row-major image buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dims {
    pub h: usize,
    pub w: usize,
    pub c: usize,
}

/// The kernel size `cv2.GaussianBlur` derives from `sigma` when `ksize = (0, 0)`: wider for
/// floats than for uint8, as OpenCV sizes them.
pub(crate) fn auto_size(sigma: f64, uint8: bool) -> usize {
    let reach = if uint8 { 3.0 } else { 4.0 };
    ((sigma * reach * 2.0 + 1.0).round_ties_even() as i64 | 1) as usize
}

/// OpenCV's `getGaussianKernelBitExact` for odd `n`: normalised so the centre is exactly
/// `1 / sum`, the order OpenCV sums in. `sigma <= 0` takes OpenCV's fixed binomial kernels
/// for sizes 1, 3 and 5 (`Defocus` asks for them with `alias_blur = 0`) and a sigma derived
/// from the size otherwise.
pub(crate) fn kernel(n: usize, sigma: f64) -> Vec<f64> {
    if sigma <= 0.0 {
        return match n {
            1 => vec![1.0],
            3 => vec![0.25, 0.5, 0.25],
            5 => vec![0.0625, 0.25, 0.375, 0.25, 0.0625],
            _ => kernel(n, 0.3 * ((n as f64 - 1.0) * 0.5 - 1.0) + 0.8),
        };
    }
    let scale = -0.125 / (sigma * sigma);
    let half = (n - 1) / 2;
    let mut tails = Vec::with_capacity(half);
    let mut x = 1 - n as i64;
    for _ in 0..half {
        tails.push(((x * x) as f64 * scale).exp());
        x += 2;
    }
    let sum = tails.iter().fold(0.0, |s, t| s + t) * 2.0 + 1.0;
    let mul = 1.0 / sum;
    let mut k = vec![mul; n];
    for (i, t) in tails.iter().enumerate() {
        k[i] = t * mul;
        k[n - 1 - i] = t * mul;
    }
    k
}

/// OpenCV's `getGaussianKernelFixedPoint_ED` with 8 fraction bits: rounding errors carried
/// from the tails inwards and the centre taking the rest, so the taps sum to exactly 256.
fn fixed_point(kernel: &[f64]) -> Vec<u32> {
    let n = kernel.len();
    let mut out = vec![0u32; n];
    let (mut err, mut sum) = (0.0, 0u32);
    for i in 0..n / 2 {
        let adjusted = kernel[i] * 256.0 + err;
        let v = adjusted.round_ties_even();
        err = adjusted - v;
        out[i] = v as u32;
        out[n - 1 - i] = v as u32;
        sum += v as u32;
    }
    out[n / 2] = 256 - 2 * sum;
    out
}

/// One 1-D correlation along columns (`vertical`) or rows, reflect-101, `tap(weight, value)`
/// summed from the first tap to the last.
fn pass<T: Copy, K: Copy, S: Copy + Default + Add<Output = S>>(
    data: &[T],
    d: Dims,
    vertical: bool,
    kernel: &[K],
    tap: impl Fn(K, T) -> S,
) -> Vec<S> {
    let r = (kernel.len() / 2) as i64;
    let mut out = vec![S::default(); data.len()];
    for y in 0..d.h {
        for x in 0..d.w {
            for ch in 0..d.c {
                let mut sum = S::default();
                for (j, &k) in kernel.iter().enumerate() {
                    let off = j as i64 - r;
                    let (sy, sx) = if vertical {
                        (reflect(y as i64 + off, d.h as i64), x)
                    } else {
                        (y, reflect(x as i64 + off, d.w as i64))
                    };
                    sum = sum + tap(k, data[(sy * d.w + sx) * d.c + ch]);
                }
                out[(y * d.w + x) * d.c + ch] = sum;
            }
        }
    }
    out
}

/// An image's pixels on the CPU, row-major: uint8 as bytes, float64 as is, other floats as
/// float32 (the kinds `cv2.GaussianBlur` filters natively).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Plane {
    U8(Vec<u8>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Plane {
    /// `x`'s pixels and dimensions; `what` names the op for the error on a batch.
    pub(crate) fn of(x: &Tensor, layout: &Spatial, what: &str) -> Result<(Plane, Dims)> {
        if layout.batched {
            return Err(Error::msg(format!(
                "{what} takes one image at a time, (H, W) or (H, W, C)"
            )));
        }
        let size = x.size();
        let c = if layout.plain { 1 } else { size[2] as usize };
        let dims = Dims {
            h: layout.height as usize,
            w: layout.width as usize,
            c,
        };
        let flat = |kind| -> Result<Tensor> {
            Ok(values(x)?
                .f_to_kind(kind)?
                .f_to_device(Device::Cpu)?
                .f_contiguous()?
                .f_view([-1])?)
        };
        let plane = match x.kind() {
            Kind::Uint8 => {
                let t = x.f_to_device(Device::Cpu)?.f_contiguous()?.f_view([-1])?;
                let n = t.numel();
                let mut v = vec![0u8; n];
                t.f_copy_data(&mut v, n)?;
                Plane::U8(v)
            }
            Kind::Double => {
                let t = flat(Kind::Double)?;
                let n = t.numel();
                let mut v = vec![0f64; n];
                t.f_copy_data(&mut v, n)?;
                Plane::F64(v)
            }
            _ => {
                let t = flat(Kind::Float)?;
                let n = t.numel();
                let mut v = vec![0f32; n];
                t.f_copy_data(&mut v, n)?;
                Plane::F32(v)
            }
        };
        Ok((plane, dims))
    }

    /// The pixels as a tensor of `like`'s shape, kind and device.
    pub(crate) fn to_tensor(&self, like: &Tensor) -> Result<Tensor> {
        let t = match self {
            Plane::U8(v) => Tensor::f_from_slice(v)?,
            Plane::F32(v) => Tensor::f_from_slice(v)?,
            Plane::F64(v) => Tensor::f_from_slice(v)?,
        };
        Ok(t.f_view(like.size().as_slice())?
            .f_to_kind(like.kind())?
            .f_to_device(like.device())?)
    }

    /// `cv2.GaussianBlur(x, (n, n), sigma)`; `n = 0` sizes the kernel from sigma.
    pub(crate) fn blurred(&self, d: Dims, n: usize, sigma: f64) -> Plane {
        let n = if n == 0 {
            auto_size(sigma, matches!(self, Plane::U8(_)))
        } else {
            n
        };
        let k = kernel(n, sigma);
        match self {
            Plane::U8(v) => {
                let fixed = fixed_point(&k);
                // Rows in 1/256 units exactly, columns in 1/65536, rounded half up once.
                let rows = pass(v, d, false, &fixed, |k, p: u8| k * u32::from(p));
                let cols = pass(&rows, d, true, &fixed, |k, p: u32| u64::from(k * p));
                Plane::U8(
                    cols.iter()
                        .map(|&s| ((s + (1 << 15)) >> 16).min(255) as u8)
                        .collect(),
                )
            }
            Plane::F32(v) => {
                let k: Vec<f32> = k.iter().map(|&w| w as f32).collect();
                let rows = pass(v, d, false, &k, |k, p: f32| k * p);
                Plane::F32(pass(&rows, d, true, &k, |k, p: f32| k * p))
            }
            Plane::F64(v) => {
                let rows = pass(v, d, false, &k, |k, p: f64| k * p);
                Plane::F64(pass(&rows, d, true, &k, |k, p: f64| k * p))
            }
        }
    }
}
