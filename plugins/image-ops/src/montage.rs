//! The montage `ImageSaver` draws: one row per sample, one column per key, each value drawn
//! by its shape (the plugin README's table):
//!
//! * one number → a bar [`BAR_W`] × [`BAR_H`]: an integer (a class) fills it in the class's
//!   colour; a float draws a white bar of length `clamp(v, 0, 1)` (a probability);
//! * a vector `[C]` (class scores) → the bar of its argmax's colour, as long as its maximum;
//! * `[H, W]` → gray (floats, uint8), or class colours for other integer kinds (label masks);
//! * `[H, W, C]` with `C` ∈ {1, 3, 4}, or `[C, H, W]` (what networks take) → the image (alpha
//!   dropped); any other `[K, H, W]` → masks, each pixel in the colour of its argmax channel.
//!
//! Floats lying in [0, 1] are scaled by 255; other floats are stretched per cell from their
//! minimum to their maximum. Cells sit at the top-left of their slot; slots are separated by
//! [`PAD`] pixels of [`BACKGROUND`].

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{Error, Result};

/// Pixels between cells and around the montage.
pub const PAD: usize = 2;
/// The montage's background colour.
pub const BACKGROUND: [u8; 3] = [40, 40, 40];
/// Size of a number's bar.
pub const BAR_W: usize = 48;
/// Size of a number's bar.
pub const BAR_H: usize = 12;
/// Matplotlib's tab10: class `k` is drawn in `PALETTE[k % 10]`.
pub const PALETTE: [[u8; 3]; 10] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
    [188, 189, 34],
    [23, 190, 207],
];

/// An RGB picture, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
    /// `height × width × 3` bytes.
    pub rgb: Vec<u8>,
}

impl Cell {
    fn filled(height: usize, width: usize, color: [u8; 3]) -> Self {
        Self {
            height,
            width,
            rgb: color.repeat(height * width),
        }
    }

    /// Nearest-neighbour enlargement by an integer factor.
    pub fn scaled(self, factor: usize) -> Self {
        if factor <= 1 {
            return self;
        }
        let (height, width) = (self.height * factor, self.width * factor);
        let mut rgb = Vec::with_capacity(height * width * 3);
        for y in 0..height {
            for x in 0..width {
                let at = ((y / factor) * self.width + x / factor) * 3;
                rgb.extend_from_slice(&self.rgb[at..at + 3]);
            }
        }
        Self { height, width, rgb }
    }
}

fn palette(class: i64) -> [u8; 3] {
    PALETTE[class.rem_euclid(PALETTE.len() as i64) as usize]
}

fn is_integral(t: &Tensor) -> bool {
    !matches!(
        t.kind(),
        Kind::Float | Kind::Double | Kind::Half | Kind::BFloat16
    )
}

/// Floats to 0..=255 (see the module documentation); integers clamped.
fn to_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let flat = t.f_to_kind(Kind::Double)?.f_reshape([-1])?;
    let values = Vec::<f64>::try_from(&flat)?;
    if is_integral(t) {
        return Ok(values.iter().map(|v| v.clamp(0.0, 255.0) as u8).collect());
    }
    let (lo, hi) = values
        .iter()
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    let (offset, scale) = if lo >= 0.0 && hi <= 1.0 {
        (0.0, 255.0)
    } else if hi > lo {
        (lo, 255.0 / (hi - lo))
    } else {
        (lo, 0.0)
    };
    Ok(values
        .iter()
        .map(|v| ((v - offset) * scale).round().clamp(0.0, 255.0) as u8)
        .collect())
}

fn bar(color: [u8; 3], fraction: f64) -> Cell {
    let mut cell = Cell::filled(BAR_H, BAR_W, BACKGROUND);
    let fraction = if fraction.is_nan() { 0.0 } else { fraction };
    let length = (fraction.clamp(0.0, 1.0) * BAR_W as f64).round() as usize;
    for y in 0..BAR_H {
        for x in 0..length {
            let at = (y * BAR_W + x) * 3;
            cell.rgb[at..at + 3].copy_from_slice(&color);
        }
    }
    cell
}

fn class_map(classes: &Tensor, height: usize, width: usize) -> Result<Cell> {
    let classes = Vec::<i64>::try_from(&classes.f_reshape([-1])?)?;
    let rgb = classes.iter().flat_map(|&c| palette(c)).collect();
    Ok(Cell { height, width, rgb })
}

/// Draws one sample's value of `key` (the batch dimension removed).
pub fn cell(key: &str, value: &Tensor) -> Result<Cell> {
    let value = value.f_detach()?.f_to_device(Device::Cpu)?;
    let size = value.size();
    let dims = |d: &[i64]| d.iter().map(|&v| v as usize).collect::<Vec<_>>();
    if value.numel() == 1 {
        let v = value.f_reshape([-1])?.f_double_value(&[0])?;
        return Ok(if is_integral(&value) {
            bar(palette(v as i64), 1.0)
        } else {
            bar([255, 255, 255], v)
        });
    }
    match dims(&size).as_slice() {
        [_] => {
            let class = value.f_argmax(0, false)?.f_int64_value(&[])?;
            let top = value.f_max()?.f_to_kind(Kind::Double)?.f_double_value(&[])?;
            Ok(bar(palette(class), if is_integral(&value) { 1.0 } else { top }))
        }
        &[h, w] if is_integral(&value) && value.kind() != Kind::Uint8 => {
            class_map(&value, h, w)
        }
        &[h, w] => gray(&value, h, w),
        &[h, w, c] if matches!(c, 1 | 3 | 4) => color(&value, h, w, c),
        &[c, h, w] if matches!(c, 1 | 3 | 4) => color(&value.f_permute([1, 2, 0])?, h, w, c),
        &[_, h, w] => class_map(&value.f_argmax(0, false)?, h, w),
        _ => Err(Error::msg(format!(
            "ImageSaver: cannot draw `{key}` of shape {size:?} per sample (a number, [C], [H, W], [H, W, C] or [C, H, W])"
        ))),
    }
}

