//! `ImageCompression` after albumentations 2.0.8: a JPEG encode / decode round trip at a
//! random quality, through uint8. The codec is the `image` crate's (libjpeg's quality
//! scaling of the standard tables, but 4:4:4 chroma and its own DCT), not OpenCV's
//! libjpeg-turbo, so outputs differ from albumentations' by the codecs' rounding; the tests
//! hold the distortion (PSNR) to OpenCV's at the same quality.

use std::io::Cursor;

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{Error, Result};
use image::codecs::jpeg::JpegEncoder;
use image::{ExtendedColorType, ImageFormat};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::Pixels;
use crate::color_ops::via_uint8;
use crate::layout::Spatial;

fn half() -> f64 {
    0.5
}

/// `ImageCompression` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ImageCompressionConfig {
    /// JPEG quality range, both ends included, within [1, 100] (default [99, 100]).
    #[serde(default = "qualities")]
    pub quality_range: [i64; 2],
    /// Only `"jpeg"`: the `image` crate encodes WebP losslessly only.
    #[serde(default = "jpeg")]
    pub compression_type: String,
    /// Inputs left untouched.
    #[serde(default)]
    pub masks: Vec<String>,
    /// Probability (default 0.5).
    #[serde(default = "half")]
    pub p: f64,
}

fn qualities() -> [i64; 2] {
    [99, 100]
}
fn jpeg() -> String {
    "jpeg".to_owned()
}

/// Draws a quality and round-trips the image through JPEG.
pub(crate) struct Jpeg([i64; 2]);

impl TryFrom<ImageCompressionConfig> for Jpeg {
    type Error = Error;
    fn try_from(c: ImageCompressionConfig) -> Result<Self> {
        if c.compression_type != "jpeg" {
            return Err(Error::config(
                "compression_type",
                format!(
                    "only \"jpeg\" is supported (the image crate has no lossy WebP encoder), got {:?}",
                    c.compression_type
                ),
            ));
        }
        let [lo, hi] = c.quality_range;
        if !(1 <= lo && lo <= hi && hi <= 100) {
            return Err(Error::config(
                "quality_range",
                format!("needs 1 <= lo <= hi <= 100, got [{lo}, {hi}]"),
            ));
        }
        Ok(Jpeg(c.quality_range))
    }
}

/// One JPEG round trip of a `(H, W, 1)` or `(H, W, 3)` uint8 image.
fn round_trip(x: &Tensor, quality: u8) -> Result<Tensor> {
    let size = x.size();
    let (h, w, c) = (size[0], size[1], size[2]);
    let color = if c == 3 {
        ExtendedColorType::Rgb8
    } else {
        ExtendedColorType::L8
    };
    let pixels = Vec::<u8>::try_from(x.f_contiguous()?.f_flatten(0, -1)?)?;
    let mut encoded = Vec::new();
    let jpeg_error = |e: image::ImageError| Error::msg(format!("ImageCompression: JPEG {e}"));
    JpegEncoder::new_with_quality(&mut encoded, quality)
        .encode(&pixels, w as u32, h as u32, color)
        .map_err(jpeg_error)?;
    let decoded = image::load(Cursor::new(encoded), ImageFormat::Jpeg).map_err(jpeg_error)?;
    let bytes = if c == 3 {
        decoded.into_rgb8().into_raw()
    } else {
        decoded.into_luma8().into_raw()
    };
    Ok(Tensor::f_from_slice(&bytes)?.f_reshape([h, w, c])?)
}

/// albumentations' channel handling: 1 channel as gray, 2 padded with a zero channel to
/// RGB, more than 3 as RGB plus one gray image per extra channel.
fn compress(x: &Tensor, quality: u8) -> Result<Tensor> {
    let c = x.size()[2];
    match c {
        1 | 3 => round_trip(x, quality),
        2 => {
            let zero = x.f_narrow(2, 0, 1)?.f_zeros_like()?;
            let padded = Tensor::f_cat(&[x.shallow_clone(), zero], 2)?;
            Ok(round_trip(&padded, quality)?.f_narrow(2, 0, 2)?)
        }
        _ => {
            let mut parts = vec![round_trip(&x.f_narrow(2, 0, 3)?, quality)?];
            for i in 3..c {
                parts.push(round_trip(&x.f_narrow(2, i, 1)?, quality)?);
            }
            Ok(Tensor::f_cat(&parts, 2)?)
        }
    }
}

impl Pixels for Jpeg {
    fn draw(&self, rng: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        Ok(vec![rng.random_range(self.0[0]..=self.0[1]) as f64])
    }

    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor> {
        let quality = params[0] as u8;
        via_uint8(x, |b| {
            if layout.plain {
                Ok(compress(&b.f_unsqueeze(2)?, quality)?.f_squeeze_dim(2)?)
            } else if b.size()[2] == 0 {
                Ok(b.shallow_clone())
            } else {
                compress(b, quality)
            }
        })
    }
}

photometric!(
    ImageCompression,
    ImageCompressionConfig,
    Jpeg,
    "JPEG round trip at a random quality."
);
