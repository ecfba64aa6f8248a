//! uint8 images as plain bytes on the CPU, for the per-pixel ops where a loop over bytes beats
//! a chain of full-image libtorch passes (table lookups, fixed-point colour conversions).

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::Result;

/// `x`'s bytes in row-major order and its shape, when it is a uint8 CPU tensor; `None` for any
/// other, which the caller handles with tensor ops.
pub(crate) fn bytes_of(x: &Tensor) -> Result<Option<(Vec<u8>, Vec<i64>)>> {
    if x.kind() != Kind::Uint8 || x.device() != Device::Cpu {
        return Ok(None);
    }
    let flat = x.f_contiguous()?.f_view([-1])?;
    let numel = flat.numel();
    let mut data = vec![0u8; numel];
    flat.f_copy_data(&mut data, numel)?;
    Ok(Some((data, x.size())))
}

/// The uint8 tensor of `shape` holding `data`.
pub(crate) fn tensor_of(data: &[u8], shape: &[i64]) -> Result<Tensor> {
    Ok(Tensor::f_from_slice(data)?.f_view(shape)?)
}

/// `(4899 R + 9617 G + 1868 B + 2^13) >> 14`: OpenCV's fixed-point luma of uint8 RGB.
pub(crate) fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((4899 * u32::from(r) + 9617 * u32::from(g) + 1868 * u32::from(b) + (1 << 13)) >> 14) as u8
}
