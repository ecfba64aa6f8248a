//! `GlassBlur` after albumentations 2.0.8: `cv2.GaussianBlur` (kernel sized from sigma), then
//! every pixel at least `max_delta + 1` from the top / left and `max_delta` from the bottom /
//! right edge swapped with a neighbour at a drawn offset in `[-max_delta, max_delta)`, for
//! `iterations` rounds, then blurred again.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{Error, Result};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::Pixels;
use crate::cv_gaussian::{Dims, Plane};
use crate::layout::Spatial;

/// How the swaps run.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum GlassMode {
    /// Each round swaps all pixels at once with the values from the round's start.
    Fast,
    /// Pixel by pixel, each swap seeing the ones before it.
    Exact,
}

/// `GlassBlur` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct GlassBlurConfig {
    /// Gaussian sigma, above 0 (default 0.7).
    #[serde(default = "sigma")]
    pub sigma: f64,
    /// Largest swap distance in pixels, at least 1 (default 4).
    #[serde(default = "max_delta")]
    pub max_delta: i64,
    /// Rounds of swaps, at least 1 (default 2).
    #[serde(default = "iterations")]
    pub iterations: i64,
    /// `"fast"` (default) or `"exact"`.
    #[serde(default = "fast")]
    pub mode: GlassMode,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn sigma() -> f64 {
    0.7
}
fn max_delta() -> i64 {
    4
}
fn iterations() -> i64 {
    2
}
fn fast() -> GlassMode {
    GlassMode::Fast
}
fn half() -> f64 {
    0.5
}

/// The op's settings.
pub(crate) struct Glass {
    sigma: f64,
    delta: i64,
    iterations: usize,
    mode: GlassMode,
}

impl TryFrom<GlassBlurConfig> for Glass {
    type Error = Error;
    fn try_from(c: GlassBlurConfig) -> Result<Self> {
        // albumentations accepts sigma = 0, but OpenCV then has no kernel size and fails.
        if !(c.sigma > 0.0 && c.sigma.is_finite()) {
            return Err(Error::config(
                "sigma",
                format!("must be above 0, got {}", c.sigma),
            ));
        }
        if c.max_delta < 1 {
            return Err(Error::config(
                "max_delta",
                format!("must be at least 1, got {}", c.max_delta),
            ));
        }
        if c.iterations < 1 {
            return Err(Error::config(
                "iterations",
                format!("must be at least 1, got {}", c.iterations),
            ));
        }
        Ok(Glass {
            sigma: c.sigma,
            delta: c.max_delta,
            iterations: c.iterations as usize,
            mode: c.mode,
        })
    }
}

impl Glass {
    /// The swapped rows (bottom up) and columns (right to left), as albumentations walks them.
    fn spans(&self, d: Dims) -> (Vec<usize>, Vec<usize>) {
        let span = |n: usize| -> Vec<usize> {
            let n = n as i64;
            ((self.delta + 1)..=(n - self.delta))
                .rev()
                .map(|i| i as usize)
                .collect()
        };
        (span(d.h), span(d.w))
    }

    /// albumentations' swaps on `px` (`d.c` values a pixel) with offsets `dxy`, laid out as
    /// its `(pixels, iterations, 2)` array of `(dy, dx)`.
    fn swap<T: Copy>(&self, px: &mut [T], d: Dims, dxy: &[f64]) {
        let (rows, cols) = self.spans(d);
        let pixels = rows.len() * cols.len();
        let at = |y: usize, x: usize| (y * d.w + x) * d.c;
        let offset = |idx: usize, i: usize, y: usize, x: usize| {
            let base = (idx * self.iterations + i) * 2;
            let dy = dxy[base] as i64;
            let dx = dxy[base + 1] as i64;
            ((y as i64 + dy) as usize, (x as i64 + dx) as usize)
        };
        for i in 0..self.iterations {
            match self.mode {
                // numpy's fancy indexing: both sides read before either is written, the
                // neighbours written last so a neighbour drawn twice keeps the later pixel.
                GlassMode::Fast => {
                    let start = px.to_vec();
                    let mut pairs = Vec::with_capacity(pixels);
                    for j in 0..pixels {
                        let (y, x) = (rows[j % rows.len()], cols[j / rows.len()]);
                        let (ny, nx) = offset(j, i, y, x);
                        pairs.push((at(y, x), at(ny, nx)));
                    }
                    for &(p, q) in &pairs {
                        px[p..p + d.c].copy_from_slice(&start[q..q + d.c]);
                    }
                    for &(p, q) in &pairs {
                        px[q..q + d.c].copy_from_slice(&start[p..p + d.c]);
                    }
                }
                GlassMode::Exact => {
                    for (r, &y) in rows.iter().enumerate() {
                        for (s, &x) in cols.iter().enumerate() {
                            let (ny, nx) = offset(r * cols.len() + s, i, y, x);
                            let (p, q) = (at(y, x), at(ny, nx));
                            for ch in 0..d.c {
                                px.swap(p + ch, q + ch);
                            }
                        }
                    }
                }
            }
        }
    }
}

impl Pixels for Glass {
    /// The `(dy, dx)` offsets, `iterations` pairs per swapped pixel in albumentations' order.
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, layout: &Spatial) -> Result<Vec<f64>> {
        let span = |n: i64| (n - 2 * self.delta).max(0) as usize;
        let n = span(layout.height) * span(layout.width) * self.iterations * 2;
        Ok((0..n)
            .map(|_| rng.random_range(-self.delta..self.delta) as f64)
            .collect())
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let (plane, d) = Plane::of(x, layout, "GlassBlur")?;
        let mut once = plane.blurred(d, 0, self.sigma);
        match &mut once {
            Plane::U8(v) => self.swap(v, d, params),
            Plane::F32(v) => self.swap(v, d, params),
            Plane::F64(v) => self.swap(v, d, params),
        }
        once.blurred(d, 0, self.sigma).to_tensor(x)
    }
}

photometric!(
    GlassBlur,
    GlassBlurConfig,
    Glass,
    "Gaussian blur, random swaps of nearby pixels, and a second blur (frosted glass)."
);
