//! Built-in dataset readers for files numpy, pandas and image collections leave behind:
//!
//! | `type` | reader | a sample |
//! |---|---|---|
//! | `csv` | [`csv::CsvSource`] | one row: int64 / float32 scalars, text for everything else |
//! | `npy` | [`npy::ArraySource`] | row `i` along axis 0 of each array |
//! | `npz` | [`npy::ArraySource`] via [`npz::open`] | the same, arrays from one archive |
//! | `image_folder` | [`folder::FolderSource`] | a file path (text) and its class label |
//! | `webdataset` | [`webdataset::WebDatasetSource`] | one sample's members of a tar shard |
//! | `parquet`, `arrow` | [`table::TableSource`] | one row of a table, a key per column |
//!
//! Each reader keeps its byte parsing in pure functions (`parse_header`, `csv::parse`) that
//! the fuzz targets in `fuzz/` call directly; file access lives in the `open` functions, whose
//! errors name the file.

pub mod csv;
pub mod folder;
pub mod npy;
pub mod npz;
pub mod table;
pub mod webdataset;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use tch::{Kind, Tensor};

use crate::error::{Error, Result};
use crate::pipeline::Source;

/// The dataset kinds read here, with a one-line description each (for the registry).
pub const KINDS: [(&str, &str); 7] = [
    (
        "csv",
        "A CSV file, one sample per row: integer and float columns become scalars, others text",
    ),
    (
        "npy",
        "NPY files (numpy's np.save), one per key, memory-mapped",
    ),
    (
        "npz",
        "An NPZ archive (numpy's np.savez), one array per key",
    ),
    (
        "image_folder",
        "A directory with one subdirectory per class: file path `x` and int64 label `y`",
    ),
    (
        "webdataset",
        "WebDataset tar shards (local, http(s)://, pipe:), streamed; a key per member extension",
    ),
    (
        "parquet",
        "Parquet files (a file, directory or glob), one sample per row, read a row group at a time",
    ),
    (
        "arrow",
        "Arrow IPC files (file or stream format, Hugging Face datasets' cache), one sample per row",
    ),
];

/// Why a built-in dataset could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The dataset's config table is invalid; the error names the field.
    Config(fe_plugin_api::Error),
    /// A file is missing or malformed.
    Data(Error),
}

impl From<Error> for OpenError {
    fn from(error: Error) -> Self {
        OpenError::Data(error)
    }
}

/// Opens a dataset of a built-in `kind` from its config table (TOML text) with paths relative
/// to `dir`; `None` when `kind` is not one of [`KINDS`].
pub fn open(
    kind: &str,
    config: &str,
    dir: &Path,
) -> Option<std::result::Result<Arc<dyn Source>, OpenError>> {
    fn shared<S: Source + 'static>(source: S) -> Arc<dyn Source> {
        Arc::new(source)
    }
    let opened = match kind {
        "csv" => {
            parse::<csv::CsvConfig>(config).and_then(|c| Ok(shared(csv::CsvSource::open(&c, dir)?)))
        }
        "npy" => parse::<npy::NpyConfig>(config)
            .and_then(|c| Ok(shared(npy::ArraySource::open_npy(&c, dir)?))),
        "npz" => parse::<npz::NpzConfig>(config).and_then(|c| Ok(shared(npz::open(&c, dir)?))),
        "image_folder" => parse::<folder::FolderConfig>(config)
            .and_then(|c| Ok(shared(folder::FolderSource::open(&c, dir)?))),
        "webdataset" => parse::<webdataset::WebDatasetConfig>(config)
            .and_then(|c| Ok(shared(webdataset::WebDatasetSource::open(&c, dir)?))),
        "parquet" => parse::<table::TableConfig>(config).and_then(|c| {
            Ok(shared(table::TableSource::open(
                &c,
                dir,
                table::Format::Parquet,
            )?))
        }),
        "arrow" => parse::<table::TableConfig>(config).and_then(|c| {
            Ok(shared(table::TableSource::open(
                &c,
                dir,
                table::Format::Arrow,
            )?))
        }),
        _ => return None,
    };
    Some(opened)
}

