//! The NPY format (numpy's `np.save`): a magic string, a version, a Python dict literal naming
//! the dtype, the memory order and the shape, then the raw values. Samples are indexed along
//! axis 0.
//!
//! Element types and the tensor kind each becomes:
//!
//! | NPY descr (numpy dtype) | tensor |
//! |---|---|
//! | `b1` (bool) | bool (any nonzero byte is `true`) |
//! | `i1` `u1` `i2` `i4` `i8` (int8, uint8, int16, int32, int64) | the same |
//! | `u2`, `u4` (uint16, uint32) | int32, int64: widened without loss, because libtorch has almost no ops for uint16/uint32 |
//! | `u8` (uint64) | int64; a value above `i64::MAX` fails the sample that holds it |
//! | `f2` `f4` `f8` (float16, float32, float64) | the same |
//!
//! Anything else (complex, strings, objects, structured dtypes) is refused at open, naming
//! the dtype.
//!
//! Byte order `<` and `>` are both read (converted to native order); `|` and `=` mean native.
//! Fortran-ordered arrays are read correctly: each sample is gathered from its strided
//! elements, so a sample is the same tensor numpy's `a[i]` gives.

mod header;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tch::Tensor;

pub use header::{parse_header, Dtype, Element, NpyHeader};

use header::shape_text;

use super::{tensor_from_bytes, Bytes};
use crate::error::{Error, Result};
use crate::pipeline::Source;

/// An NPY array whose bytes stay where they are (a memory map or a buffer); samples are
/// converted when read.
pub struct NpyArray {
    header: NpyHeader,
    bytes: Bytes,
    item_shape: Vec<i64>,
    item_elements: usize,
    /// Element strides of axes 1.. in a Fortran-ordered array.
    fortran_strides: Vec<usize>,
}

impl NpyArray {
    /// Checks the header and the data length of a whole NPY file held in `bytes`.
    pub fn new(bytes: Bytes) -> std::result::Result<Self, String> {
        let header = parse_header(bytes.as_slice())?;
        if header.shape.is_empty() {
            return Err(
                "the array is a single scalar (shape ()); samples are taken along axis 0".into(),
            );
        }
        Self::with_header(header, bytes)
    }

    /// A whole NPY file as one tensor of its own shape, a 0-d array included (one value of a
    /// sample, as a WebDataset `.npy` member holds), rather than as samples along axis 0.
    pub fn whole(bytes: Bytes) -> std::result::Result<Tensor, String> {
        let mut header = parse_header(bytes.as_slice())?;
        if header.shape.is_empty() {
            // One sample of shape (): the same bytes read as an array of one.
            header.shape = vec![1];
            return Self::with_header(header, bytes)?.item(0);
        }
        let array = Self::with_header(header, bytes)?;
        let all: Vec<u64> = (0..array.len()).collect();
        array.items(&all)
    }

    fn with_header(header: NpyHeader, bytes: Bytes) -> std::result::Result<Self, String> {
        let expected = header.data_len()?;
        let available = bytes.as_slice().len() - header.data_offset;
        if available < expected {
            return Err(format!(
                "truncated: header says shape {} of {} ({expected} bytes of data) but there are {available} bytes after the header",
                shape_text(&header.shape),
                header.dtype.descr()
            ));
        }
        if available > expected {
            return Err(format!(
                "{} unexpected bytes after the data the header declares",
                available - expected
            ));
        }
        let item_shape: Vec<i64> = header.shape[1..]
            .iter()
            .map(|&d| i64::try_from(d).map_err(|_| format!("dimension {d} is too large")))
            .collect::<std::result::Result<_, _>>()?;
        // Not implied by data_len(): with an empty axis 0 the rest of the shape may be huge.
        let item_elements = header.shape[1..]
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
            .ok_or_else(|| format!("shape {} is too large", shape_text(&header.shape)))?;
        let mut fortran_strides = Vec::with_capacity(item_shape.len());
        let mut stride = header.shape[0] as usize;
        for &d in &header.shape[1..] {
            fortran_strides.push(stride);
            stride = stride.saturating_mul(d as usize);
        }
        Ok(Self {
            header,
            bytes,
            item_shape,
            item_elements,
            fortran_strides,
        })
    }

