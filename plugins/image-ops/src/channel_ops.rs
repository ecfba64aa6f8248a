//! Photometric ops that mix or pick channels: `ToGray`, `ToSepia`, `ChannelShuffle`,
//! `ChannelDropout`, `RGBShift`.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{Error, Result};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::{add, channels, max_value, range, restore, uniform, values, Pixels, ToUint8};
use crate::color_ops::PlainConfig;
use crate::layout::Spatial;
use crate::Limit;

fn half() -> f64 {
    0.5
}

/// `y[..., o] = Σ_i m[o][i] · x[..., i]` for a 3-channel image, rounded and saturated as
/// `cv2.transform` (uint8) or clipped to [0, 1] (floats).
fn mix(x: &Tensor, layout: &Spatial, m: &[[f64; 3]], what: &str) -> Result<Tensor> {
    let (axis, c) = channels(layout, x, what)?;
    if c != 3 {
        return Err(Error::msg(format!(
            "{what} needs 3 (RGB) channels, got {c}"
        )));
    }
    let rows: Vec<f64> = m.iter().flatten().copied().collect();
    let matrix = Tensor::f_from_slice(&rows)?
        .f_view([m.len() as i64, 3])?
        .f_to_kind(Kind::Float)?
        .f_to_device(x.device())?;
    let v = values(x)?.f_to_kind(Kind::Float)?.f_movedim(axis, -1)?;
    let y = v
        .f_matmul(&matrix.f_transpose(0, 1)?)?
        .f_movedim(-1, axis)?;
    restore(&y, x.kind(), ToUint8::Round)
}

/// Luma to 3 channels, `cv2.COLOR_RGB2GRAY` replicated.
pub(crate) struct GrayMap;

impl TryFrom<PlainConfig> for GrayMap {
    type Error = Error;
    fn try_from(_: PlainConfig) -> Result<Self> {
        Ok(GrayMap)
    }
}

impl Pixels for GrayMap {
    fn draw(&self, _: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        Ok(Vec::new())
    }

    fn apply(&self, _: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        if x.kind() == Kind::Uint8 {
            // OpenCV's fixed point: (4899 R + 9617 G + 1868 B + 2^13) >> 14.
            let (axis, c) = channels(layout, x, "ToGray")?;
            if c != 3 {
                return Err(Error::msg(format!(
                    "ToGray needs 3 (RGB) channels, got {c}"
                )));
            }
            if axis as usize + 1 == x.dim() {
                if let Some((mut data, shape)) = crate::bytes::bytes_of(x)? {
                    for pixel in data.chunks_exact_mut(3) {
                        let gray = crate::bytes::luma(pixel[0], pixel[1], pixel[2]);
                        pixel.fill(gray);
                    }
                    return crate::bytes::tensor_of(&data, &shape);
                }
            }
            let v = x.f_to_kind(Kind::Int64)?;
            let luma = v
                .f_select(axis, 0)?
                .f_mul_scalar(4899)?
                .f_add(&v.f_select(axis, 1)?.f_mul_scalar(9617)?)?
                .f_add(&v.f_select(axis, 2)?.f_mul_scalar(1868)?)?
                .f_add_scalar(1 << 13)?
                .f_floor_divide_scalar(1 << 14)?
                .f_to_kind(Kind::Uint8)?;
            return Ok(Tensor::f_stack(&[&luma, &luma, &luma], axis)?);
        }
        let w = [0.299, 0.587, 0.114];
        mix(x, layout, &[w, w, w], "ToGray")
    }
}

photometric!(
    ToGray,
    PlainConfig,
    GrayMap,
    "RGB to gray, kept as 3 channels."
);

/// The sepia tone matrix.
pub(crate) struct SepiaMap;

impl TryFrom<PlainConfig> for SepiaMap {
    type Error = Error;
    fn try_from(_: PlainConfig) -> Result<Self> {
        Ok(SepiaMap)
    }
}

impl Pixels for SepiaMap {
    fn draw(&self, _: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        Ok(Vec::new())
    }

    fn apply(&self, _: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let m = [
            [0.393, 0.769, 0.189],
            [0.349, 0.686, 0.168],
            [0.272, 0.534, 0.131],
        ];
        mix(x, layout, &m, "ToSepia")
    }
}

photometric!(ToSepia, PlainConfig, SepiaMap, "Sepia tone.");

/// Channels in a random order (params: the source channel of each output channel).
pub(crate) struct ShuffleMap;

impl TryFrom<PlainConfig> for ShuffleMap {
    type Error = Error;
    fn try_from(_: PlainConfig) -> Result<Self> {
        Ok(ShuffleMap)
    }
}

