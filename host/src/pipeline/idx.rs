//! The IDX format (MNIST and family): a big-endian header of type and dimensions, then the
//! values, big-endian. Items are indexed along the first dimension.

use std::path::Path;

use tch::{Kind, Tensor};

use crate::error::{Error, Result};

/// Element types the format defines, with their type byte.
const TYPES: [(u8, Kind, usize, &str); 6] = [
    (0x08, Kind::Uint8, 1, "u8"),
    (0x09, Kind::Int8, 1, "i8"),
    (0x0B, Kind::Int16, 2, "i16"),
    (0x0C, Kind::Int, 4, "i32"),
    (0x0D, Kind::Float, 4, "f32"),
    (0x0E, Kind::Double, 8, "f64"),
];

/// The items of an IDX file, in native byte order.
#[derive(Debug, Clone)]
pub struct IdxArray {
    /// Element type.
    pub kind: Kind,
    /// Shape of the whole array; dimension 0 counts items.
    pub dims: Vec<i64>,
    bytes: Vec<u8>,
    item_bytes: usize,
}

impl IdxArray {
    /// Number of items.
    pub fn len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(0) as u64
    }

    /// `true` when there are no items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Item `index` as a new tensor (shape `dims[1..]`).
    pub fn item(&self, index: u64) -> std::result::Result<Tensor, String> {
        if index >= self.len() {
            return Err(format!(
                "item {index} is out of range (the file has {})",
                self.len()
            ));
        }
        let start = index as usize * self.item_bytes;
        Tensor::f_from_data_size(
            &self.bytes[start..start + self.item_bytes],
            &self.dims[1..],
            self.kind,
        )
        .map_err(crate::tch_message)
    }

    /// Items `indices`, stacked (shape `[indices.len(), dims[1..]...]`).
    pub fn items(&self, indices: &[u64]) -> std::result::Result<Tensor, String> {
        let mut bytes = Vec::with_capacity(indices.len() * self.item_bytes);
        for &index in indices {
            if index >= self.len() {
                return Err(format!(
                    "item {index} is out of range (the file has {})",
                    self.len()
                ));
            }
            let start = index as usize * self.item_bytes;
            bytes.extend_from_slice(&self.bytes[start..start + self.item_bytes]);
        }
        let mut shape = vec![indices.len() as i64];
        shape.extend_from_slice(&self.dims[1..]);
        Tensor::f_from_data_size(&bytes, &shape, self.kind).map_err(crate::tch_message)
    }

    /// The whole array as one tensor.
    pub fn to_tensor(&self) -> std::result::Result<Tensor, String> {
        Tensor::f_from_data_size(&self.bytes, &self.dims, self.kind).map_err(crate::tch_message)
    }
}

/// Reads a whole IDX file.
pub fn read(path: &Path) -> Result<IdxArray> {
    let bytes = std::fs::read(path).map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::NotFound => crate::datagen::missing_hint(path),
            _ => None,
        };
        let hint = hint.map(|h| format!("; {h}")).unwrap_or_default();
        Error::data(path, format!("cannot read: {e}{hint}"))
    })?;
    parse(&bytes).map_err(|message| Error::data(path, message))
}

