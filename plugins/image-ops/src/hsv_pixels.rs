//! The uint8 HSV shift ([`crate::hsv`]'s `rgb_to_hsv` → shift → `hsv_to_rgb`) one pixel at a
//! time on the CPU, with the same arithmetic: OpenCV's 12-bit fixed-point `RGB2HSV_b`, the
//! shift in float64, and `HSV2RGB_f` in float32, each operation in the order and precision the
//! tensor version uses, so both give the same bytes (tested below). The tensor version makes
//! some thirty full-image int64 and float passes; this one reads each pixel once, which makes
//! `ColorJitter` and `HueSaturationValue` several times faster.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::Result;

use crate::bytes::{bytes_of, tensor_of};

/// `round_half_even(numerator / (scale · i))`, 0 at `i = 0`: OpenCV's division tables.
fn division_table(numerator: f64, scale: f64) -> [i64; 256] {
    let mut table = [0; 256];
    for (i, entry) in table.iter_mut().enumerate().skip(1) {
        *entry = (numerator / (scale * i as f64)).round_ties_even() as i64;
    }
    table
}

/// `(a · b + 2^11) >> 12`: OpenCV's descale, flooring.
fn descale(a: i64, b: i64) -> i64 {
    (a * b + (1 << 11)).div_euclid(1 << 12)
}

/// OpenCV's `sector_data` (reordered to r, g, b): which of `v, p, q, t` each channel takes.
const SECTORS: [[usize; 3]; 6] = [
    [0, 3, 1],
    [2, 0, 1],
    [1, 0, 3],
    [1, 2, 0],
    [3, 1, 0],
    [0, 1, 2],
];

/// Shifts hue (in 0..180 units, then truncated), saturation and value (truncated, saturated;
/// grey pixels keep saturation 0) of a uint8 `(…, 3)` RGB image on the CPU. `None` for any
/// other tensor, which the tensor version handles.
pub(crate) fn shift_hsv(x: &Tensor, hue: f64, sat: f64, val: f64) -> Result<Option<Tensor>> {
    let Some((mut data, shape)) = bytes_of(x)? else {
        return Ok(None);
    };
    if shape.last() != Some(&3) {
        return Ok(None);
    }
    let sdiv = division_table((255 << 12) as f64, 1.0);
    let hdiv = division_table((180 << 12) as f64, 6.0);
    let (sat, val) = (sat.trunc() as i64, val.trunc() as i64);
    // The tensor version's float32 scalars: doubles rounded to float.
    let (to_sectors, to_unit) = ((6.0f64 / 180.0) as f32, (1.0f64 / 255.0) as f32);
    for pixel in data.chunks_exact_mut(3) {
        let [r, g, b] = [pixel[0], pixel[1], pixel[2]].map(i64::from);
        let v = r.max(g).max(b);
        let diff = v - r.min(g).min(b);
        let s = descale(diff, sdiv[v as usize]);
        let h = if v == r {
            g - b
        } else if v == g {
            b - r + 2 * diff
        } else {
            r - g + 4 * diff
        };
        let h = descale(h, hdiv[diff as usize]);
        let h = if h >= 0 { h } else { h + 180 };

        let mut h = (h as f64 + hue) % 180.0;
        if h != 0.0 && h < 0.0 {
            h += 180.0;
        }
        let h = h.trunc();
        let s = if sat != 0 && s != 0 {
            (s + sat).clamp(0, 255)
        } else {
            s
        };
        let v = (v + val).clamp(0, 255);

        let h = h as f32 * to_sectors;
        let s = s as f32 * to_unit;
        let v = v as f32 * to_unit;
        let rgb = if s == 0.0 {
            [v; 3]
        } else {
            let sector = h.floor();
            let f = h - sector;
            let table = [
                v,
                v * (1.0 - s),
                v * (1.0 - s * f),
                v * (1.0 - s * (1.0 - f)),
            ];
            SECTORS[(sector as i64).rem_euclid(6) as usize].map(|k| table[k])
        };
        for (out, value) in pixel.iter_mut().zip(rgb) {
            *out = (value * 255.0).round_ties_even().clamp(0.0, 255.0) as u8;
        }
    }
    Ok(Some(tensor_of(&data, &shape)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hsv::{hsv_to_rgb, rgb_to_hsv};
    use fe_plugin_api::tch::{Device, Kind};

    /// The tensor version, as `hsv::shift_hsv` and `jitter::hue` compute it.
    fn by_tensors(x: &Tensor, hue: f64, sat: f64, val: f64) -> Tensor {
        let saturated =
            |t: &Tensor, shift: f64| t.f_add_scalar(shift.trunc() as i64).unwrap().clamp(0, 255);
        let [h, s, v] = rgb_to_hsv(x).unwrap();
        let h = h
            .to_kind(Kind::Double)
            .f_add_scalar(hue)
            .unwrap()
            .remainder(180.0)
            .trunc();
        let s = if sat != 0.0 {
            saturated(&s, sat).where_self(&s.ne(0), &s)
        } else {
            s
        };
        hsv_to_rgb(&h, &s, &saturated(&v, val)).unwrap()
    }

    #[test]
    fn pixels_equal_the_tensor_version_byte_for_byte() {
        // Every grey level and hue edge case: random colours plus the greys and primaries.
        let random = Tensor::randint(256, [256, 256, 3], (Kind::Uint8, Device::Cpu));
        let levels = Tensor::arange(256, (Kind::Uint8, Device::Cpu));
        let greys = levels.unsqueeze(-1).repeat([1, 3]).view([16, 16, 3]);
        let edges = Tensor::from_slice(&[
            255u8, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 0, 0, 255, 255, 255, 0, 255, 1, 0, 0, 0,
            0, 1,
        ])
        .view([2, 4, 3]);
        for image in [random, greys, edges] {
            for (hue, sat, val) in [
                (0.0, 0.0, 7.5),
                (-90.0, 0.0, 0.0),
                (37.8, -30.0, 20.0),
                (89.99, 30.0, -20.0),
                (180.0 * -0.37, 0.0, 0.0),
                (-0.2, 12.0, 0.0),
            ] {
                let ours = shift_hsv(&image, hue, sat, val).unwrap().unwrap();
                let reference = by_tensors(&image, hue, sat, val);
                assert!(
                    ours.equal(&reference),
                    "hue {hue} sat {sat} val {val}: {}",
                    (ours.to_kind(Kind::Int) - reference.to_kind(Kind::Int))
                        .abs()
                        .max()
                );
            }
        }
    }

    #[test]
    fn other_tensors_are_left_to_the_tensor_version() {
        let float = Tensor::zeros([4, 4, 3], (Kind::Float, Device::Cpu));
        let gray = Tensor::zeros([4, 4, 1], (Kind::Uint8, Device::Cpu));
        assert!(shift_hsv(&float, 10.0, 0.0, 0.0).unwrap().is_none());
        assert!(shift_hsv(&gray, 10.0, 0.0, 0.0).unwrap().is_none());
    }
}