impl Pixels for ShuffleMap {
    fn draw(&self, rng: &mut ChaCha8Rng, image: &Tensor, layout: &Spatial) -> Result<Vec<f64>> {
        let (_, c) = channels(layout, image, "ChannelShuffle")?;
        let mut order: Vec<f64> = (0..c).map(|i| i as f64).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.random_range(0..=i));
        }
        Ok(order)
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let (axis, _) = channels(layout, x, "ChannelShuffle")?;
        let order: Vec<i64> = params.iter().map(|&c| c as i64).collect();
        let index = Tensor::f_from_slice(&order)?.f_to_device(x.device())?;
        Ok(x.f_index_select(axis, &index)?)
    }
}

photometric!(
    ChannelShuffle,
    PlainConfig,
    ShuffleMap,
    "Permutes the channels randomly."
);

/// `ChannelDropout` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ChannelDropoutConfig {
    /// Range of the number of channels dropped, both included (default [1, 1]).
    #[serde(default = "one_one")]
    pub channel_drop_range: [i64; 2],
    /// Value the dropped channels take (default 0).
    #[serde(default)]
    pub fill_value: f64,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn one_one() -> [i64; 2] {
    [1, 1]
}

/// Sets random channels to `fill` (params: the channels).
pub(crate) struct DropMap {
    count: [i64; 2],
    fill: f64,
}

impl TryFrom<ChannelDropoutConfig> for DropMap {
    type Error = Error;
    fn try_from(c: ChannelDropoutConfig) -> Result<Self> {
        let [lo, hi] = c.channel_drop_range;
        if 1 <= lo && lo <= hi {
            Ok(DropMap {
                count: c.channel_drop_range,
                fill: c.fill_value,
            })
        } else {
            Err(Error::config(
                "channel_drop_range",
                format!("needs 1 <= lo <= hi, got [{lo}, {hi}]"),
            ))
        }
    }
}

impl Pixels for DropMap {
    fn draw(&self, rng: &mut ChaCha8Rng, image: &Tensor, layout: &Spatial) -> Result<Vec<f64>> {
        let (_, c) = channels(layout, image, "ChannelDropout")?;
        if self.count[1] >= c {
            return Err(Error::msg(format!(
                "ChannelDropout: channel_drop_range up to {} would drop all {c} channels",
                self.count[1]
            )));
        }
        let n = rng.random_range(self.count[0]..=self.count[1]) as usize;
        let mut pool: Vec<f64> = (0..c).map(|i| i as f64).collect();
        for i in 0..n {
            let j = rng.random_range(i..pool.len());
            pool.swap(i, j);
        }
        pool.truncate(n);
        Ok(pool)
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let (axis, _) = channels(layout, x, "ChannelDropout")?;
        let mut out = x.f_zeros_like()?;
        out.f_copy_(x)?;
        for &c in params {
            let _dropped = out.f_narrow(axis, c as i64, 1)?.f_fill_(self.fill)?;
        }
        Ok(out)
    }
}

photometric!(
    ChannelDropout,
    ChannelDropoutConfig,
    DropMap,
    "Fills random channels with a constant."
);

/// `RGBShift` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct RgbShiftConfig {
    /// Red shift range in uint8 units (float images: /255); `l` means [-l, l] (default 20).
    #[serde(default = "twenty")]
    pub r_shift_limit: Limit,
    /// Green shift range (default 20).
    #[serde(default = "twenty")]
    pub g_shift_limit: Limit,
    /// Blue shift range (default 20).
    #[serde(default = "twenty")]
    pub b_shift_limit: Limit,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn twenty() -> Limit {
    Limit::Symmetric(20.0)
}

/// Adds one random shift per RGB channel.
pub(crate) struct ShiftMap([[f64; 2]; 3]);

impl TryFrom<RgbShiftConfig> for ShiftMap {
    type Error = Error;
    fn try_from(c: RgbShiftConfig) -> Result<Self> {
        Ok(ShiftMap([
            range("r_shift_limit", c.r_shift_limit)?,
            range("g_shift_limit", c.g_shift_limit)?,
            range("b_shift_limit", c.b_shift_limit)?,
        ]))
    }
}

impl Pixels for ShiftMap {
    fn draw(&self, rng: &mut ChaCha8Rng, image: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        let scale = max_value(image.kind())? / 255.0;
        Ok(self.0.iter().map(|&r| uniform(rng, r) * scale).collect())
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let (axis, c) = channels(layout, x, "RGBShift")?;
        if c != 3 {
            return Err(Error::msg(format!(
                "RGBShift needs 3 (RGB) channels, got {c}"
            )));
        }
        let mut shape = vec![1i64; x.dim()];
        shape[axis as usize] = 3;
        let shift = Tensor::f_from_slice(params)?
            .f_to_kind(Kind::Float)?
            .f_view(shape.as_slice())?
            .f_to_device(x.device())?;
        add(x, &shift)
    }
}

photometric!(
    RGBShift,
    RgbShiftConfig,
    ShiftMap,
    "Shifts each RGB channel by a random amount."
);
