//! `MotionBlur` after albumentations 2.0.8: a line of random length (the odd kernel size),
//! angle, direction bias and offset, rasterised into a `k × k` kernel exactly as its
//! `create_motion_kernel` does (points along `linspace`, rounded half to even), then
//! averaged over like `cv2.filter2D` (border reflect-101).

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{Error, Result};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::blur::pad_axis;
use crate::color::{restore, uniform, values, Pixels, ToUint8};
use crate::layout::Spatial;
use crate::{Bits, BorderMode};

fn half() -> f64 {
    0.5
}

/// `MotionBlur` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct MotionBlurConfig {
    /// Odd kernel size range: `l` for `[3, l]`, or `[lo, hi]` (default [3, 7]); values below
    /// 3 become 3 and even ones the next odd number, as albumentations does.
    #[serde(default = "sizes")]
    pub blur_limit: Bits,
    /// Whether the line may be shifted off the kernel centre (default true).
    #[serde(default = "yes")]
    pub allow_shifted: bool,
    /// Line angle range in degrees, counter-clockwise, within [0, 360] (default [0, 360]).
    #[serde(default = "angles")]
    pub angle_range: [f64; 2],
    /// Bias range in [-1, 1]: -1 draws the line backward only, 0 symmetric, 1 forward only
    /// (default [-1, 1]).
    #[serde(default = "directions")]
    pub direction_range: [f64; 2],
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
fn yes() -> bool {
    true
}
fn angles() -> [f64; 2] {
    [0.0, 360.0]
}
fn directions() -> [f64; 2] {
    [-1.0, 1.0]
}

/// Draws a line kernel and averages along it.
pub(crate) struct Motion {
    sizes: [i64; 2],
    shifted: bool,
    angles: [f64; 2],
    directions: [f64; 2],
}

fn ordered(field: &str, [lo, hi]: [f64; 2], min: f64, max: f64) -> Result<[f64; 2]> {
    if min <= lo && lo <= hi && hi <= max {
        Ok([lo, hi])
    } else {
        Err(Error::config(
            field,
            format!("needs {min} <= lo <= hi <= {max}, got [{lo}, {hi}]"),
        ))
    }
}

impl TryFrom<MotionBlurConfig> for Motion {
    type Error = Error;
    fn try_from(c: MotionBlurConfig) -> Result<Self> {
        let [lo, hi] = crate::blur::odd_blur_limit(c.blur_limit)?;
        Ok(Motion {
            sizes: [lo, hi],
            shifted: c.allow_shifted,
            angles: ordered("angle_range", c.angle_range, 0.0, 360.0)?,
            directions: ordered("direction_range", c.direction_range, -1.0, 1.0)?,
        })
    }
}

/// albumentations' `create_motion_kernel`, normalised: row-major `size × size` float32
/// weights. `shift` holds the two `uniform(-1, 1)` draws of a shifted line.
pub(crate) fn motion_kernel(size: i64, angle: f64, direction: f64, shift: [f64; 2]) -> Vec<f32> {
    let direction = direction.clamp(-1.0, 1.0);
    let center = (size / 2) as f64;
    let radians = angle.to_radians();
    let (dx, dy) = (radians.cos(), radians.sin());
    let half = (size / 2) as f64;
    let (start, end) = if direction < 0.0 {
        (-half, half * (1.0 - direction.abs()))
    } else if direction > 0.0 {
        (-half * (1.0 - direction), half)
    } else {
        (-half, half)
    };
    // numpy's linspace: i · step + start, with the last point exactly `end`.
    let step = (end - start) / (size - 1) as f64;
    let t = |i: i64| {
        if i == size - 1 {
            end
        } else {
            i as f64 * step + start
        }
    };
    let (shift_x, shift_y) = (shift[0] * half / 2.0, shift[1] * half / 2.0);
    let cell = |v: f64| (v.round_ties_even().clamp(0.0, (size - 1) as f64)) as usize;
    let mut hits = vec![false; (size * size) as usize];
    for i in 0..size {
        let x = cell(center + dx * t(i) + shift_x);
        let y = cell(center + dy * t(i) + shift_y);
        hits[y * size as usize + x] = true;
    }
    let count = hits.iter().filter(|&&h| h).count() as f32;
    hits.iter()
        .map(|&h| if h { 1.0 / count } else { 0.0 })
        .collect()
}

impl Pixels for Motion {
    /// `[size, angle, direction, shift x, shift y]`, drawn in albumentations' order; the
    /// shifts are 0 without `allow_shifted`.
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        let steps = (self.sizes[1] - self.sizes[0]) / 2;
        let size = self.sizes[0] + 2 * rng.random_range(0..=steps);
        let angle = uniform(rng, self.angles);
        let direction = uniform(rng, self.directions);
        let (sx, sy) = if self.shifted {
            (uniform(rng, [-1.0, 1.0]), uniform(rng, [-1.0, 1.0]))
        } else {
            (0.0, 0.0)
        };
        Ok(vec![size as f64, angle, direction, sx, sy])
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let size = params[0] as i64;
        let kernel = motion_kernel(size, params[1], params[2], [params[3], params[4]]);
        let out = filter2d(&values(x)?, layout, &kernel, size)?;
        restore(&out, x.kind(), ToUint8::Round)
    }
}

/// `cv2.filter2D` of `v` (float, in `layout`) with the row-major `size × size` `kernel`
/// centred on each pixel, border reflect-101, summed in `v`'s kind; zero taps are skipped,
/// which sparse kernels (a line, a disc) make cheap.
pub(crate) fn filter2d(v: &Tensor, layout: &Spatial, kernel: &[f32], size: i64) -> Result<Tensor> {
    let (h, w, r) = (layout.h_axis, layout.w_axis(), size / 2);
    let padded = pad_axis(
        &pad_axis(v, h, r, BorderMode::Reflect101)?,
        w,
        r,
        BorderMode::Reflect101,
    )?;
    let mut out = v.f_zeros_like()?;
    for (i, &weight) in kernel.iter().enumerate() {
        if weight == 0.0 {
            continue;
        }
        let (dy, dx) = (i as i64 / size, i as i64 % size);
        let window = padded
            .f_narrow(h, dy, layout.height)?
            .f_narrow(w, dx, layout.width)?;
        out = out.f_add(&window.f_mul_scalar(f64::from(weight))?)?;
    }
    Ok(out)
}

photometric!(
    MotionBlur,
    MotionBlurConfig,
    Motion,
    "Average along a random line (camera or object motion)."
);
