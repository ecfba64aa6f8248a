//! Pillow's pixel arithmetic on uint8 rasters, for the ops FastEstimator implements with PIL
//! (`Brightness`, `Color`, `Contrast`, `Sharpness`, and RUA's PIL variants). Each function
//! restates the Pillow 13 C code it names, down to its float widths and truncations, so the
//! results match PIL bit for bit rather than within a grey level.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{Error, Result};

use crate::bytes::{bytes_of, tensor_of};

/// A uint8 image as PIL holds it: rows of interleaved `c` bands (1 for "L", 3 for "RGB").
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Raster {
    pub h: usize,
    pub w: usize,
    pub c: usize,
    pub data: Vec<u8>,
}

impl Raster {
    /// Input `key` as a raster: uint8 `(H, W)`, `(H, W, 1)` or `(H, W, 3)`, the arrays
    /// `Image.fromarray` turns into "L" or "RGB" (plus `(H, W, 1)`, taken as "L").
    pub(crate) fn of(key: &str, x: &Tensor) -> Result<Raster> {
        if x.kind() != Kind::Uint8 {
            return Err(Error::unsupported(format!(
                "input `{key}`: this PIL-based op takes uint8 images (as FastEstimator's does), got {:?}",
                x.kind()
            )));
        }
        let size = x.size();
        let (h, w, c) = match size[..] {
            [h, w] => (h, w, 1),
            [h, w, c] if c == 1 || c == 3 => (h, w, c),
            _ => {
                return Err(Error::msg(format!(
                    "input `{key}`: expected an image of shape (H, W), (H, W, 1) or (H, W, 3), got {size:?}"
                )))
            }
        };
        let cpu = x.f_to_device(Device::Cpu)?;
        let (data, _) = bytes_of(&cpu)?
            .ok_or_else(|| Error::msg(format!("input `{key}`: cannot read its bytes")))?;
        Ok(Raster {
            h: h as usize,
            w: w as usize,
            c: c as usize,
            data,
        })
    }

    /// A black raster of the given size.
    pub(crate) fn zeros(h: usize, w: usize, c: usize) -> Raster {
        Raster {
            h,
            w,
            c,
            data: vec![0; h * w * c],
        }
    }

    /// The raster as a tensor shaped like `like` (same rank) on `like`'s device.
    pub(crate) fn tensor_like(&self, like: &Tensor) -> Result<Tensor> {
        let shape: Vec<i64> = if like.dim() == 2 {
            vec![self.h as i64, self.w as i64]
        } else {
            vec![self.h as i64, self.w as i64, self.c as i64]
        };
        Ok(tensor_of(&self.data, &shape)?.f_to_device(like.device())?)
    }

    /// Index of band `b` of pixel `(y, x)`.
    pub(crate) fn at(&self, y: usize, x: usize, b: usize) -> usize {
        (y * self.w + x) * self.c + b
    }
}

/// `convert("L")`: ITU-R 601-2 luma in Pillow's 16.16 fixed point, rounded (`L24`).
pub(crate) fn luma(img: &Raster) -> Vec<u8> {
    if img.c == 1 {
        return img.data.clone();
    }
    img.data
        .chunks_exact(3)
        .map(|p| {
            let l = u32::from(p[0]) * 19595 + u32::from(p[1]) * 38470 + u32::from(p[2]) * 7471;
            ((l + 0x8000) >> 16) as u8
        })
        .collect()
}

/// `Image.blend(degenerate, img, factor)` (`ImagingBlend`): `in1 + alpha (in2 - in1)` in
/// float32, truncated, clipped when extrapolating. `degenerate` yields one value per byte.
fn blend(img: &Raster, degenerate: impl Fn(usize) -> u8, factor: f64) -> Raster {
    let alpha = factor as f32;
    let data = img
        .data
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let d = degenerate(i);
            // `as u8` truncates and saturates, both branches of ImagingBlend at once.
            (f32::from(d) + alpha * (i32::from(v) - i32::from(d)) as f32) as u8
        })
        .collect();
    Raster { data, ..*img }
}

/// `ImageEnhance.Brightness(img).enhance(factor)`: a blend with black.
pub(crate) fn brightness(img: &Raster, factor: f64) -> Raster {
    blend(img, |_| 0, factor)
}

/// `ImageEnhance.Color(img).enhance(factor)`: a blend with the image's grey version (the
/// identity on "L" images).
pub(crate) fn color(img: &Raster, factor: f64) -> Raster {
    let grey = luma(img);
    let c = img.c;
    blend(img, |i| grey[i / c], factor)
}

