//! `ColorJitter` after albumentations 2.0.8: brightness, contrast, saturation and hue factors,
//! applied in a random order, each with albumentations' arithmetic (uint8 lookup tables that
//! truncate, OpenCV's rounding `addWeighted`, OpenCV HSV for the hue; float images in float,
//! the hue through OpenCV's float HSV in degrees).

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{Error, Result};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::bytes::{bytes_of, tensor_of};
use crate::channel_ops::GrayMap;
use crate::color::{lookup, max_value, restore, uniform, values, Pixels, ToUint8};
use crate::hsv::{hsv_to_rgb, hsv_to_rgb_float, rgb_to_hsv, rgb_to_hsv_float};
use crate::layout::Spatial;
use crate::Limit;

/// `ColorJitter` configuration (torchvision's / albumentations' meaning of each number).
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ColorJitterConfig {
    /// Brightness factor: `b` for `[max(0, 1 - b), 1 + b]`, or `[lo, hi]` (default [0.8, 1.2]).
    #[serde(default = "around_one")]
    pub brightness: Limit,
    /// Contrast factor, as `brightness`.
    #[serde(default = "around_one")]
    pub contrast: Limit,
    /// Saturation factor, as `brightness`.
    #[serde(default = "around_one")]
    pub saturation: Limit,
    /// Hue shift in turns: `h` for `[-h, h]`, or `[lo, hi]`, within [-0.5, 0.5] (default 0.5).
    #[serde(default = "half_turn")]
    pub hue: Limit,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn around_one() -> Limit {
    Limit::Range([0.8, 1.2])
}
fn half_turn() -> Limit {
    Limit::Symmetric(0.5)
}
fn half() -> f64 {
    0.5
}

/// The four factor ranges, in albumentations' draw order.
pub(crate) struct Jitter([[f64; 2]; 4]);

fn factor(field: &str, l: Limit) -> Result<[f64; 2]> {
    let [lo, hi] = match l {
        Limit::Symmetric(b) => [(1.0 - b).max(0.0), 1.0 + b],
        Limit::Range(r) => r,
    };
    if 0.0 <= lo && lo <= hi && hi.is_finite() {
        Ok([lo, hi])
    } else {
        Err(Error::config(
            field,
            format!("needs factors 0 <= lo <= hi, got [{lo}, {hi}]"),
        ))
    }
}

impl TryFrom<ColorJitterConfig> for Jitter {
    type Error = Error;
    fn try_from(c: ColorJitterConfig) -> Result<Self> {
        let [lo, hi] = match c.hue {
            Limit::Symmetric(h) => [-h, h],
            Limit::Range(r) => r,
        };
        if !(-0.5 <= lo && lo <= hi && hi <= 0.5) {
            return Err(Error::config(
                "hue",
                format!("needs -0.5 <= lo <= hi <= 0.5, got [{lo}, {hi}]"),
            ));
        }
        Ok(Jitter([
            factor("brightness", c.brightness)?,
            factor("contrast", c.contrast)?,
            factor("saturation", c.saturation)?,
            [lo, hi],
        ]))
    }
}

impl Pixels for Jitter {
    /// `[brightness, contrast, saturation, hue, order...]`: the four factors, then the order
    /// (a uniform permutation of 0..4) the adjustments run in.
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        let mut params: Vec<f64> = self.0.iter().map(|&r| uniform(rng, r)).collect();
        let mut order = [0.0, 1.0, 2.0, 3.0];
        for i in (1..4).rev() {
            order.swap(i, rng.random_range(0..=i));
        }
        params.extend(order);
        Ok(params)
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let c = if layout.plain { 1 } else { x.size()[2] };
        if c != 1 && c != 3 {
            return Err(Error::msg(format!(
                "ColorJitter needs an RGB (H, W, 3) or gray image, got shape {:?}",
                x.size()
            )));
        }
        let gray = c == 1;
        let mut y = x.shallow_clone();
        for &step in &params[4..8] {
            let f = params[step as usize];
            y = match step as usize {
                0 => brightness(&y, f)?,
                1 => contrast(&y, f, gray, layout)?,
                2 if !gray => saturation(&y, f, layout)?,
                3 if !gray => hue(&y, f)?,
                _ => y,
            };
        }
        Ok(y)
    }
}

/// `x · f`: a truncating float32 table on uint8, float32 arithmetic on floats.
fn brightness(x: &Tensor, f: f64) -> Result<Tensor> {
    if f == 1.0 {
        return Ok(x.shallow_clone());
    }
    if x.kind() == Kind::Uint8 {
        let lut: Vec<f64> = (0..256)
            .map(|i| f64::from((i as f32 * f as f32).clamp(0.0, 255.0).trunc()))
            .collect();
        return lookup(x, &lut);
    }
    restore(&values(x)?.f_mul_scalar(f)?, x.kind(), ToUint8::Truncate)
}