fn gray(value: &Tensor, height: usize, width: usize) -> Result<Cell> {
    let rgb = to_bytes(value)?.iter().flat_map(|&v| [v, v, v]).collect();
    Ok(Cell { height, width, rgb })
}

fn color(hwc: &Tensor, height: usize, width: usize, channels: usize) -> Result<Cell> {
    let bytes = to_bytes(&hwc.f_contiguous()?)?;
    let rgb = bytes
        .chunks(channels)
        .flat_map(|px| match channels {
            1 => [px[0], px[0], px[0]],
            _ => [px[0], px[1], px[2]],
        })
        .collect();
    Ok(Cell { height, width, rgb })
}

/// Lays `rows` of cells out on a grid (see the module documentation): a `[H, W, 3]` picture.
pub fn montage(rows: &[Vec<Cell>]) -> Cell {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.width)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let heights: Vec<usize> = rows
        .iter()
        .map(|r| r.iter().map(|cell| cell.height).max().unwrap_or(0))
        .collect();
    let width = PAD + widths.iter().map(|w| w + PAD).sum::<usize>();
    let height = PAD + heights.iter().map(|h| h + PAD).sum::<usize>();
    let mut out = Cell::filled(height, width, BACKGROUND);
    let mut top = PAD;
    for (row, row_height) in rows.iter().zip(&heights) {
        let mut left = PAD;
        for (cell, column_width) in row.iter().zip(&widths) {
            for y in 0..cell.height {
                let from = y * cell.width * 3;
                let to = ((top + y) * width + left) * 3;
                out.rgb[to..to + cell.width * 3]
                    .copy_from_slice(&cell.rgb[from..from + cell.width * 3]);
            }
            left += column_width + PAD;
        }
        top += row_height + PAD;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_draw_as_documented() {
        let class = cell("y", &Tensor::from_slice(&[3i64])).unwrap();
        assert_eq!((class.height, class.width), (BAR_H, BAR_W));
        assert_eq!(&class.rgb[..3], &PALETTE[3]);
        let prob = cell("p", &Tensor::from_slice(&[0.5f32])).unwrap();
        assert_eq!(
            &prob.rgb[(BAR_W / 2 - 1) * 3..BAR_W / 2 * 3],
            &[255, 255, 255]
        );
        assert_eq!(&prob.rgb[(BAR_W / 2) * 3..(BAR_W / 2 + 1) * 3], &BACKGROUND);
        let chw = Tensor::from_slice(&[0.0f32, 1.0, 0.5, 0.25, 1.0, 0.0]).reshape([3, 1, 2]);
        let image = cell("x", &chw).unwrap();
        assert_eq!((image.height, image.width), (1, 2));
        assert_eq!(image.rgb, vec![0, 128, 255, 255, 64, 0]);
        let mask = cell("m", &Tensor::from_slice(&[0i64, 1]).reshape([1, 2])).unwrap();
        assert_eq!(mask.rgb, [PALETTE[0], PALETTE[1]].concat());
        let wide = cell("z", &Tensor::from_slice(&[-1.0f32, 3.0]).reshape([1, 2])).unwrap();
        assert_eq!(wide.rgb, vec![0, 0, 0, 255, 255, 255]);
        let bad = cell(
            "q",
            &Tensor::zeros([2, 2, 2, 2], (Kind::Float, Device::Cpu)),
        );
        assert!(bad.unwrap_err().to_string().contains("`q`"));
    }

    #[test]
    fn the_grid_places_cells_at_the_top_left_of_their_slots() {
        let red = Cell::filled(3, 2, [255, 0, 0]);
        let blue = Cell::filled(1, 4, [0, 0, 255]);
        let picture = montage(&[vec![red.clone(), blue.clone()], vec![blue, red]]);
        // Columns 4 and 4 wide, rows 3 and 3 high, PAD around and between.
        assert_eq!(
            (picture.width, picture.height),
            (2 + 4 + 2 + 4 + 2, 2 + 3 + 2 + 3 + 2)
        );
        let at = |x: usize, y: usize| &picture.rgb[(y * picture.width + x) * 3..][..3];
        assert_eq!(at(2, 2), [255, 0, 0]);
        assert_eq!(at(4, 2), BACKGROUND);
        assert_eq!(at(8, 2), [0, 0, 255]);
        assert_eq!(at(8, 3), BACKGROUND);
        assert_eq!(at(2, 7), [0, 0, 255]);
        assert_eq!(at(8, 9), [255, 0, 0]);
    }

    #[test]
    fn scaling_repeats_pixels() {
        let cell = Cell {
            height: 1,
            width: 2,
            rgb: vec![1, 2, 3, 4, 5, 6],
        };
        let big = cell.scaled(2);
        assert_eq!((big.height, big.width), (2, 4));
        assert_eq!(big.rgb[..12], [1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6]);
        assert_eq!(big.rgb[12..], big.rgb[..12]);
    }
}