/// `ImageEnhance.Contrast(img).enhance(factor)`: a blend with the mean grey level, `int(mean
/// + 0.5)` of the luma histogram (`ImageStat`).
pub(crate) fn contrast(img: &Raster, factor: f64) -> Raster {
    let grey = luma(img);
    let mut hist = [0u64; 256];
    for &g in &grey {
        hist[usize::from(g)] += 1;
    }
    let sum: f64 = (0..256).map(|i| i as f64 * hist[i] as f64).sum();
    let mean = if grey.is_empty() {
        0
    } else {
        (sum / grey.len() as f64 + 0.5) as u8
    };
    blend(img, |_| mean, factor)
}

/// `ImageEnhance.Sharpness(img).enhance(factor)`: a blend with `ImageFilter.SMOOTH`.
pub(crate) fn sharpness(img: &Raster, factor: f64) -> Raster {
    let smooth = smooth(img);
    blend(img, |i| smooth.data[i], factor)
}

/// `img.filter(ImageFilter.SMOOTH)` (`ImagingFilter3x3`): the kernel `[1 1 1; 1 5 1; 1 1 1] /
/// 13` in float32 with a +0.5 rounding offset, the border pixels copied; images under 3x3
/// are copied whole.
fn smooth(img: &Raster) -> Raster {
    let mut out = img.clone();
    if img.h < 3 || img.w < 3 {
        return out;
    }
    let (edge, centre) = (1.0f32 / 13.0, 5.0f32 / 13.0);
    let row = |k: [f32; 3], y: usize, x: usize, b: usize| {
        f32::from(img.data[img.at(y, x - 1, b)]) * k[0]
            + f32::from(img.data[img.at(y, x, b)]) * k[1]
            + f32::from(img.data[img.at(y, x + 1, b)]) * k[2]
    };
    for y in 1..img.h - 1 {
        for x in 1..img.w - 1 {
            for b in 0..img.c {
                let mut ss = 0.5f32;
                ss += row([edge; 3], y + 1, x, b);
                ss += row([edge, centre, edge], y, x, b);
                ss += row([edge; 3], y - 1, x, b);
                out.data[img.at(y, x, b)] = ss.clamp(0.0, 255.0) as u8;
            }
        }
    }
    out
}

/// `img` mapped band by band through `lut(band histogram)` (`ImageOps._lut` of a per-band
/// table, as `autocontrast` and `equalize` build them).
fn per_band(img: &Raster, lut: impl Fn(&[u64; 256]) -> [u8; 256]) -> Raster {
    let tables: Vec<[u8; 256]> = (0..img.c)
        .map(|b| {
            let mut hist = [0u64; 256];
            for &v in img.data.iter().skip(b).step_by(img.c) {
                hist[usize::from(v)] += 1;
            }
            lut(&hist)
        })
        .collect();
    let data = img
        .data
        .iter()
        .enumerate()
        .map(|(i, &v)| tables[i % img.c][usize::from(v)])
        .collect();
    Raster { data, ..*img }
}

fn identity() -> [u8; 256] {
    std::array::from_fn(|i| i as u8)
}

/// `ImageOps.autocontrast(img)` (no cutoff): each band's occupied range stretched linearly to
/// 0..=255, `int(i * scale + offset)`.
pub(crate) fn autocontrast(img: &Raster) -> Raster {
    per_band(img, |h| {
        let lo = (0..256).find(|&i| h[i] != 0).unwrap_or(255);
        let hi = (0..256).rev().find(|&i| h[i] != 0).unwrap_or(0);
        if hi <= lo {
            return identity();
        }
        let scale = 255.0 / (hi - lo) as f64;
        let offset = -(lo as f64) * scale;
        std::array::from_fn(|i| (i as f64 * scale + offset).clamp(0.0, 255.0) as u8)
    })
}

/// `ImageOps.equalize(img)`: each band through its cumulative histogram in PIL's integer
/// steps, `(step / 2 + cdf) // step`.
pub(crate) fn equalize(img: &Raster) -> Raster {
    per_band(img, |h| {
        let occupied: Vec<u64> = h.iter().copied().filter(|&n| n != 0).collect();
        let (Some(&last), true) = (occupied.last(), occupied.len() > 1) else {
            return identity();
        };
        let step = (occupied.iter().sum::<u64>() - last) / 255;
        if step == 0 {
            return identity();
        }
        let mut n = step / 2;
        std::array::from_fn(|i| {
            let v = (n / step).min(255) as u8;
            n += h[i];
            v
        })
    })
}
