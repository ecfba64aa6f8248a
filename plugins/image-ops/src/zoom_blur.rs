//! `ZoomBlur` after albumentations 2.0.8: the mean of the image and its central zooms by
//! `1, 1 + s, 1 + 2s, ...` below the drawn maximum factor (numpy's `arange`). A zoom by `z`
//! crops the central `ceil(H / z) × ceil(W / z)` window, scales it by `z` (bilinear, to
//! `int(h · z) × int(w · z)`) and crops the central `H × W` back. Runs in float32; uint8
//! images are divided by 255 and rounded back half to even.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{Error, Result};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::{max_value, uniform, Pixels};
use crate::layout::{resize, Interpolation, Spatial};
use crate::Span;

fn half() -> f64 {
    0.5
}

/// `ZoomBlur` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ZoomBlurConfig {
    /// Range of the largest zoom factor, at least 1: `f` means `[1, f]` (default [1, 1.31]).
    #[serde(default = "factors")]
    pub max_factor: Span,
    /// Range of the step between zoom factors, above 0: `s` means `[s, s]` (default
    /// [0.01, 0.03]).
    #[serde(default = "steps")]
    pub step_factor: Span,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn factors() -> Span {
    Span::Range([1.0, 1.31])
}
fn steps() -> Span {
    Span::Range([0.01, 0.03])
}

/// Draws the step and the largest factor, then averages the zooms.
pub(crate) struct Zooms {
    factors: [f64; 2],
    steps: [f64; 2],
}

impl TryFrom<ZoomBlurConfig> for Zooms {
    type Error = Error;
    fn try_from(c: ZoomBlurConfig) -> Result<Self> {
        let factors = match c.max_factor {
            Span::Value(f) => [1.0, f],
            Span::Range(r) => r,
        };
        if !(1.0 <= factors[0] && factors[0] <= factors[1] && factors[1].is_finite()) {
            return Err(Error::config(
                "max_factor",
                format!("needs 1 <= lo <= hi, got {factors:?}"),
            ));
        }
        // albumentations reads `s` as [0, s]; steps near 0 would make millions of zooms.
        let steps = match c.step_factor {
            Span::Value(s) => [s, s],
            Span::Range(r) => r,
        };
        if !(0.0 < steps[0] && steps[0] <= steps[1] && steps[1].is_finite()) {
            return Err(Error::config(
                "step_factor",
                format!("needs 0 < lo <= hi, got {steps:?}"),
            ));
        }
        Ok(Zooms { factors, steps })
    }
}

/// `np.arange(1.0, max, step)`: `ceil((max - 1) / step)` factors `1 + i · step`.
pub(crate) fn zoom_factors(step: f64, max: f64) -> Vec<f64> {
    let n = ((max - 1.0) / step).ceil().max(0.0) as usize;
    (0..n).map(|i| 1.0 + i as f64 * step).collect()
}

/// albumentations' `central_zoom` of the float32 image `x`.
fn central_zoom(x: &Tensor, layout: &Spatial, zoom: f64) -> Result<Tensor> {
    let (h, w, ha, wa) = (layout.height, layout.width, layout.h_axis, layout.w_axis());
    let (ch, cw) = (
        (h as f64 / zoom).ceil() as i64,
        (w as f64 / zoom).ceil() as i64,
    );
    let crop = x
        .f_narrow(ha, (h - ch) / 2, ch)?
        .f_narrow(wa, (w - cw) / 2, cw)?;
    let (zh, zw) = ((ch as f64 * zoom) as i64, (cw as f64 * zoom) as i64);
    if zh < h || zw < w {
        return Err(Error::msg(format!(
            "ZoomBlur: zoom {zoom} of a {h}x{w} image gives {zh}x{zw}, smaller than the image"
        )));
    }
    let crop_layout = Spatial {
        height: ch,
        width: cw,
        ..*layout
    };
    let zoomed = resize(&crop_layout, &crop, zh, zw, Interpolation::Bilinear)?;
    Ok(zoomed
        .f_narrow(ha, (zh - h) / 2, h)?
        .f_narrow(wa, (zw - w) / 2, w)?)
}

impl Pixels for Zooms {
    /// `[step, max factor]`: the step, then `max(1 + step, draw)`, as albumentations draws.
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        let step = uniform(rng, self.steps);
        let max = (1.0 + step).max(uniform(rng, self.factors));
        Ok(vec![step, max])
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let scale = max_value(x.kind())?;
        let v = x.f_to_kind(Kind::Float)?.f_div_scalar(scale)?;
        let factors = zoom_factors(params[0], params[1]);
        let mut sum = v.f_zeros_like()?;
        for &zoom in &factors {
            sum = sum.f_add(&central_zoom(&v, layout, zoom)?)?;
        }
        let y = v
            .f_add(&sum)?
            .f_div_scalar((factors.len() + 1) as f64)?
            .f_clamp(0.0, 1.0)?;
        if x.kind() == Kind::Uint8 {
            return Ok(y.f_mul_scalar(255.0)?.f_round()?.f_to_kind(Kind::Uint8)?);
        }
        Ok(y.f_to_kind(x.kind())?)
    }
}

photometric!(
    ZoomBlur,
    ZoomBlurConfig,
    Zooms,
    "Mean of the image and its central zooms (radial blur)."
);