/// Parses the bytes of an IDX file.
pub fn parse(bytes: &[u8]) -> std::result::Result<IdxArray, String> {
    if bytes.len() < 4 {
        return Err(format!(
            "not an IDX file: {} bytes is shorter than the 4-byte magic number",
            bytes.len()
        ));
    }
    if bytes[0] != 0 || bytes[1] != 0 {
        let hint = if bytes[..2] == [0x1f, 0x8b] {
            " (it is gzip-compressed: decompress it first)"
        } else {
            ""
        };
        return Err(format!(
            "not an IDX file: magic number starts with {:02x} {:02x}, expected 00 00{hint}",
            bytes[0], bytes[1]
        ));
    }
    let Some(&(_, kind, width, name)) = TYPES.iter().find(|(code, ..)| *code == bytes[2]) else {
        return Err(format!(
            "not an IDX file: unknown element type byte 0x{:02x}",
            bytes[2]
        ));
    };
    let rank = bytes[3] as usize;
    if rank == 0 {
        return Err("IDX file with zero dimensions".into());
    }
    let header = 4 + 4 * rank;
    if bytes.len() < header {
        return Err(format!(
            "truncated: the header declares {rank} dimensions but the file ends after {} bytes",
            bytes.len()
        ));
    }
    let dims: Vec<i64> = bytes[4..header]
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as i64)
        .collect();
    let shape = dims
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join("x");
    // A corrupt header can declare up to 255 dimensions of 2^32 - 1. A product that wrapped
    // around could match the data's size and hand out items past its end, and libtorch
    // computes strides over every dimension (a 0 counting as 1), which must fit in i64 even
    // when the array holds no value at all. Once this bound holds no product below overflows.
    let addressable = dims
        .iter()
        .try_fold(width as i64, |bytes, &d| bytes.checked_mul(d.max(1)))
        .is_some();
    if !addressable {
        return Err(format!(
            "the header declares {shape} {name} values, too many for a tensor"
        ));
    }
    let item_bytes = dims[1..].iter().fold(width as i64, |bytes, &d| bytes * d) as usize;
    let expected = item_bytes * dims[0] as usize;
    let data = &bytes[header..];
    if data.len() < expected {
        return Err(format!(
            "truncated: header says {shape} {name} values ({expected} bytes of data) but the file has {} bytes after the header",
            data.len()
        ));
    }
    if data.len() > expected {
        return Err(format!(
            "{} unexpected bytes after the data the header declares",
            data.len() - expected
        ));
    }
    let mut native = data.to_vec();
    if width > 1 && cfg!(target_endian = "little") {
        native.chunks_exact_mut(width).for_each(<[u8]>::reverse);
    }
    Ok(IdxArray {
        kind,
        item_bytes,
        dims,
        bytes: native,
    })
}

