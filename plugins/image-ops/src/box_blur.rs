//! `Blur` after albumentations 2.0.8: the mean of a random odd `k × k` window, like
//! `cv2.blur` (border reflect-101), run as two separable passes in float64; uint8 rounded
//! half to even.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{Error, Result};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::blur::{convolve_axis, odd_blur_limit};
use crate::color::{restore, values, Pixels, ToUint8};
use crate::layout::Spatial;
use crate::Bits;

fn half() -> f64 {
    0.5
}

/// `Blur` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct BlurConfig {
    /// Odd kernel size range: `l` for `[3, l]`, or `[lo, hi]` (default [3, 7]); values below
    /// 3 become 3 and even ones the next odd number, as albumentations does.
    #[serde(default = "sizes")]
    pub blur_limit: Bits,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn sizes() -> Bits {
    Bits::Range([3, 7])
}

/// Draws an odd size and averages each window.
pub(crate) struct BoxMean([i64; 2]);

impl TryFrom<BlurConfig> for BoxMean {
    type Error = Error;
    fn try_from(c: BlurConfig) -> Result<Self> {
        odd_blur_limit(c.blur_limit).map(BoxMean)
    }
}

impl Pixels for BoxMean {
    /// `[k]`, uniform over the odd sizes of the range (albumentations' `sample_odd_from_range`).
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        let steps = (self.0[1] - self.0[0]) / 2;
        Ok(vec![(self.0[0] + 2 * rng.random_range(0..=steps)) as f64])
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let k = params[0] as i64;
        let kernel = vec![1.0 / k as f64; k as usize];
        let v = values(x)?.f_to_kind(Kind::Double)?;
        let y = convolve_axis(&v, layout.w_axis(), &kernel)?;
        let y = convolve_axis(&y, layout.h_axis, &kernel)?;
        restore(&y, x.kind(), ToUint8::Round)
    }
}

photometric!(
    Blur,
    BlurConfig,
    BoxMean,
    "Mean of a random odd k x k window (box blur)."
);