    /// `true` when the values are read from a memory map rather than copied into memory.
    pub fn is_mapped(&self) -> bool {
        self.bytes.is_mapped()
    }

    /// The header.
    pub fn header(&self) -> &NpyHeader {
        &self.header
    }

    /// Number of samples (the length of axis 0).
    pub fn len(&self) -> u64 {
        self.header.shape[0]
    }

    /// `true` when axis 0 is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shape of one sample.
    pub fn item_shape(&self) -> &[i64] {
        &self.item_shape
    }

    /// Sample `index` as a new tensor.
    pub fn item(&self, index: u64) -> std::result::Result<Tensor, String> {
        self.items_shaped(&[index], false)
    }

    /// Samples `indices`, stacked along a new axis 0.
    pub fn items(&self, indices: &[u64]) -> std::result::Result<Tensor, String> {
        self.items_shaped(indices, true)
    }

    fn items_shaped(&self, indices: &[u64], stacked: bool) -> std::result::Result<Tensor, String> {
        let kind = self.header.dtype.kind();
        let out_width = kind.elt_size_in_bytes();
        let mut out = Vec::with_capacity(
            indices
                .len()
                .saturating_mul(self.item_elements.saturating_mul(out_width)),
        );
        for &index in indices {
            self.push_item(index, &mut out)
                .map_err(|e| format!("sample {index}: {e}"))?;
        }
        let mut shape = Vec::with_capacity(self.item_shape.len() + 1);
        if stacked {
            shape.push(indices.len() as i64);
        }
        shape.extend_from_slice(&self.item_shape);
        tensor_from_bytes(&out, &shape, kind)
    }

    /// Appends sample `index` to `out` in C order, converted to the tensor kind.
    fn push_item(&self, index: u64, out: &mut Vec<u8>) -> std::result::Result<(), String> {
        if index >= self.len() {
            return Err(format!("out of range (the array has {})", self.len()));
        }
        let width = self.header.dtype.width();
        let data = &self.bytes.as_slice()[self.header.data_offset..];
        let index = index as usize;
        if !self.header.fortran_order || self.item_shape.is_empty() {
            let start = index * self.item_elements * width;
            return push_values(
                self.header.dtype,
                &data[start..start + self.item_elements * width],
                out,
            );
        }
        // Walk the sample's elements in C order; in Fortran order axis 0 has stride 1, so
        // sample `index` starts at element `index`.
        let mut counter = vec![0i64; self.item_shape.len()];
        let mut offset = index;
        for _ in 0..self.item_elements {
            let start = offset * width;
            push_values(self.header.dtype, &data[start..start + width], out)?;
            for axis in (0..counter.len()).rev() {
                counter[axis] += 1;
                offset += self.fortran_strides[axis];
                if counter[axis] < self.item_shape[axis] {
                    break;
                }
                offset -= self.fortran_strides[axis] * counter[axis] as usize;
                counter[axis] = 0;
            }
        }
        Ok(())
    }
}

/// Converts values of `dtype` to the native representation of its tensor kind.
fn push_values(dtype: Dtype, src: &[u8], out: &mut Vec<u8>) -> std::result::Result<(), String> {
    let big = dtype.big_endian;
    match dtype.element {
        // libtorch assumes bool bytes are 0 or 1; numpy does not promise that.
        Element::Bool => out.extend(src.iter().map(|&b| u8::from(b != 0))),
        Element::U16 => {
            for c in src.chunks_exact(2) {
                let v = if big {
                    u16::from_be_bytes([c[0], c[1]])
                } else {
                    u16::from_le_bytes([c[0], c[1]])
                };
                out.extend_from_slice(&i32::from(v).to_ne_bytes());
            }
        }
        Element::U32 => {
            for c in src.chunks_exact(4) {
                let raw = [c[0], c[1], c[2], c[3]];
                let v = if big {
                    u32::from_be_bytes(raw)
                } else {
                    u32::from_le_bytes(raw)
                };
                out.extend_from_slice(&i64::from(v).to_ne_bytes());
            }
        }
        Element::U64 => {
            for c in src.chunks_exact(8) {
                let raw = [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]];
                let v = if big {
                    u64::from_be_bytes(raw)
                } else {
                    u64::from_le_bytes(raw)
                };
                let v = i64::try_from(v).map_err(|_| {
                    format!("uint64 value {v} does not fit in int64, the kind uint64 arrays are read as")
                })?;
                out.extend_from_slice(&v.to_ne_bytes());
            }
        }
        _ if big != cfg!(target_endian = "big") => {
            for c in src.chunks_exact(dtype.width()) {
                out.extend(c.iter().rev());
            }
        }
        _ => out.extend_from_slice(src),
    }
    Ok(())
}

