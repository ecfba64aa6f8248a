//! `CLAHE` after albumentations 2.0.8: `cv2.createCLAHE(clip, grid).apply` on gray images,
//! and on the L channel of OpenCV's uint8 Lab for RGB ones, through uint8 (`uint8_io`).
//! The algorithm is OpenCV's: per-tile histograms clipped at `clip · tile area / 256` with
//! the excess spread evenly, cumulative lookup tables, and bilinear interpolation between
//! the four nearest tiles' tables, in float32 as OpenCV computes it.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{Error, Result};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::{uniform, Pixels};
use crate::color_ops::via_uint8;
use crate::lab::{lab_to_rgb, rgb_to_lab};
use crate::layout::Spatial;
use crate::Span;

fn half() -> f64 {
    0.5
}

/// `CLAHE` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ClaheConfig {
    /// Clip limit: `c` for `[1, c]`, or `[lo, hi]`, lo at least 1 (default 4).
    #[serde(default = "four")]
    pub clip_limit: Span,
    /// Tiles `[across, down]`, as OpenCV's `tileGridSize` (default [8, 8]).
    #[serde(default = "eight")]
    pub tile_grid_size: [i64; 2],
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn four() -> Span {
    Span::Value(4.0)
}
fn eight() -> [i64; 2] {
    [8, 8]
}

/// Draws a clip limit and equalises.
pub(crate) struct Clahe {
    clips: [f64; 2],
    tiles: [usize; 2],
}

impl TryFrom<ClaheConfig> for Clahe {
    type Error = Error;
    fn try_from(c: ClaheConfig) -> Result<Self> {
        let clips = match c.clip_limit {
            Span::Value(v) => [1.0, v],
            Span::Range(r) => r,
        };
        if !(1.0 <= clips[0] && clips[0] <= clips[1] && clips[1].is_finite()) {
            return Err(Error::config(
                "clip_limit",
                format!("needs 1 <= lo <= hi, got {clips:?}"),
            ));
        }
        let [x, y] = c.tile_grid_size;
        if x < 1 || y < 1 {
            return Err(Error::config(
                "tile_grid_size",
                format!("needs at least 1 tile each way, got [{x}, {y}]"),
            ));
        }
        Ok(Clahe {
            clips,
            tiles: [x as usize, y as usize],
        })
    }
}

/// OpenCV's `BORDER_REFLECT_101` index into `0..n` (`borderInterpolate`), for indices
/// past the end; reflections repeat while they overshoot.
fn reflect_101(i: usize, n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let (mut i, n) = (i as i64, n as i64);
    while !(0..n).contains(&i) {
        i = if i < 0 { -i } else { 2 * (n - 1) - i };
    }
    i as usize
}

/// `cv2.createCLAHE(clip, (tiles_x, tiles_y)).apply` of a `height × width` gray image.
pub(crate) fn clahe_gray(
    src: &[u8],
    height: usize,
    width: usize,
    clip: f64,
    tiles: [usize; 2],
) -> Vec<u8> {
    let [tiles_x, tiles_y] = tiles;
    // Sizes not divisible by the grid get a reflected border at the bottom and right, of
    // `tiles - size % tiles` on both axes (a whole extra tile where one was divisible).
    let (ext_h, ext_w) = if height % tiles_y == 0 && width % tiles_x == 0 {
        (height, width)
    } else {
        (
            height + tiles_y - height % tiles_y,
            width + tiles_x - width % tiles_x,
        )
    };
    let (tile_h, tile_w) = (ext_h / tiles_y, ext_w / tiles_x);
    let area = tile_h * tile_w;
    let limit = ((clip * area as f64 / 256.0) as i64).max(1);
    let lut_scale = 255.0f32 / area as f32;
    let mut luts = vec![[0u8; 256]; tiles_x * tiles_y];
    for (k, lut) in luts.iter_mut().enumerate() {
        let (ty, tx) = (k / tiles_x, k % tiles_x);
        let mut hist = [0i64; 256];
        for y in ty * tile_h..(ty + 1) * tile_h {
            let row = reflect_101(y, height) * width;
            for x in tx * tile_w..(tx + 1) * tile_w {
                hist[src[row + reflect_101(x, width)] as usize] += 1;
            }
        }
        let mut clipped = 0;
        for h in hist.iter_mut() {
            if *h > limit {
                clipped += *h - limit;
                *h = limit;
            }
        }
        let (batch, mut residual) = (clipped / 256, clipped % 256);
        for h in hist.iter_mut() {
            *h += batch;
        }
        if residual != 0 {
            let step = (256 / residual).max(1) as usize;
            let mut i = 0;
            while i < 256 && residual > 0 {
                hist[i] += 1;
                i += step;
                residual -= 1;
            }
        }
        let mut sum = 0;
        for (entry, h) in lut.iter_mut().zip(hist) {
            sum += h;
            *entry = (sum as f32 * lut_scale).round_ties_even().clamp(0.0, 255.0) as u8;
        }
    }
    // Where each column and row falls between tile centres, in float32 as OpenCV does.
    let between = |i: usize, inverse: f32, tiles: usize| {
        let f = i as f32 * inverse - 0.5;
        let lo = f.floor();
        let weight = f - lo;
        let lo = lo as i64;
        (
            lo.max(0) as usize,
            ((lo + 1) as usize).min(tiles - 1),
            weight,
        )
    };
    let columns: Vec<(usize, usize, f32)> = (0..width)
        .map(|x| between(x, 1.0 / tile_w as f32, tiles_x))
        .collect();
    let mut dst = vec![0u8; height * width];
    for y in 0..height {
        let (ty1, ty2, ya) = between(y, 1.0 / tile_h as f32, tiles_y);
        let (top, bottom) = (ty1 * tiles_x, ty2 * tiles_x);
        for (x, &(tx1, tx2, xa)) in columns.iter().enumerate() {
            let v = src[y * width + x] as usize;
            let at = |tile: usize| f32::from(luts[tile][v]);
            let res = (at(top + tx1) * (1.0 - xa) + at(top + tx2) * xa) * (1.0 - ya)
                + (at(bottom + tx1) * (1.0 - xa) + at(bottom + tx2) * xa) * ya;
            dst[y * width + x] = res.round_ties_even().clamp(0.0, 255.0) as u8;
        }
    }
    dst
}

impl Pixels for Clahe {
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        Ok(vec![uniform(rng, self.clips)])
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let (h, w) = (layout.height as usize, layout.width as usize);
        let channels = if layout.plain { 1 } else { x.size()[2] };
        if channels != 1 && channels != 3 {
            return Err(Error::msg(format!(
                "CLAHE takes gray or RGB images (1 or 3 channels), got shape {:?}",
                x.size()
            )));
        }
        via_uint8(x, |b| {
            let pixels = Vec::<u8>::try_from(b.f_contiguous()?.f_flatten(0, -1)?)?;
            let out = if channels == 1 {
                clahe_gray(&pixels, h, w, params[0], self.tiles)
            } else {
                let mut lab = rgb_to_lab(&pixels);
                let l: Vec<u8> = lab.iter().step_by(3).copied().collect();
                let equalised = clahe_gray(&l, h, w, params[0], self.tiles);
                for (px, v) in lab.chunks_exact_mut(3).zip(equalised) {
                    px[0] = v;
                }
                lab_to_rgb(&lab)
            };
            Ok(Tensor::f_from_slice(&out)?.f_reshape(b.size())?)
        })
    }
}

photometric!(
    CLAHE,
    ClaheConfig,
    Clahe,
    "Contrast-limited adaptive histogram equalisation (on Lab's L for RGB)."
);
