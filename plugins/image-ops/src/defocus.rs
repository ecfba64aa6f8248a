//! `Defocus` after albumentations 2.0.8: the image averaged over a disc of random radius
//! (an out-of-focus lens' aperture) whose edge a small Gaussian of random sigma softens,
//! applied like `cv2.filter2D` (border reflect-101).

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{Error, Result};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::{restore, uniform, values, Pixels, ToUint8};
use crate::cv_gaussian::{Dims, Plane};
use crate::layout::Spatial;
use crate::motion::filter2d;
use crate::{Bits, Span};

fn half() -> f64 {
    0.5
}

/// `Defocus` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct DefocusConfig {
    /// Disc radius range in pixels: `r` for `[1, r]`, or `[lo, hi]`, all at least 1
    /// (default [3, 10]).
    #[serde(default = "radii")]
    pub radius: Bits,
    /// Sigma range of the Gaussian that softens the disc's edge: `s` for `[0, s]`, or
    /// `[lo, hi]`, all at least 0 (default [0.1, 0.5]).
    #[serde(default = "aliases")]
    pub alias_blur: Span,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn radii() -> Bits {
    Bits::Range([3, 10])
}
fn aliases() -> Span {
    Span::Range([0.1, 0.5])
}

/// Draws a radius and a sigma and averages over the softened disc.
pub(crate) struct Disc {
    radii: [i64; 2],
    sigmas: [f64; 2],
}

impl TryFrom<DefocusConfig> for Disc {
    type Error = Error;
    fn try_from(c: DefocusConfig) -> Result<Self> {
        // albumentations' `to_tuple(v, low)`: a single value pairs with the low end.
        let radii = match c.radius {
            Bits::One(r) => [r.min(1), r.max(1)],
            Bits::Range(r) => r,
        };
        if !(1 <= radii[0] && radii[0] <= radii[1]) {
            return Err(Error::config(
                "radius",
                format!("needs 1 <= lo <= hi, got {radii:?}"),
            ));
        }
        let sigmas = match c.alias_blur {
            Span::Value(s) => [s.min(0.0), s.max(0.0)],
            Span::Range(r) => r,
        };
        if !(0.0 <= sigmas[0] && sigmas[0] <= sigmas[1] && sigmas[1].is_finite()) {
            return Err(Error::config(
                "alias_blur",
                format!("needs 0 <= lo <= hi, got {sigmas:?}"),
            ));
        }
        Ok(Disc { radii, sigmas })
    }
}

/// albumentations' defocus kernel, row-major `size × size` float32 with `size` returned: a
/// disc of `radius` on a grid reaching at least 8 pixels out, normalised in float32, then
/// `cv2.GaussianBlur`red (3 × 3 up to radius 8, 5 × 5 beyond) with sigma `alias_blur`.
pub(crate) fn defocus_kernel(radius: i64, alias_blur: f64) -> Result<(Vec<f32>, i64)> {
    let reach = radius.max(8);
    let size = 2 * reach + 1;
    let disc: Vec<f32> = (-reach..=reach)
        .flat_map(|y| {
            (-reach..=reach).map(move |x| f32::from(u8::from(x * x + y * y <= radius * radius)))
        })
        .collect();
    // Counts of whole pixels: the float32 sum is exact.
    let area: f32 = disc.iter().sum();
    let disc = Plane::F32(disc.iter().map(|v| v / area).collect());
    let side = size as usize;
    let dims = Dims {
        h: side,
        w: side,
        c: 1,
    };
    match disc.blurred(dims, if radius <= 8 { 3 } else { 5 }, alias_blur) {
        Plane::F32(k) => Ok((k, size)),
        _ => Err(Error::msg(
            "defocus kernel: a float32 blur gave another kind",
        )),
    }
}

impl Pixels for Disc {
    /// `[radius, alias_blur]`, drawn in albumentations' order.
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        let radius = rng.random_range(self.radii[0]..=self.radii[1]);
        Ok(vec![radius as f64, uniform(rng, self.sigmas)])
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let (kernel, size) = defocus_kernel(params[0] as i64, params[1])?;
        let out = filter2d(&values(x)?, layout, &kernel, size)?;
        restore(&out, x.kind(), ToUint8::Round)
    }
}

photometric!(
    Defocus,
    DefocusConfig,
    Disc,
    "Average over a softened disc of random radius (an out-of-focus lens)."
);
