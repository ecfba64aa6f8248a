//! Trace values that are images, for TensorBoard's IMAGES tab: a uint8 tensor `[H, W, C]`
//! with `C` = 1 (gray), 3 (RGB) or 4 (RGBA) — what `ImageSaver` (fe-image-ops) writes as its
//! montage. Any trace may write one; the `TensorBoard` trace files it at epoch end.

use tch::{Device, Kind, Tensor};

use super::tensorboard::SummaryImage;
use crate::error::{Error, Result};

/// `true` when `tensor` is an image value (see the module documentation).
pub fn is_image(tensor: &Tensor) -> bool {
    let size = tensor.size();
    tensor.kind() == Kind::Uint8
        && size.len() == 3
        && matches!(size[2], 1 | 3 | 4)
        && size[0] > 0
        && size[1] > 0
}

/// The image value `tensor` as a PNG summary; `key` names it in errors.
pub fn summary_image(key: &str, tensor: &Tensor) -> Result<SummaryImage> {
    let size = tensor.size();
    let (height, width, channels) = (size[0] as u32, size[1] as u32, size[2] as u32);
    let fail = |e: String| Error::Internal(format!("TensorBoard image `{key}`: {e}"));
    let pixels = tensor
        .f_to_device(Device::Cpu)
        .and_then(|t| t.f_contiguous())
        .and_then(|t| t.f_reshape([-1]))
        .and_then(|t| Vec::<u8>::try_from(&t))
        .map_err(|e| fail(e.to_string()))?;
    let color = match channels {
        1 => png::ColorType::Grayscale,
        3 => png::ColorType::Rgb,
        _ => png::ColorType::Rgba,
    };
    let mut encoded = Vec::new();
    let mut encoder = png::Encoder::new(&mut encoded, width, height);
    encoder.set_color(color);
    encoder.set_depth(png::BitDepth::Eight);
    encoder
        .write_header()
        .and_then(|mut writer| {
            writer
                .write_image_data(&pixels)
                .and_then(|()| writer.finish())
        })
        .map_err(|e| fail(e.to_string()))?;
    Ok(SummaryImage {
        height,
        width,
        colorspace: channels,
        encoded,
    })
}
