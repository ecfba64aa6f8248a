//! `HueSaturationValue`: shifts in OpenCV's uint8 HSV space (hue in 0..180), as albumentations
//! 2.0.8 does; float images go through uint8 (its `uint8_io`). The conversions follow OpenCV's
//! `RGB2HSV_b` (12-bit fixed point, exact) and `HSV2RGB_b` (float32, within one grey level:
//! OpenCV's SIMD path rounds a few of 35M colours the other way).

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{Error, Result};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::{channels, range, uniform, Pixels};
use crate::color_ops::via_uint8;
use crate::layout::Spatial;
use crate::Limit;

/// Channels of an `(…, 3)` RGB uint8 image as int64 `(r, g, b)`.
fn split(x: &Tensor) -> Result<[Tensor; 3]> {
    let x = x.f_to_kind(Kind::Int64)?;
    Ok([x.f_select(-1, 0)?, x.f_select(-1, 1)?, x.f_select(-1, 2)?])
}

/// A 256-entry int64 table `round_half_even(numerator / (scale · i))`, 0 at `i = 0`.
fn division_table(numerator: f64, scale: f64, like: &Tensor) -> Result<Tensor> {
    let table: Vec<i64> = (0..256)
        .map(|i| match i {
            0 => 0,
            _ => (numerator / (scale * i as f64)).round_ties_even() as i64,
        })
        .collect();
    Ok(Tensor::f_from_slice(&table)?.f_to_device(like.device())?)
}

/// `table[index]` for an int64 index tensor of any shape.
fn look_up(table: &Tensor, index: &Tensor) -> Result<Tensor> {
    Ok(table
        .f_index_select(0, &index.f_flatten(0, -1)?)?
        .f_reshape(index.size())?)
}

/// `(a · b + 2^11) >> 12`, OpenCV's fixed-point descale (an arithmetic shift floors).
fn descale(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    Ok(a.f_mul(b)?
        .f_add_scalar(1 << 11)?
        .f_div_scalar_mode(1 << 12, "floor")?)
}

/// OpenCV's uint8 RGB → HSV: `(h in 0..180, s, v)` as int64.
pub(crate) fn rgb_to_hsv(x: &Tensor) -> Result<[Tensor; 3]> {
    let [r, g, b] = split(x)?;
    let v = r.f_maximum(&g)?.f_maximum(&b)?;
    let diff = v.f_sub(&r.f_minimum(&g)?.f_minimum(&b)?)?;
    let sdiv = division_table((255 << 12) as f64, 1.0, &v)?;
    let hdiv = division_table((180 << 12) as f64, 6.0, &v)?;
    let s = descale(&diff, &look_up(&sdiv, &v)?)?;
    let from_g = b.f_sub(&r)?.f_add(&diff.f_mul_scalar(2)?)?;
    let from_b = r.f_sub(&g)?.f_add(&diff.f_mul_scalar(4)?)?;
    let h = g.f_sub(&b)?.f_where_self(
        &v.f_eq_tensor(&r)?,
        &from_g.f_where_self(&v.f_eq_tensor(&g)?, &from_b)?,
    )?;
    let h = descale(&h, &look_up(&hdiv, &diff)?)?;
    let h = h.f_where_self(&h.f_ge(0)?, &h.f_add_scalar(180)?)?;
    Ok([h, s, v])
}

/// OpenCV's uint8 HSV → RGB (`h` in 0..180), computed in float32 as `HSV2RGB_f` does.
pub(crate) fn hsv_to_rgb(h: &Tensor, s: &Tensor, v: &Tensor) -> Result<Tensor> {
    let h = h.f_to_kind(Kind::Float)?.f_mul_scalar(6.0 / 180.0)?;
    let s = s.f_to_kind(Kind::Float)?.f_mul_scalar(1.0 / 255.0)?;
    let v = v.f_to_kind(Kind::Float)?.f_mul_scalar(1.0 / 255.0)?;
    Ok(sectors(&h, &s, &v)?
        .f_mul_scalar(255.0)?
        .f_round()?
        .f_clamp(0.0, 255.0)?
        .f_to_kind(Kind::Uint8)?)
}

/// OpenCV's float RGB → HSV (`RGB2HSV_f`): `h` in degrees [0, 360), `s`, `v` in [0, 1].
pub(crate) fn rgb_to_hsv_float(x: &Tensor) -> Result<[Tensor; 3]> {
    let x = x.f_to_kind(Kind::Float)?;
    let (r, g, b) = (x.f_select(-1, 0)?, x.f_select(-1, 1)?, x.f_select(-1, 2)?);
    let v = r.f_maximum(&g)?.f_maximum(&b)?;
    let diff = v.f_sub(&r.f_minimum(&g)?.f_minimum(&b)?)?;
    let eps = f64::from(f32::EPSILON);
    let s = diff.f_div(&v.f_abs()?.f_add_scalar(eps)?)?;
    let k = diff.f_add_scalar(eps)?.f_reciprocal()?.f_mul_scalar(60.0)?;
    let from_r = g.f_sub(&b)?.f_mul(&k)?;
    let from_g = b.f_sub(&r)?.f_mul(&k)?.f_add_scalar(120.0)?;
    let from_b = r.f_sub(&g)?.f_mul(&k)?.f_add_scalar(240.0)?;
    let h = from_r.f_where_self(
        &v.f_eq_tensor(&r)?,
        &from_g.f_where_self(&v.f_eq_tensor(&g)?, &from_b)?,
    )?;
    let h = h.f_where_self(&h.f_ge(0.0)?, &h.f_add_scalar(360.0)?)?;
    Ok([h, s, v])
}