/// Writes `values` (native byte order, `kind` elements) as an IDX file of shape `dims`.
pub fn write(path: &Path, kind: Kind, dims: &[u32], values: &[u8]) -> Result<()> {
    let Some(&(code, _, width, _)) = TYPES.iter().find(|(_, k, ..)| *k == kind) else {
        return Err(Error::Internal(format!("IDX cannot store {kind:?}")));
    };
    let mut out = vec![0u8, 0, code, dims.len() as u8];
    for d in dims {
        out.extend_from_slice(&d.to_be_bytes());
    }
    let start = out.len();
    out.extend_from_slice(values);
    if width > 1 && cfg!(target_endian = "little") {
        out[start..]
            .chunks_exact_mut(width)
            .for_each(<[u8]>::reverse);
    }
    std::fs::write(path, out).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(code: u8, dims: &[u32]) -> Vec<u8> {
        let mut out = vec![0, 0, code, dims.len() as u8];
        for d in dims {
            out.extend_from_slice(&d.to_be_bytes());
        }
        out
    }

    #[test]
    fn reads_every_type_big_endian() {
        let mut bytes = header(0x0B, &[2]);
        bytes.extend_from_slice(&(-2i16).to_be_bytes());
        bytes.extend_from_slice(&300i16.to_be_bytes());
        let t = parse(&bytes).unwrap().to_tensor().unwrap();
        assert_eq!(
            (t.kind(), t.int64_value(&[0]), t.int64_value(&[1])),
            (Kind::Int16, -2, 300)
        );

        let mut bytes = header(0x0D, &[1, 2]);
        bytes.extend_from_slice(&1.5f32.to_be_bytes());
        bytes.extend_from_slice(&(-0.25f32).to_be_bytes());
        let t = parse(&bytes).unwrap().to_tensor().unwrap();
        assert_eq!(t.size(), [1, 2]);
        assert_eq!(t.double_value(&[0, 1]), -0.25);

        let mut bytes = header(0x0E, &[1]);
        bytes.extend_from_slice(&std::f64::consts::PI.to_be_bytes());
        assert_eq!(
            parse(&bytes)
                .unwrap()
                .to_tensor()
                .unwrap()
                .double_value(&[0]),
            std::f64::consts::PI
        );

        let mut bytes = header(0x0C, &[1]);
        bytes.extend_from_slice(&(-70000i32).to_be_bytes());
        assert_eq!(
            parse(&bytes)
                .unwrap()
                .to_tensor()
                .unwrap()
                .int64_value(&[0]),
            -70000
        );

        let mut bytes = header(0x09, &[1]);
        bytes.push(0xff);
        assert_eq!(parse(&bytes).unwrap().item(0).unwrap().int64_value(&[]), -1);
    }

    #[test]
    fn round_trips_through_write() {
        let dir = std::env::temp_dir().join(format!("fe-idx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.idx");
        let values: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        write(&path, Kind::Float, &[3, 2], &values).unwrap();
        let array = read(&path).unwrap();
        assert_eq!(array.dims, [3, 2]);
        assert_eq!(array.item(2).unwrap().double_value(&[1]), 6.0);
        assert!(array.item(3).is_err());
        let picked = array.items(&[2, 0]).unwrap();
        assert_eq!(picked.size(), [2, 2]);
        assert_eq!(
            (picked.double_value(&[0, 0]), picked.double_value(&[1, 1])),
            (5.0, 2.0)
        );
        assert!(array.items(&[0, 9]).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn empty_and_single_item_files() {
        assert!(parse(&header(0x08, &[0, 28, 28])).unwrap().is_empty());
        let mut one = header(0x08, &[1]);
        one.push(7);
        let one = parse(&one).unwrap();
        assert_eq!((one.len(), one.item(0).unwrap().int64_value(&[])), (1, 7));
    }

    #[test]
    fn errors_name_the_problem() {
        assert!(parse(&[0x1f, 0x8b, 8, 0]).unwrap_err().contains("gzip"));
        assert!(parse(&[0, 0, 0x42, 1, 0, 0, 0, 1])
            .unwrap_err()
            .contains("unknown element type"));
        let mut short = header(0x08, &[10, 2]);
        short.extend_from_slice(&[0; 5]);
        assert!(parse(&short)
            .unwrap_err()
            .starts_with("truncated: header says 10x2 u8 values (20 bytes"));
        let mut long = header(0x08, &[1]);
        long.extend_from_slice(&[0, 0]);
        assert!(parse(&long).unwrap_err().contains("1 unexpected bytes"));
        assert!(parse(&[0, 0]).unwrap_err().contains("shorter than"));
        assert!(parse(&[0, 0, 8, 3, 0])
            .unwrap_err()
            .starts_with("truncated: the header declares 3"));
    }

    /// Found by the `idx_parse` fuzz target: dimensions whose product overflows i64 panicked
    /// (debug) or wrapped around (release) instead of being refused.
    #[test]
    fn absurd_dimensions_are_refused_not_overflowed() {
        let mut crash = vec![0, 0, 0x09, 0x02, 0xd0, 0x20, 0, 0];
        crash.extend_from_slice(&[0xce; 31]);
        crash.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0xd0]);
        let error = parse(&crash).unwrap_err();
        assert!(
            error == "the header declares 3491758080x3469659854 i8 values, too many for a tensor",
            "{error}"
        );
        // No values at all, but strides past i64: libtorch could not make the items, so the
        // file is refused though its (empty) data matches. Also found by the fuzz target.
        let mut no_values = vec![0, 0, 0x09, 0x05, 0xbf, 0, 0x09, 0x01, 0, 0, 0, 0, 0, 0];
        no_values.extend_from_slice(&[0x10, 0xc5, 0xc5, 0xc5, 0, 0xc5, 0xc5, 0xc5, 0xc5, 0x23]);
        assert!(parse(&no_values)
            .unwrap_err()
            .ends_with("too many for a tensor"));
        let empty_items = header(0x0E, &[0, u32::MAX, u32::MAX, u32::MAX]);
        assert!(parse(&empty_items)
            .unwrap_err()
            .ends_with("too many for a tensor"));
        // Products that would wrap to exactly the data's size are caught before comparing.
        let wrapping = header(0x08, &[1 << 16, 1 << 16, 1 << 16, 1 << 16]);
        assert!(parse(&wrapping)
            .unwrap_err()
            .ends_with("too many for a tensor"));
        // A zero dimension with addressable strides still parses: no items.
        let zero_items = parse(&header(0x08, &[0, 28, 28])).unwrap();
        assert_eq!((zero_items.len(), zero_items.item(0).is_err()), (0, true));
    }
}
