//! `ISONoise` after albumentations 2.0.8: camera sensor noise in OpenCV's float32 HLS. Each
//! pixel's hue moves by N(0, color_shift · intensity) *degrees* (albumentations adds the
//! fraction to a 0..360 hue, so the colour noise is faint — kept, as FastEstimator users get
//! it), and its lightness by `k · intensity · (1 - L)` with `k` ~ Poisson(std(L) ·
//! intensity). uint8 images go through float32 (`/ 255`, back rounded half to even).

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{Error, Result};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::{channels, max_value, uniform, Pixels};
use crate::hls::{hls_to_rgb, rgb_to_hls};
use crate::layout::Spatial;

fn half() -> f64 {
    0.5
}

/// `ISONoise` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct IsoNoiseConfig {
    /// Range of the hue noise's standard deviation before `intensity` scales it (default
    /// [0.01, 0.05]).
    #[serde(default = "shifts")]
    pub color_shift: [f64; 2],
    /// Range of the noise strength (default [0.1, 0.5]), at most 100.
    #[serde(default = "intensities")]
    pub intensity: [f64; 2],
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn shifts() -> [f64; 2] {
    [0.01, 0.05]
}
fn intensities() -> [f64; 2] {
    [0.1, 0.5]
}

/// Draws the two strengths and the per-pixel noise fields, then noises HLS.
pub(crate) struct IsoNoiseMap {
    shifts: [f64; 2],
    intensities: [f64; 2],
}

/// Beyond this the Poisson mean (`std(L) · intensity`, `std(L) ≤ 0.5`) makes inversion
/// sampling slow, and every lit pixel saturates long before.
const MAX_INTENSITY: f64 = 100.0;

impl TryFrom<IsoNoiseConfig> for IsoNoiseMap {
    type Error = Error;
    fn try_from(c: IsoNoiseConfig) -> Result<Self> {
        let ok = |[lo, hi]: [f64; 2], max: f64| 0.0 <= lo && lo <= hi && hi <= max;
        if !ok(c.color_shift, f64::MAX) {
            return Err(Error::config(
                "color_shift",
                format!("needs 0 <= lo <= hi, got {:?}", c.color_shift),
            ));
        }
        if !ok(c.intensity, MAX_INTENSITY) {
            return Err(Error::config(
                "intensity",
                format!(
                    "needs 0 <= lo <= hi <= {MAX_INTENSITY}, got {:?}",
                    c.intensity
                ),
            ));
        }
        Ok(IsoNoiseMap {
            shifts: c.color_shift,
            intensities: c.intensity,
        })
    }
}

/// The RGB pixels of an `(H, W, 3)` image as float32 in [0, 1] (uint8 divided by 255 in
/// float32, as albucore's `to_float` table is).
pub(crate) fn rgb_pixels(x: &Tensor, layout: &Spatial) -> Result<Vec<[f32; 3]>> {
    let (_, c) = channels(layout, x, "ISONoise")?;
    if c != 3 {
        return Err(Error::unsupported(format!(
            "ISONoise needs an RGB (H, W, 3) image, got shape {:?}",
            x.size()
        )));
    }
    let scale = max_value(x.kind())? as f32;
    let flat = x.f_to_kind(Kind::Float)?.f_contiguous()?.f_view([-1])?;
    let numel = flat.numel();
    let mut data = vec![0f32; numel];
    flat.f_copy_data(&mut data, numel)?;
    Ok(data
        .chunks_exact(3)
        .map(|p| [p[0] / scale, p[1] / scale, p[2] / scale])
        .collect())
}

/// Population standard deviation of the HLS lightness, as `cv2.meanStdDev` gives it.
pub(crate) fn lightness_std(pixels: &[[f32; 3]]) -> f64 {
    let n = pixels.len().max(1) as f64;
    let (mut sum, mut squares) = (0.0, 0.0);
    for &p in pixels {
        let l = f64::from(rgb_to_hls(p)[1]);
        sum += l;
        squares += l * l;
    }
    let mean = sum / n;
    (squares / n - mean * mean).max(0.0).sqrt()
}

/// A Poisson(`lambda`) count by inversion of the CDF; `lambda` ≤ 50 here.
fn poisson(rng: &mut ChaCha8Rng, lambda: f64) -> f64 {
    let u = rng.random::<f64>();
    let (mut k, mut p) = (0.0, (-lambda).exp());
    let mut cdf = p;
    while u > cdf && p > 0.0 {
        k += 1.0;
        p *= lambda / k;
        cdf += p;
    }
    k
}

/// Standard normals by Box-Muller, `n` of them.
fn normals(rng: &mut ChaCha8Rng, n: usize, out: &mut Vec<f64>, sigma: f64) {
    let end = out.len() + n;
    while out.len() < end {
        let (u1, u2) = (1.0 - rng.random::<f64>(), rng.random::<f64>());
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
        for z in [r * c, r * s] {
            if out.len() < end {
                out.push(sigma * z);
            }
        }
    }
}

impl Pixels for IsoNoiseMap {
    /// `[color_shift, intensity, k per pixel..., hue noise per pixel...]`, drawn in
    /// albumentations' order (the strengths, then numpy's Poisson and normal fields).
    fn draw(&self, rng: &mut ChaCha8Rng, image: &Tensor, layout: &Spatial) -> Result<Vec<f64>> {
        let pixels = rgb_pixels(image, layout)?;
        let shift = uniform(rng, self.shifts);
        let intensity = uniform(rng, self.intensities);
        let lambda = lightness_std(&pixels) * intensity;
        let n = pixels.len();
        let mut out = Vec::with_capacity(2 + 2 * n);
        out.extend([shift, intensity]);
        out.extend((0..n).map(|_| poisson(rng, lambda)));
        normals(rng, n, &mut out, shift * intensity);
        Ok(out)
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let pixels = rgb_pixels(x, layout)?;
        let n = pixels.len();
        let intensity = params[1];
        let (counts, hues) = (&params[2..2 + n], &params[2 + n..2 + 2 * n]);
        let mut out = Vec::with_capacity(3 * n);
        for (i, &p) in pixels.iter().enumerate() {
            let [h, l, s] = rgb_to_hls(p);
            // numpy adds in float64 and stores float32, as these casts do.
            let h = (f64::from(h) + hues[i]) as f32;
            let delta = counts[i] * intensity * f64::from(1.0 - l);
            let l = l + delta as f32;
            out.extend(hls_to_rgb([h, l, s]).map(|v| v.clamp(0.0, 1.0)));
        }
        let y = Tensor::f_from_slice(&out)?.f_view(x.size().as_slice())?;
        if x.kind() == Kind::Uint8 {
            // albucore's from_float: rint(x · 255) in float32.
            let bytes = y.f_mul_scalar(255.0)?.f_round()?.f_to_kind(Kind::Uint8)?;
            return Ok(bytes.f_to_device(x.device())?);
        }
        Ok(y.f_to_kind(x.kind())?.f_to_device(x.device())?)
    }
}

photometric!(
    ISONoise,
    IsoNoiseConfig,
    IsoNoiseMap,
    "Camera sensor noise: hue and lightness noise in HLS."
);