/// The luma mean albumentations blends towards: OpenCV's gray of RGB images.
fn gray_mean(x: &Tensor, gray: bool, layout: &Spatial) -> Result<f64> {
    let luma = if gray {
        x.shallow_clone()
    } else {
        GrayMap.apply(&[], x, layout)?.f_select(-1, 0)?
    };
    Ok(luma
        .f_to_kind(Kind::Double)?
        .f_mean(Kind::Double)?
        .double_value(&[]))
}

/// `x · f + mean · (1 - f)`.
fn contrast(x: &Tensor, f: f64, gray: bool, layout: &Spatial) -> Result<Tensor> {
    if f == 1.0 {
        return Ok(x.shallow_clone());
    }
    let mean = gray_mean(x, gray, layout)?;
    if f == 0.0 {
        let fill = if x.kind() == Kind::Uint8 {
            (mean + 0.5).trunc()
        } else {
            mean
        };
        return Ok(x.f_full_like(fill)?);
    }
    let shift = mean * (1.0 - f);
    if x.kind() == Kind::Uint8 {
        let lut: Vec<f64> = (0..256)
            .map(|i| {
                f64::from(
                    (i as f32 * f as f32 + shift as f32)
                        .clamp(0.0, 255.0)
                        .trunc(),
                )
            })
            .collect();
        return lookup(x, &lut);
    }
    let y = x
        .f_to_kind(Kind::Double)?
        .f_mul_scalar(f)?
        .f_add_scalar(shift)?;
    restore(&y, x.kind(), ToUint8::Truncate)
}

/// `cv2.addWeighted(x, f, gray, 1 - f, 0)`: float32, rounded on uint8.
fn saturation(x: &Tensor, f: f64, layout: &Spatial) -> Result<Tensor> {
    if f == 1.0 {
        return Ok(x.shallow_clone());
    }
    let gray = GrayMap.apply(&[], x, layout)?;
    if f == 0.0 {
        return Ok(gray);
    }
    if let (Some((mut data, shape)), Some((gray, _))) = (bytes_of(x)?, bytes_of(&gray)?) {
        // The tensor arithmetic below, byte by byte: float32 products, then the sum, clipped
        // and rounded half to even.
        let (a, b) = (f as f32, (1.0 - f) as f32);
        for (value, gray) in data.iter_mut().zip(gray) {
            let y = f32::from(*value) * a + f32::from(gray) * b;
            *value = y.clamp(0.0, 255.0).round_ties_even() as u8;
        }
        return tensor_of(&data, &shape);
    }
    let y = x
        .f_to_kind(Kind::Float)?
        .f_mul_scalar(f)?
        .f_add(&gray.f_to_kind(Kind::Float)?.f_mul_scalar(1.0 - f)?)?;
    restore(&y, x.kind(), ToUint8::Round)
}

/// Hue turned by `f` of a full turn, in OpenCV's HSV (uint8: hue 0..180, truncated).
fn hue(x: &Tensor, f: f64) -> Result<Tensor> {
    if f == 0.0 {
        return Ok(x.shallow_clone());
    }
    if let Some(turned) = crate::hsv_pixels::shift_hsv(x, 180.0 * f, 0.0, 0.0)? {
        return Ok(turned);
    }
    if x.kind() == Kind::Uint8 {
        let [h, s, v] = rgb_to_hsv(x)?;
        let h = h
            .f_to_kind(Kind::Double)?
            .f_add_scalar(180.0 * f)?
            .f_remainder(180.0)?
            .f_trunc()?;
        return hsv_to_rgb(&h, &s, &v);
    }
    max_value(x.kind())?;
    let [h, s, v] = rgb_to_hsv_float(x)?;
    let h = h.f_add_scalar(f * 360.0)?.f_remainder(360.0)?;
    Ok(hsv_to_rgb_float(&h, &s, &v)?.f_to_kind(x.kind())?)
}

photometric!(
    ColorJitter,
    ColorJitterConfig,
    Jitter,
    "Random brightness, contrast, saturation and hue, in a random order."
);

#[cfg(test)]
mod tests {
    use super::*;
    use fe_plugin_api::tch::Device;

    #[test]
    fn uint8_saturation_equals_its_tensor_arithmetic_byte_for_byte() {
        let x = Tensor::randint(256, [48, 40, 3], (Kind::Uint8, Device::Cpu));
        let layout = Spatial::of("x", &x, false).unwrap();
        let gray = GrayMap.apply(&[], &x, &layout).unwrap();
        for f in [0.6, 0.8137, 1.2, 1.77] {
            let reference = x
                .to_kind(Kind::Float)
                .f_mul_scalar(f)
                .unwrap()
                .f_add(&gray.to_kind(Kind::Float).f_mul_scalar(1.0 - f).unwrap())
                .unwrap();
            let reference = restore(&reference, Kind::Uint8, ToUint8::Round).unwrap();
            assert!(
                saturation(&x, f, &layout).unwrap().equal(&reference),
                "f = {f}"
            );
        }
    }
}
