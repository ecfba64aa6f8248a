//! `--input FILE|DIR|KEY=FILE`: data given on the command line instead of the manifest's
//! dataset, in any format the pipeline reads. The format follows from the file (a directory is
//! an image folder, `.npz`, `.npy` or NPY bytes, `.csv`, anything else IDX); for CSV, NPZ and
//! image folders the manifest's own dataset of that type lends its settings (columns, key
//! names, classes), so the same keys come out as in training.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::pipeline::{IdxConfig, IdxSource, Source};

/// A file format the pipeline reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A directory with one subdirectory per class.
    ImageFolder,
    /// numpy's `np.savez`.
    Npz,
    /// numpy's `np.save`: one array, one key.
    Npy,
    /// A CSV file with a header.
    Csv,
    /// An IDX file (MNIST's format): one array, one key.
    Idx,
}

impl Format {
    /// The format of `path` from what it is and its first bytes.
    pub fn of(path: &Path, is_dir: bool, head: &[u8]) -> Self {
        let extension = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        if is_dir {
            Format::ImageFolder
        } else if extension == "npz" || head.starts_with(b"PK\x03\x04") {
            Format::Npz
        } else if extension == "npy" || head.starts_with(b"\x93NUMPY") {
            Format::Npy
        } else if extension == "csv" {
            Format::Csv
        } else {
            Format::Idx
        }
    }

    /// The dataset `type` of this format.
    pub fn kind(self) -> &'static str {
        match self {
            Format::ImageFolder => "image_folder",
            Format::Npz => "npz",
            Format::Npy => "npy",
            Format::Csv => "csv",
            Format::Idx => "idx",
        }
    }

    /// `true` for formats holding one array (so one key) per file.
    pub fn single_array(self) -> bool {
        matches!(self, Format::Npy | Format::Idx)
    }
}

/// Splits `KEY=FILE` (when `KEY` is a plain key and the whole text is not an existing path)
/// from `FILE`.
pub fn parse_spec(spec: &str) -> (Option<String>, PathBuf) {
    if let Some((key, file)) = spec.split_once('=') {
        let plain = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if plain && !file.is_empty() && !Path::new(spec).exists() {
            return (Some(key.to_owned()), PathBuf::from(file));
        }
    }
    (None, PathBuf::from(spec))
}

/// A note when `--input` is an image folder and no dataset of the manifest is one: an image
/// folder's `x` is file paths, which a pipeline made for arrays (IDX, NPY, CSV numbers) hands
/// the model as they are, and the failure that follows is easier to read knowing it. Arrays in
/// another file format than training's are the same data, so they get no note.
pub fn unlike_training(manifest: &Manifest, format: Format) -> Option<String> {
    if format != Format::ImageFolder {
        return None;
    }
    let trained: std::collections::BTreeSet<&str> = manifest
        .pipeline
        .data
        .iter()
        .flat_map(|entry| entry.datasets.variants())
        .map(|(config, _)| config.kind.as_str())
        .collect();
    if trained.is_empty() || trained.contains(format.kind()) {
        return None;
    }
    Some(format!(
        "--input is an image folder (`x`: file paths, `y`: class indices), but the manifest trained on {} data; its pipeline prepares the input as it prepared that",
        trained.into_iter().collect::<Vec<_>>().join(", ")
    ))
}

/// The data `specs` name, as a dataset table of the manifest would describe it: its reader
/// (`type`) and the reader's settings (absolute paths), and its format.
pub struct InputData {
    /// The reader, `idx`, `npy`, `npz`, `csv` or `image_folder`.
    pub kind: &'static str,
    /// The reader's settings.
    pub table: toml::Table,
    /// The format of the files.
    pub format: Format,
}

/// Describes the data `specs` name. Single-array files without a key feed `default_key`.
pub fn describe(manifest: &Manifest, specs: &[String], default_key: &str) -> Result<InputData> {
    let mut single = toml::Table::new();
    let mut format_seen = None;
    let mut whole = None;
    for spec in specs {
        let (key, path) = parse_spec(spec);
        let meta = std::fs::metadata(&path)
            .map_err(|e| Error::data(&path, format!("cannot read --input: {e}")))?;
        let head = if meta.is_dir() {
            Vec::new()
        } else {
            read_head(&path)?
        };
        let format = Format::of(&path, meta.is_dir(), &head);
        if format_seen.is_some_and(|f| f != format) || (whole.is_some() && format.single_array()) {
            return Err(Error::Usage(
                "--input files must all be of one format (several NPY or IDX files, one per key, or one CSV, NPZ or image folder)".into(),
            ));
        }
        format_seen = Some(format);
        let path = absolute(&path)?;
        if format.single_array() {
            let key = key.unwrap_or_else(|| default_key.to_owned());
            let file = toml::Value::String(path.to_string_lossy().into_owned());
            if single.insert(key.clone(), file).is_some() {
                return Err(Error::Usage(format!("--input gives key `{key}` twice")));
            }
        } else if whole.replace((format, path)).is_some() || key.is_some() {
            return Err(Error::Usage(format!(
                "--input takes one {} (its keys come from the file, so no KEY= either)",
                format.kind()
            )));
        }
    }
    let Some(format) = format_seen else {
        return Err(Error::Usage("--input names no data".into()));
    };
    let table = match whole {
        Some((format, path)) => {
            let mut table = borrowed_settings(manifest, format.kind());
            let field = if format == Format::ImageFolder {
                "dir"
            } else {
                "file"
            };
            table.insert(
                field.into(),
                toml::Value::String(path.to_string_lossy().into_owned()),
            );
            table
        }
        None => toml::Table::from_iter([("files".to_owned(), toml::Value::Table(single))]),
    };
    Ok(InputData {
        kind: format.kind(),
        table,
        format,
    })
}