/// `type = "npy"`: one NPY file per key, all with the same length along axis 0.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct NpyConfig {
    /// Key → file (relative to the manifest).
    pub files: BTreeMap<String, PathBuf>,
}

/// Memory-maps and checks one NPY file.
pub fn open_file(path: &Path) -> Result<NpyArray> {
    let bytes = Bytes::map(path)?;
    NpyArray::new(bytes).map_err(|message| Error::data(path, message))
}

/// Named arrays that share axis 0: the samples of an `npy` or `npz` dataset.
pub struct ArraySource {
    keys: Vec<String>,
    arrays: Vec<NpyArray>,
}

impl ArraySource {
    /// Checks that every array has the same length; `origin` names an array in errors (its
    /// file, or the member of an archive) and `path` is the file the error is about.
    pub fn new(
        named: Vec<(String, NpyArray, String)>,
        path: impl Fn(usize) -> PathBuf,
    ) -> Result<Self> {
        let mut keys = Vec::with_capacity(named.len());
        let mut arrays = Vec::with_capacity(named.len());
        let mut first: Option<(u64, String)> = None;
        for (position, (key, array, origin)) in named.into_iter().enumerate() {
            match &first {
                Some((len, first_origin)) if *len != array.len() => {
                    return Err(Error::data(
                        path(position),
                        format!(
                            "{origin} has {} samples along axis 0 but {first_origin} has {len}; every key needs one sample per row",
                            array.len()
                        ),
                    ));
                }
                Some(_) => {}
                None => first = Some((array.len(), origin)),
            }
            keys.push(key);
            arrays.push(array);
        }
        Ok(Self { keys, arrays })
    }

    /// Opens `type = "npy"`: every file is memory-mapped, none is read into memory.
    pub fn open_npy(config: &NpyConfig, dir: &Path) -> Result<Self> {
        let mut named = Vec::with_capacity(config.files.len());
        let mut paths = Vec::with_capacity(config.files.len());
        for (key, file) in &config.files {
            let path = dir.join(file);
            named.push((
                key.clone(),
                open_file(&path)?,
                format!("`{key}` ({})", path.display()),
            ));
            paths.push(path);
        }
        Self::new(named, |i| paths[i].clone())
    }

    /// The array of each key, in `keys()` order.
    pub fn arrays(&self) -> &[NpyArray] {
        &self.arrays
    }
}

impl Source for ArraySource {
    fn len(&self) -> u64 {
        self.arrays.first().map(NpyArray::len).unwrap_or(0)
    }

    fn keys(&self) -> &[String] {
        &self.keys
    }

    fn get(&self, index: u64) -> std::result::Result<Vec<Tensor>, String> {
        self.arrays
            .iter()
            .zip(&self.keys)
            .map(|(array, key)| array.item(index).map_err(|e| format!("key `{key}`: {e}")))
            .collect()
    }

    fn get_batch(&self, indices: &[u64]) -> std::result::Result<Vec<Tensor>, String> {
        self.arrays
            .iter()
            .zip(&self.keys)
            .map(|(array, key)| {
                array
                    .items(indices)
                    .map_err(|e| format!("key `{key}`: {e}"))
            })
            .collect()
    }
}
