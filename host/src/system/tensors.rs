//! Named tensors to and from `.safetensors` files, with errors that name the file.

use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors};
use tch::{Device, Kind, Tensor};

use crate::error::{Error, Result};

fn dtype(kind: Kind) -> Option<Dtype> {
    Some(match kind {
        Kind::Bool => Dtype::BOOL,
        Kind::Uint8 => Dtype::U8,
        Kind::Int8 => Dtype::I8,
        Kind::Int16 => Dtype::I16,
        Kind::Int => Dtype::I32,
        Kind::Int64 => Dtype::I64,
        Kind::BFloat16 => Dtype::BF16,
        Kind::Half => Dtype::F16,
        Kind::Float => Dtype::F32,
        Kind::Double => Dtype::F64,
        _ => return None,
    })
}

fn kind(dtype: Dtype) -> Option<Kind> {
    Some(match dtype {
        Dtype::BOOL => Kind::Bool,
        Dtype::U8 => Kind::Uint8,
        Dtype::I8 => Kind::Int8,
        Dtype::I16 => Kind::Int16,
        Dtype::I32 => Kind::Int,
        Dtype::I64 => Kind::Int64,
        Dtype::BF16 => Kind::BFloat16,
        Dtype::F16 => Kind::Half,
        Dtype::F32 => Kind::Float,
        Dtype::F64 => Kind::Double,
        _ => return None,
    })
}

/// A contiguous CPU tensor, handed to safetensors without copying it first: the snapshot of a
/// checkpoint (what training waits for) copies every byte once instead of three times.
struct CpuView {
    tensor: Tensor,
    dtype: Dtype,
    shape: Vec<usize>,
    len: usize,
}

impl safetensors::View for CpuView {
    fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        if self.len == 0 {
            return std::borrow::Cow::Borrowed(&[]);
        }
        // SAFETY: `tensor` is a contiguous CPU tensor of `len` bytes starting at `data_ptr`
        // (which accounts for the storage offset), kept alive by `self` for the borrow;
        // nothing writes to it while the run is between two steps taking its snapshot.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.tensor.data_ptr() as *const u8, self.len) };
        std::borrow::Cow::Borrowed(bytes)
    }

    fn data_len(&self) -> usize {
        self.len
    }
}

/// The bytes of `tensors` in the safetensors format (CPU copies, contiguous, native order).
pub fn serialize(tensors: &[(String, Tensor)]) -> std::result::Result<Vec<u8>, String> {
    let mut views: Vec<(&str, CpuView)> = Vec::with_capacity(tensors.len());
    for (name, tensor) in tensors {
        let dtype = dtype(tensor.kind())
            .ok_or_else(|| format!("tensor `{name}`: {:?} cannot be saved", tensor.kind()))?;
        let cpu = tensor
            .f_to_device(Device::Cpu)
            .and_then(|t| t.f_contiguous())
            .map_err(|e| format!("tensor `{name}`: {}", crate::tch_message(e)))?;
        let shape = cpu.size().iter().map(|&d| d as usize).collect();
        let len = cpu.numel() * cpu.kind().elt_size_in_bytes();
        views.push((
            name.as_str(),
            CpuView {
                tensor: cpu,
                dtype,
                shape,
                len,
            },
        ));
    }
    safetensors::serialize(views, None).map_err(|e| e.to_string())
}

/// Parses safetensors bytes into named CPU tensors, in file order.
pub fn deserialize(bytes: &[u8]) -> std::result::Result<Vec<(String, Tensor)>, String> {
    let file = SafeTensors::deserialize(bytes)
        .map_err(|e| format!("not a valid safetensors file ({e})"))?;
    let mut out = Vec::new();
    for (name, view) in file.iter() {
        let kind = kind(view.dtype())
            .ok_or_else(|| format!("tensor `{name}` has unsupported dtype {:?}", view.dtype()))?;
        let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
        let tensor = Tensor::f_from_data_size(view.data(), &shape, kind)
            .map_err(|e| format!("tensor `{name}`: {}", crate::tch_message(e)))?;
        out.push((name.to_owned(), tensor));
    }
    Ok(out)
}

/// Writes `tensors` to `path` (not atomically; checkpoints add that on top).
pub fn write(path: &Path, tensors: &[(String, Tensor)]) -> Result<()> {
    let bytes = serialize(tensors)
        .map_err(|message| Error::Run(format!("{}: {message}", path.display())))?;
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}

/// Reads every tensor of the file at `path`.
pub fn read(path: &Path) -> std::result::Result<Vec<(String, Tensor)>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    deserialize(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_names_dtypes_and_values() {
        let tensors = vec![
            (
                "a.weight".to_owned(),
                Tensor::from_slice(&[1.5f32, -2.0]).reshape([2, 1]),
            ),
            ("count".to_owned(), Tensor::from(7i64)),
            ("mask".to_owned(), Tensor::from_slice(&[true, false])),
            (
                "strided".to_owned(),
                Tensor::arange(6, (Kind::Double, Device::Cpu))
                    .reshape([2, 3])
                    .tr(),
            ),
            // Contiguous, but starting inside its storage: the bytes must start there too.
            (
                "offset".to_owned(),
                Tensor::arange(10, (Kind::Int, Device::Cpu)).narrow(0, 3, 4),
            ),
            (
                "empty".to_owned(),
                Tensor::zeros([0, 3], (Kind::Float, Device::Cpu)),
            ),
            (
                "half".to_owned(),
                Tensor::from_slice(&[0.25f32, 3.0]).to_kind(Kind::BFloat16),
            ),
        ];
        let back = deserialize(&serialize(&tensors).unwrap()).unwrap();
        for (name, tensor) in &tensors {
            let (_, loaded) = back.iter().find(|(n, _)| n == name).unwrap();
            assert_eq!(loaded.kind(), tensor.kind(), "{name}");
            assert_eq!(loaded.size(), tensor.size(), "{name}");
            assert!(loaded.equal(tensor), "{name}");
        }
    }

    #[test]
    fn truncated_bytes_are_refused() {
        let bytes = serialize(&[(
            "x".to_owned(),
            Tensor::zeros([100], (Kind::Float, Device::Cpu)),
        )])
        .unwrap();
        let err = deserialize(&bytes[..bytes.len() - 10]).unwrap_err();
        assert!(err.starts_with("not a valid safetensors file"), "{err}");
    }
}
