//! `type = "csv"`: one sample per row, one key per column (FastEstimator's `CSVDataset`).
//!
//! Each column gets one type for the whole file, inferred from its values as pandas would:
//!
//! * every value an integer (`-3`, `+7`; surrounding spaces ignored) → an int64 scalar;
//! * otherwise every value a number or empty → a float32 scalar, empty values NaN. float32,
//!   not numpy's float64, because that is what models consume; a value float32 cannot hold
//!   (`1e39`) is an error rather than a silent infinity;
//! * otherwise → text: a 1-D uint8 tensor of the value's UTF-8 bytes, as written.
//!
//! Columns listed in `paths` are always text and must not be empty; each value is resolved
//! against the CSV file's directory, so the file and its images can move together.
//!
//! Header names are trimmed of surrounding spaces and must be unique and non-empty (they are
//! keys); without a header (`header = false`) the columns are named `0`, `1`, ... Quoting
//! follows RFC 4180, blank lines are skipped and a UTF-8 byte-order mark is ignored. The whole
//! file is read into memory at open: CSV rows cannot be found without reading every one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};
use tch::Tensor;

use super::stack_key;
use crate::error::{Error, Result};
use crate::pipeline::Source;

/// `type = "csv"`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct CsvConfig {
    /// The CSV file (relative to the manifest).
    pub file: PathBuf,
    /// Columns to read, in key order; every column when absent.
    #[serde(default)]
    pub columns: Option<Vec<String>>,
    /// Field separator: one ASCII character.
    #[serde(default = "comma", deserialize_with = "one_ascii_byte")]
    pub delimiter: u8,
    /// Whether the first line names the columns; without one, columns are named `0`, `1`, ...
    #[serde(default = "yes")]
    pub header: bool,
    /// Columns holding file paths relative to the CSV file.
    #[serde(default)]
    pub paths: Vec<String>,
}

fn comma() -> u8 {
    b','
}

fn yes() -> bool {
    true
}

fn one_ascii_byte<'de, D: Deserializer<'de>>(deserializer: D) -> std::result::Result<u8, D::Error> {
    let text = String::deserialize(deserializer)?;
    match text.as_bytes() {
        [b] if b.is_ascii() && !matches!(b, b'"' | b'\n' | b'\r') => Ok(*b),
        _ => Err(serde::de::Error::custom(format!(
            "the delimiter must be one ASCII character other than a quote or a line break, got {text:?}"
        ))),
    }
}

/// How to read the bytes of a CSV file.
#[derive(Debug, Clone)]
pub struct CsvOptions {
    /// Field separator.
    pub delimiter: u8,
    /// Whether the first record names the columns.
    pub header: bool,
    /// Columns to keep, in order; all when `None`.
    pub columns: Option<Vec<String>>,
    /// Columns that hold paths: always text, never empty.
    pub paths: Vec<String>,
}

impl Default for CsvOptions {
    fn default() -> Self {
        Self {
            delimiter: b',',
            header: true,
            columns: None,
            paths: Vec::new(),
        }
    }
}

/// One column's values, typed.
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    /// Every value was an integer.
    Int(Vec<i64>),
    /// Every value was a number or empty (NaN).
    Float(Vec<f32>),
    /// Anything else, as written.
    Text(Vec<String>),
}

/// The kept columns of a CSV file.
#[derive(Debug, Clone, PartialEq)]
pub struct CsvTable {
    /// Column names, in key order.
    pub names: Vec<String>,
    /// Values, one entry per name.
    pub columns: Vec<Column>,
    /// Number of data rows.
    pub rows: usize,
}

