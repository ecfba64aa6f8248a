//! `AutoContrast`: stretches each channel's intensity range to the full one, as albumentations
//! 2.0.8's `auto_contrast` does (uint8; floats go through uint8): the channel's histogram is
//! `cv2.calcHist` over `[0, 255]` — whose upper bound is exclusive, so value 255 is not
//! counted — its bounds are the first and last occupied levels (or where `cutoff` percent of
//! the pixels lie beyond), and the table is the histogram's normalised CDF between them
//! (`method = "cdf"`) or a linear ramp (`"pil"`, PIL's `ImageOps.autocontrast`).

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{Error, Result};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::bytes::{bytes_of, tensor_of};
use crate::color::Pixels;
use crate::color_ops::via_uint8;
use crate::layout::Spatial;

/// `AutoContrast` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct AutoContrastConfig {
    /// Percent of the pixels cut from each end of the histogram (default 0).
    #[serde(default)]
    pub cutoff: f64,
    /// An intensity left out of the histogram and kept as it is (e.g. 255 for a background).
    #[serde(default)]
    pub ignore: Option<u8>,
    /// `"cdf"` (default) or `"pil"`.
    #[serde(default = "cdf")]
    pub method: String,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn cdf() -> String {
    "cdf".to_owned()
}

fn half() -> f64 {
    0.5
}

/// The op's settings.
pub(crate) struct ContrastStretch {
    cutoff: f64,
    ignore: Option<u8>,
    pil: bool,
}

impl TryFrom<AutoContrastConfig> for ContrastStretch {
    type Error = Error;
    fn try_from(c: AutoContrastConfig) -> Result<Self> {
        if !(0.0..=100.0).contains(&c.cutoff) {
            return Err(Error::config("cutoff", "must be within [0, 100]"));
        }
        let pil = match c.method.as_str() {
            "cdf" => false,
            "pil" => true,
            other => {
                return Err(Error::config(
                    "method",
                    format!("expected \"cdf\" or \"pil\", got {other:?}"),
                ))
            }
        };
        Ok(Self {
            cutoff: c.cutoff,
            ignore: c.ignore,
            pil,
        })
    }
}

/// albumentations' `get_histogram_bounds`.
fn bounds(hist: &[f32; 256], cutoff: f64) -> (usize, usize) {
    if cutoff == 0.0 {
        let mut occupied = (0..256usize).filter(|&i| hist[i] != 0.0);
        let Some(first) = occupied.next() else {
            return (0, 0);
        };
        return (first, occupied.next_back().unwrap_or(first));
    }
    let total: f64 = hist.iter().map(|&h| f64::from(h)).sum();
    if total == 0.0 {
        return (0, 0);
    }
    let cut = total * cutoff / 100.0;
    if hist.iter().all(|&h| h == hist[0]) {
        let low = (256.0 * cutoff / 100.0) as usize;
        return (low, 255 - low);
    }
    let mut sum = 0.0;
    let mut low = 0;
    for (i, &h) in hist.iter().enumerate() {
        sum += f64::from(h);
        if sum >= cut {
            low = i + 1;
            break;
        }
    }
    let low = low.min(255);
    let mut sum = 0.0;
    let mut high = 255;
    for i in (0..256).rev() {
        sum += f64::from(hist[i]);
        if sum >= cut {
            high = i;
            break;
        }
    }
    if low > high {
        return (127, 127);
    }
    (low, high)
}

/// albumentations' `create_contrast_lut` for `low < high`.
fn table(hist: &[f32; 256], low: usize, high: usize, pil: bool) -> [u8; 256] {
    let mut lut = [0u8; 256];
    if pil {
        let scale = 255.0 / (high - low) as f64;
        for (i, entry) in lut.iter_mut().enumerate() {
            let ramp = ((i as f64 - low as f64) * scale).round_ties_even();
            *entry = ramp.clamp(0.0, 255.0) as u8;
        }
        lut[..low].fill(0);
    } else {
        // A float32 cumulative sum and normalisation, as numpy computes it on calcHist's
        // float32 histogram.
        let mut cdf = Vec::with_capacity(high - low + 1);
        let mut sum = 0f32;
        for &h in &hist[low..=high] {
            sum += h;
            cdf.push(sum);
        }
        let (first, last) = (cdf[0], sum);
        if last == 0.0 {
            return std::array::from_fn(|i| i as u8);
        }
        for (entry, &c) in lut[low..=high].iter_mut().zip(&cdf) {
            let value = (c - first) * 255.0 / (last - first);
            *entry = value.round_ties_even().clamp(0.0, 255.0) as u8;
        }
    }
    lut[high + 1..].fill(255);
    lut
}

impl ContrastStretch {
    /// Stretches each of the `channels` interleaved channels of `data` in place.
    fn stretch(&self, data: &mut [u8], channels: usize) {
        for channel in 0..channels {
            let mut hist = [0f32; 256];
            for &v in data.iter().skip(channel).step_by(channels) {
                if v != 255 && Some(v) != self.ignore {
                    hist[usize::from(v)] += 1.0;
                }
            }
            let (low, high) = bounds(&hist, self.cutoff);
            if high <= low {
                continue;
            }
            let mut lut = table(&hist, low, high, self.pil);
            if let Some(kept) = self.ignore {
                lut[usize::from(kept)] = kept;
            }
            for v in data.iter_mut().skip(channel).step_by(channels) {
                *v = lut[usize::from(*v)];
            }
        }
    }
}

impl Pixels for ContrastStretch {
    fn draw(&self, _: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        Ok(Vec::new())
    }

    fn apply(&self, _: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let channels = if layout.plain {
            1
        } else {
            x.size()[layout.w_axis() as usize + 1] as usize
        };
        via_uint8(x, |b| {
            let cpu = b.f_to_device(fe_plugin_api::tch::Device::Cpu)?;
            let Some((mut data, shape)) = bytes_of(&cpu)? else {
                return Err(Error::msg("AutoContrast: no uint8 pixels"));
            };
            self.stretch(&mut data, channels);
            Ok(tensor_of(&data, &shape)?.f_to_device(b.device())?)
        })
    }
}

photometric!(
    AutoContrast,
    AutoContrastConfig,
    ContrastStretch,
    "Stretches each channel's intensity range to the full one."
);