/// Opens the data `specs` name, and says its format. Single-array files without a key feed
/// `default_key`.
pub fn open(
    manifest: &Manifest,
    specs: &[String],
    default_key: &str,
) -> Result<(Arc<dyn Source>, Format)> {
    let data = describe(manifest, specs, default_key)?;
    let source: Arc<dyn Source> = if data.format == Format::Idx {
        let text = toml::to_string(&data.table).unwrap_or_default();
        let config: IdxConfig = fe_plugin_api::parse_config(&text)
            .map_err(|e| Error::Internal(format!("--input as IDX: {}", e.message())))?;
        Arc::new(IdxSource::open(&config, Path::new("."))?)
    } else {
        open_kind(data.kind, data.table, specs)?
    };
    Ok((source, data.format))
}

fn open_kind(kind: &str, table: toml::Table, specs: &[String]) -> Result<Arc<dyn Source>> {
    let text = toml::to_string(&table).unwrap_or_default();
    match crate::pipeline::formats::open(kind, &text, Path::new(".")) {
        Some(Ok(source)) => Ok(source),
        Some(Err(crate::pipeline::formats::OpenError::Data(e))) => Err(e),
        Some(Err(crate::pipeline::formats::OpenError::Config(e))) => Err(Error::Usage(format!(
            "--input {}: {}",
            specs.join(" "),
            e.message()
        ))),
        None => Err(Error::Internal(format!("no reader for `{kind}`"))),
    }
}

/// The settings of the manifest's first dataset of `kind`, less its file, so a CSV keeps its
/// columns and an image folder its keys and classes.
fn borrowed_settings(manifest: &Manifest, kind: &str) -> toml::Table {
    let mut table = manifest
        .pipeline
        .data
        .iter()
        .flat_map(|entry| entry.datasets.variants())
        .map(|(config, _)| config)
        .find(|config| config.kind == kind && config.split_from.is_none())
        .map(|config| config.config.clone())
        .unwrap_or_default();
    table.remove("file");
    table.remove("dir");
    table
}

fn read_head(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut head = Vec::with_capacity(8);
    std::fs::File::open(path)
        .and_then(|f| f.take(8).read_to_end(&mut head))
        .map_err(|e| Error::data(path, format!("cannot read --input: {e}")))?;
    Ok(head)
}

fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).map_err(|e| Error::data(path, format!("cannot resolve: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_follows_the_file() {
        let of = |p: &str, dir: bool, head: &[u8]| Format::of(Path::new(p), dir, head);
        assert_eq!(of("images", true, b""), Format::ImageFolder);
        assert_eq!(of("a.npz", false, b""), Format::Npz);
        assert_eq!(of("a.bin", false, b"PK\x03\x04.."), Format::Npz);
        assert_eq!(of("a.npy", false, b""), Format::Npy);
        assert_eq!(of("a.data", false, b"\x93NUMPY\x01"), Format::Npy);
        assert_eq!(of("a.CSV", false, b"x,y"), Format::Csv);
        assert_eq!(
            of("t10k-images-idx3-ubyte", false, b"\0\0\x08\x03"),
            Format::Idx
        );
    }

    #[test]
    fn key_equals_file_splits_only_for_plain_keys() {
        assert_eq!(
            parse_spec("x=data/a.npy"),
            (Some("x".into()), PathBuf::from("data/a.npy"))
        );
        assert_eq!(
            parse_spec("data/a.npy"),
            (None, PathBuf::from("data/a.npy"))
        );
        assert_eq!(parse_spec("a/b=c.npy"), (None, PathBuf::from("a/b=c.npy")));
        assert_eq!(parse_spec("=c.npy"), (None, PathBuf::from("=c.npy")));
    }
}