/// Parses the bytes of a CSV file; errors name the line (1-based) and column.
pub fn parse(bytes: &[u8], options: &CsvOptions) -> std::result::Result<CsvTable, String> {
    let mut reader = ::csv::ReaderBuilder::new()
        .delimiter(options.delimiter)
        .has_headers(false)
        .flexible(true)
        .from_reader(bytes);
    let mut records = reader.byte_records();
    let record_error = |e: ::csv::Error| match e.position() {
        Some(pos) => format!("line {}: {e}", pos.line()),
        None => e.to_string(),
    };
    let Some(first) = records.next().transpose().map_err(record_error)? else {
        return Err(if options.header {
            "empty file: there is no header line".into()
        } else {
            "empty file: there are no rows".into()
        });
    };
    let width = first.len();
    let (all_names, pending) = if options.header {
        (header_names(&first)?, None)
    } else {
        ((0..width).map(|i| i.to_string()).collect(), Some(first))
    };
    let selected = select(&all_names, options)?;

    let mut raw: Vec<Vec<String>> = vec![Vec::new(); selected.len()];
    let mut lines: Vec<u64> = Vec::new();
    for record in pending.into_iter().map(Ok).chain(records) {
        let record = record.map_err(record_error)?;
        let line = record.position().map(|p| p.line()).unwrap_or(0);
        if record.len() != width {
            let source = if options.header {
                "the header has"
            } else {
                "the first row has"
            };
            return Err(format!(
                "line {line}: {} fields, expected {width} ({source} {width})",
                record.len()
            ));
        }
        for (values, &column) in raw.iter_mut().zip(&selected) {
            let field = record.get(column).unwrap_or_default();
            let text = std::str::from_utf8(field).map_err(|e| {
                format!(
                    "line {line}, column `{}`: not valid UTF-8 ({e})",
                    all_names[column]
                )
            })?;
            values.push(text.to_owned());
        }
        lines.push(line);
    }
    if lines.is_empty() {
        return Err("no data rows: the file has only a header line".into());
    }
    let names: Vec<String> = selected.iter().map(|&i| all_names[i].clone()).collect();
    let columns = names
        .iter()
        .zip(raw)
        .map(|(name, values)| infer(name, values, &lines, options.paths.contains(name)))
        .collect::<std::result::Result<Vec<_>, String>>()?;
    Ok(CsvTable {
        names,
        columns,
        rows: lines.len(),
    })
}

fn header_names(record: &::csv::ByteRecord) -> std::result::Result<Vec<String>, String> {
    let line = record.position().map(|p| p.line()).unwrap_or(1);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut names = Vec::with_capacity(record.len());
    for (index, field) in record.iter().enumerate() {
        let name = std::str::from_utf8(field)
            .map_err(|e| {
                format!(
                    "line {line}: the name of column {} is not valid UTF-8 ({e})",
                    index + 1
                )
            })?
            .trim()
            .to_owned();
        if name.is_empty() {
            return Err(format!(
                "line {line}: column {} has an empty name; every column needs one to be a key",
                index + 1
            ));
        }
        if let Some(earlier) = seen.insert(name.clone(), index) {
            return Err(format!(
                "line {line}: column `{name}` appears twice (columns {} and {})",
                earlier + 1,
                index + 1
            ));
        }
        names.push(name);
    }
    Ok(names)
}

/// Indices of the kept columns, in key order.
fn select(all: &[String], options: &CsvOptions) -> std::result::Result<Vec<usize>, String> {
    let find = |name: &str| all.iter().position(|n| n == name);
    let selected: Vec<usize> = match &options.columns {
        None => (0..all.len()).collect(),
        Some(wanted) => {
            let mut selected = Vec::with_capacity(wanted.len());
            for name in wanted {
                let index = find(name).ok_or_else(|| {
                    format!(
                        "`columns` names `{name}`, which is not a column of the file (its columns: {})",
                        all.join(", ")
                    )
                })?;
                if selected.contains(&index) {
                    return Err(format!("`columns` names `{name}` twice"));
                }
                selected.push(index);
            }
            selected
        }
    };
    for name in &options.paths {
        match find(name) {
            Some(index) if selected.contains(&index) => {}
            Some(_) => {
                return Err(format!(
                    "`paths` names `{name}`, which is not among `columns`"
                ))
            }
            None => {
                return Err(format!(
                    "`paths` names `{name}`, which is not a column of the file (its columns: {})",
                    all.join(", ")
                ))
            }
        }
    }
    Ok(selected)
}