fn parse<T: DeserializeOwned>(config: &str) -> std::result::Result<T, OpenError> {
    fe_plugin_api::parse_config(config).map_err(OpenError::Config)
}

/// The bytes of a file or of part of one: a read-only memory map, or a buffer for data that
/// had to be decompressed. Cloning shares the storage.
#[derive(Clone)]
pub struct Bytes {
    storage: Storage,
    start: usize,
    end: usize,
}

#[derive(Clone)]
enum Storage {
    Map(Arc<memmap2::Mmap>),
    Vec(Arc<Vec<u8>>),
}

impl Bytes {
    /// Memory-maps the file at `path`.
    pub fn map(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path)
            .map_err(|e| Error::data(path, format!("cannot read: {e}")))?;
        let meta = file
            .metadata()
            .map_err(|e| Error::data(path, format!("cannot read: {e}")))?;
        if meta.is_dir() {
            return Err(Error::data(path, "is a directory, not a file"));
        }
        if meta.len() == 0 {
            // Mapping zero bytes is an error on some systems; the parsers report the empty file.
            return Ok(Self::from_vec(Vec::new()));
        }
        // SAFETY: the map is read-only and private to this process. Another process truncating
        // or rewriting the file during the run would change what we read (or fault); that is
        // the documented contract of every memory-mapped reader, numpy's `mmap_mode` included.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| Error::data(path, format!("cannot memory-map: {e}")))?;
        let end = map.len();
        Ok(Self {
            storage: Storage::Map(Arc::new(map)),
            start: 0,
            end,
        })
    }

    /// Bytes held in memory.
    pub fn from_vec(bytes: Vec<u8>) -> Self {
        let end = bytes.len();
        Self {
            storage: Storage::Vec(Arc::new(bytes)),
            start: 0,
            end,
        }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        let all: &[u8] = match &self.storage {
            Storage::Map(map) => map,
            Storage::Vec(vec) => vec,
        };
        &all[self.start..self.end]
    }

    /// `true` when the bytes are a memory map (not copied into memory).
    pub fn is_mapped(&self) -> bool {
        matches!(self.storage, Storage::Map(_))
    }

    /// Bytes `start..end` of these, sharing the storage; `None` when out of range.
    pub fn slice(&self, start: usize, end: usize) -> Option<Self> {
        (start <= end && end <= self.end - self.start).then(|| Self {
            storage: self.storage.clone(),
            start: self.start + start,
            end: self.start + end,
        })
    }
}

/// A tensor of `kind` and `shape` from native-order `bytes`; the length is checked here
/// because libtorch copies as many bytes as the shape asks for, whatever the slice holds.
pub(crate) fn tensor_from_bytes(
    bytes: &[u8],
    shape: &[i64],
    kind: Kind,
) -> std::result::Result<Tensor, String> {
    let elements = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?));
    if elements.and_then(|n| n.checked_mul(kind.elt_size_in_bytes())) != Some(bytes.len()) {
        return Err(format!(
            "internal error: {} bytes do not make a {kind:?} tensor of shape {shape:?}",
            bytes.len()
        ));
    }
    Tensor::f_from_data_size(bytes, shape, kind).map_err(crate::tch_message)
}

/// Stacks one key's per-sample tensors; text of different lengths gets a message saying what
/// to do about it rather than libtorch's.
pub(crate) fn stack_key(key: &str, values: &[Tensor]) -> std::result::Result<Tensor, String> {
    if let Some(first) = values.first() {
        if let Some(odd) = values.iter().find(|v| v.size() != first.size()) {
            let what = if first.kind() == Kind::Uint8 && first.dim() == 1 {
                "text values of different lengths"
            } else {
                "values of different shapes"
            };
            return Err(format!(
                "cannot batch key `{key}`: {what} ({:?} and {:?}); add a pipeline op that turns them into tensors of one shape",
                first.size(),
                odd.size()
            ));
        }
    }
    Tensor::f_stack(values, 0)
        .map_err(|e| format!("cannot batch key `{key}`: {}", crate::tch_message(e)))
}