/// OpenCV's float HSV → RGB (`h` in degrees), float32.
pub(crate) fn hsv_to_rgb_float(h: &Tensor, s: &Tensor, v: &Tensor) -> Result<Tensor> {
    sectors(&h.f_mul_scalar(6.0 / 360.0)?, s, v)
}

/// `HSV2RGB_f`'s core: `h` in sectors [0, 6), float32 `(…, 3)` RGB in `v`'s scale.
fn sectors(h: &Tensor, s: &Tensor, v: &Tensor) -> Result<Tensor> {
    let sector = h.f_floor()?;
    let f = h.f_sub(&sector)?;
    let sector = sector.f_to_kind(Kind::Int64)?.f_remainder(6)?;
    let one_minus = |t: &Tensor| -> Result<Tensor> { Ok(t.f_neg()?.f_add_scalar(1.0)?) };
    let tab = Tensor::f_stack(
        &[
            v.shallow_clone(),
            v.f_mul(&one_minus(s)?)?,
            v.f_mul(&one_minus(&s.f_mul(&f)?)?)?,
            v.f_mul(&one_minus(&s.f_mul(&one_minus(&f)?)?)?)?,
        ],
        -1,
    )?;
    // OpenCV's sector_data, columns (b, g, r), reordered here to (r, g, b).
    let order: [i64; 18] = [0, 3, 1, 2, 0, 1, 1, 0, 3, 1, 2, 0, 3, 1, 0, 0, 1, 2];
    let order = Tensor::f_from_slice(&order)?
        .f_to_device(h.device())?
        .f_view([6, 3])?;
    let index = order.f_index_select(0, &sector.f_flatten(0, -1)?)?;
    let mut shape = sector.size();
    shape.push(3);
    let rgb = tab.f_gather(-1, &index.f_reshape(shape.as_slice())?, false)?;
    let gray = s.f_eq(0.0)?.f_unsqueeze(-1)?;
    Ok(v.f_unsqueeze(-1)?
        .f_expand_as(&rgb)?
        .f_where_self(&gray, &rgb)?)
}

/// `HueSaturationValue` configuration (uint8 HSV units: hue 0..180, saturation and value
/// 0..255; float images are shifted in the same units).
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct HueSaturationValueConfig {
    /// Hue shift range (default 20: [-20, 20]).
    #[serde(default = "twenty")]
    pub hue_shift_limit: Limit,
    /// Saturation shift range (default 30).
    #[serde(default = "thirty")]
    pub sat_shift_limit: Limit,
    /// Value shift range (default 20).
    #[serde(default = "twenty")]
    pub val_shift_limit: Limit,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn twenty() -> Limit {
    Limit::Symmetric(20.0)
}
fn thirty() -> Limit {
    Limit::Symmetric(30.0)
}
fn half() -> f64 {
    0.5
}

/// Draws `(hue, sat, val)` shifts and applies them in HSV.
pub(crate) struct HsvShift([[f64; 2]; 3]);

impl TryFrom<HueSaturationValueConfig> for HsvShift {
    type Error = Error;
    fn try_from(c: HueSaturationValueConfig) -> Result<Self> {
        Ok(HsvShift([
            range("hue_shift_limit", c.hue_shift_limit)?,
            range("sat_shift_limit", c.sat_shift_limit)?,
            range("val_shift_limit", c.val_shift_limit)?,
        ]))
    }
}

/// `x + trunc(shift)`, saturated to uint8 (albucore's `add_constant` through `cv2.add`).
fn add_saturated(x: &Tensor, shift: f64) -> Result<Tensor> {
    Ok(x.f_add_scalar(shift.trunc() as i64)?.f_clamp(0, 255)?)
}

/// `shift_hsv` on a uint8 image.
fn shift_hsv(x: &Tensor, layout: &Spatial, shifts: &[f64]) -> Result<Tensor> {
    let (hue, sat, val) = (shifts[0], shifts[1], shifts[2]);
    if hue == 0.0 && sat == 0.0 && val == 0.0 {
        return Ok(x.shallow_clone());
    }
    let c = if layout.plain {
        1
    } else {
        channels(layout, x, "HueSaturationValue")?.1
    };
    if c == 1 {
        // Gray: albumentations shifts only the value of GRAY2RGB, and reads it back.
        return Ok(add_saturated(&x.f_to_kind(Kind::Int64)?, val)?.f_to_kind(Kind::Uint8)?);
    }
    if c != 3 {
        return Err(Error::msg(format!(
            "HueSaturationValue needs an RGB (H, W, 3) or gray image, got shape {:?}",
            x.size()
        )));
    }
    if let Some(shifted) = crate::hsv_pixels::shift_hsv(x, hue, sat, val)? {
        return Ok(shifted);
    }
    let [h, s, v] = rgb_to_hsv(x)?;
    let h = h
        .f_to_kind(Kind::Double)?
        .f_add_scalar(hue)?
        .f_remainder(180.0)?
        .f_trunc()?;
    // Grey pixels (s = 0) stay grey whatever the saturation shift.
    let s = if sat != 0.0 {
        add_saturated(&s, sat)?.f_where_self(&s.f_ne(0)?, &s)?
    } else {
        s
    };
    hsv_to_rgb(&h, &s, &add_saturated(&v, val)?)
}

impl Pixels for HsvShift {
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        Ok(self.0.iter().map(|&r| uniform(rng, r)).collect())
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        via_uint8(x, |b| shift_hsv(b, layout, params))
    }
}

photometric!(
    HueSaturationValue,
    HueSaturationValueConfig,
    HsvShift,
    "Random hue, saturation and value shifts in OpenCV's uint8 HSV space."
);