fn infer(
    name: &str,
    values: Vec<String>,
    lines: &[u64],
    path: bool,
) -> std::result::Result<Column, String> {
    if path {
        if let Some(row) = values.iter().position(String::is_empty) {
            return Err(format!("line {}, column `{name}`: empty path", lines[row]));
        }
        return Ok(Column::Text(values));
    }
    if let Some(ints) = values
        .iter()
        .map(|v| v.trim().parse::<i64>().ok())
        .collect::<Option<Vec<i64>>>()
    {
        return Ok(Column::Int(ints));
    }
    let numeric = values.iter().any(|v| !v.trim().is_empty())
        && values.iter().all(|v| {
            let v = v.trim();
            v.is_empty() || v.parse::<f32>().is_ok()
        });
    if !numeric {
        return Ok(Column::Text(values));
    }
    let mut floats = Vec::with_capacity(values.len());
    for (value, line) in values.iter().zip(lines) {
        let text = value.trim();
        let x = if text.is_empty() {
            f32::NAN
        } else {
            text.parse::<f32>().unwrap_or(f32::NAN)
        };
        let spelled_infinite = text.to_ascii_lowercase().contains("inf");
        if x.is_infinite() && !spelled_infinite {
            return Err(format!(
                "line {line}, column `{name}`: {text} is out of the range of float32, the type of numeric columns"
            ));
        }
        floats.push(x);
    }
    Ok(Column::Float(floats))
}

/// A CSV file read into memory.
pub struct CsvSource {
    keys: Vec<String>,
    columns: Vec<Column>,
    rows: usize,
}

impl CsvSource {
    /// Reads and types the file; `paths` columns are resolved against its directory.
    pub fn open(config: &CsvConfig, dir: &Path) -> Result<Self> {
        let path = dir.join(&config.file);
        let bytes =
            std::fs::read(&path).map_err(|e| Error::data(&path, format!("cannot read: {e}")))?;
        let options = CsvOptions {
            delimiter: config.delimiter,
            header: config.header,
            columns: config.columns.clone(),
            paths: config.paths.clone(),
        };
        let mut table = parse(&bytes, &options).map_err(|message| Error::data(&path, message))?;
        let base = path.parent().unwrap_or(Path::new(""));
        for (name, column) in table.names.iter().zip(table.columns.iter_mut()) {
            if let (true, Column::Text(values)) = (config.paths.contains(name), column) {
                for value in values.iter_mut() {
                    let joined = base.join(value.as_str());
                    *value = joined.to_str().map(str::to_owned).ok_or_else(|| {
                        Error::data(
                            &path,
                            format!("column `{name}`: {} is not valid UTF-8, so it cannot be passed on as text", joined.display()),
                        )
                    })?;
                }
            }
        }
        Ok(Self {
            keys: table.names,
            columns: table.columns,
            rows: table.rows,
        })
    }

    /// The typed columns, in `keys()` order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }
}

fn scalar<T: tch::kind::Element>(value: T) -> std::result::Result<Tensor, String> {
    Tensor::from_slice(&[value])
        .f_reshape([0i64; 0])
        .map_err(crate::tch_message)
}

impl CsvSource {
    fn value(&self, column: &Column, row: usize) -> std::result::Result<Tensor, String> {
        match column {
            Column::Int(v) => scalar(v[row]),
            Column::Float(v) => scalar(v[row]),
            Column::Text(v) => Ok(fe_plugin_api::text_tensor(&v[row])),
        }
    }

    fn row(&self, index: u64) -> std::result::Result<usize, String> {
        usize::try_from(index)
            .ok()
            .filter(|&row| row < self.rows)
            .ok_or_else(|| {
                format!(
                    "sample {index} is out of range (the file has {} rows)",
                    self.rows
                )
            })
    }
}

impl Source for CsvSource {
    fn len(&self) -> u64 {
        self.rows as u64
    }

    fn keys(&self) -> &[String] {
        &self.keys
    }

    fn get(&self, index: u64) -> std::result::Result<Vec<Tensor>, String> {
        let row = self.row(index)?;
        self.columns.iter().map(|c| self.value(c, row)).collect()
    }

    fn get_batch(&self, indices: &[u64]) -> std::result::Result<Vec<Tensor>, String> {
        let rows = indices
            .iter()
            .map(|&i| self.row(i))
            .collect::<std::result::Result<Vec<usize>, String>>()?;
        self.columns
            .iter()
            .zip(&self.keys)
            .map(|(column, key)| match column {
                Column::Int(v) => Ok(Tensor::from_slice(
                    &rows.iter().map(|&r| v[r]).collect::<Vec<_>>(),
                )),
                Column::Float(v) => Ok(Tensor::from_slice(
                    &rows.iter().map(|&r| v[r]).collect::<Vec<_>>(),
                )),
                Column::Text(_) => {
                    let values = rows
                        .iter()
                        .map(|&r| self.value(column, r))
                        .collect::<std::result::Result<Vec<_>, String>>()?;
                    stack_key(key, &values)
                }
            })
            .collect()
    }
}
