//! `Downscale` after albumentations 2.0.8: `cv2.resize` by the drawn factor, then back to
//! the original size, through uint8 (`uint8_io`) like albumentations.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{Error, Result};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::{uniform, Pixels};
use crate::color_ops::via_uint8;
use crate::layout::{resize, Interpolation, Spatial};
use crate::Span;

fn half() -> f64 {
    0.5
}

/// `Downscale` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct DownscaleConfig {
    /// Factor of the intermediate size: `s` or `[lo, hi]` drawn uniformly, in (0, 1]
    /// (default 0.25).
    #[serde(default = "quarter")]
    pub scale_range: Span,
    /// Sampling of the two resizes (default nearest for both, as albumentations).
    #[serde(default)]
    pub interpolation_pair: InterpolationPair,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn quarter() -> Span {
    Span::Value(0.25)
}

/// albumentations' `interpolation_pair`.
#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub struct InterpolationPair {
    /// Sampling of the shrink.
    #[serde(default = "nearest")]
    pub downscale: Interpolation,
    /// Sampling of the enlargement back to the original size.
    #[serde(default = "nearest")]
    pub upscale: Interpolation,
}

fn nearest() -> Interpolation {
    Interpolation::Nearest
}

impl Default for InterpolationPair {
    fn default() -> Self {
        InterpolationPair {
            downscale: Interpolation::Nearest,
            upscale: Interpolation::Nearest,
        }
    }
}

/// Draws the factor, shrinks and enlarges back.
pub(crate) struct DownUp {
    scales: [f64; 2],
    pair: InterpolationPair,
}

impl TryFrom<DownscaleConfig> for DownUp {
    type Error = Error;
    fn try_from(c: DownscaleConfig) -> Result<Self> {
        let scales = match c.scale_range {
            Span::Value(s) => [s, s],
            Span::Range(r) => r,
        };
        if !(0.0 < scales[0] && scales[0] <= scales[1] && scales[1] <= 1.0) {
            return Err(Error::config(
                "scale_range",
                format!("needs 0 < lo <= hi <= 1, got {scales:?}"),
            ));
        }
        Ok(DownUp {
            scales,
            pair: c.interpolation_pair,
        })
    }
}

/// `cv2.resize`'s `INTER_NEAREST` along `axis`: output index `i` reads input
/// `min(floor(i · inv), n - 1)`, in double precision as OpenCV computes it.
fn nearest_axis(x: &Tensor, axis: i64, out: i64, inv: f64) -> Result<Tensor> {
    let n = x.size()[axis as usize];
    let index: Vec<i64> = (0..out)
        .map(|i| ((i as f64 * inv).floor() as i64).min(n - 1))
        .collect();
    let index = Tensor::f_from_slice(&index)?.f_to_device(x.device())?;
    Ok(x.f_index_select(axis, &index)?)
}

/// `cv2.resize(x, None, fx = scale, fy = scale)`: the output size is rounded half to even
/// and, unlike a resize to a given size, sampling uses `scale` itself, not the size ratio.
pub(crate) fn shrink(
    x: &Tensor,
    layout: &Spatial,
    scale: f64,
    how: Interpolation,
) -> Result<Tensor> {
    let size = |n: i64| ((n as f64 * scale).round_ties_even() as i64).max(1);
    let (height, width) = (size(layout.height), size(layout.width));
    let nchw = match how {
        Interpolation::Nearest => {
            let y = nearest_axis(x, layout.h_axis, height, 1.0 / scale)?;
            return nearest_axis(&y, layout.w_axis(), width, 1.0 / scale);
        }
        _ => layout.as_nchw(x)?,
    };
    let (s, size) = (Some(scale), [height, width]);
    let y = match how {
        Interpolation::Bicubic => nchw.f_upsample_bicubic2d(size, false, s, s)?,
        _ => nchw.f_upsample_bilinear2d(size, false, s, s)?,
    };
    layout.restore_layout(&y, x.kind())
}

/// `cv2.resize(small, (width, height))`.
pub(crate) fn enlarge(small: &Tensor, layout: &Spatial, how: Interpolation) -> Result<Tensor> {
    let small_layout = Spatial::of("image", small, layout.batched)?;
    if how != Interpolation::Nearest {
        return resize(&small_layout, small, layout.height, layout.width, how);
    }
    // OpenCV inverts the size ratio (a double) rather than dividing the sizes.
    let inv = |big: i64, small: i64| 1.0 / (big as f64 / small as f64);
    let y = nearest_axis(
        small,
        layout.h_axis,
        layout.height,
        inv(layout.height, small_layout.height),
    )?;
    nearest_axis(
        &y,
        layout.w_axis(),
        layout.width,
        inv(layout.width, small_layout.width),
    )
}

impl Pixels for DownUp {
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        Ok(vec![uniform(rng, self.scales)])
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        via_uint8(x, |b| {
            let small = shrink(b, layout, params[0], self.pair.downscale)?;
            Ok(enlarge(&small, layout, self.pair.upscale)?
                .f_to_kind(Kind::Uint8)?
                .f_contiguous()?)
        })
    }
}

photometric!(
    Downscale,
    DownscaleConfig,
    DownUp,
    "Shrinks by a random factor and enlarges back (lost detail)."
);
