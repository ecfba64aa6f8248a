//! `type = "parquet"` and `type = "arrow"`: columnar tables, one sample per row, one key per
//! column (Hugging Face `datasets`, pandas' `to_parquet`, Spark, pyarrow).
//!
//! At open only the footers (Parquet) or message headers (Arrow IPC) are read: the schema and
//! the rows of each row group (record batch), so sample `i` maps to (file, group, row) and the
//! dataset is a source of samples by position like every other — each sample once per pass,
//! shared between ranks and workers, exact mid-epoch resume. A worker decodes one group at a
//! time, only the columns used, and keeps the last [`CACHED_GROUPS`] it read: memory stays at a
//! few row groups per worker whatever the table's size. A shuffled epoch is read group by
//! group (the groups in a seeded order, the rows of each shuffled) so that a worker decodes
//! each group about once per epoch instead of once per sample.

mod convert;
mod files;
mod ipc;
mod parquet;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use serde::Deserialize;
use tch::Tensor;

use crate::error::{Error, Result};
use crate::pipeline::Source;

/// `type = "parquet"` and `type = "arrow"`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// A file, a directory (its `.parquet` / `.arrow` files) or a glob in the file name, or a
    /// list of them; relative to the manifest.
    pub path: Paths,
    /// Columns to read: names (each its own key) or `{ column = "key" }`; all when absent.
    #[serde(default)]
    pub columns: Option<Columns>,
}

/// One path or several.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Paths {
    /// `"data/train-*.parquet"`.
    One(String),
    /// `["a.parquet", "b.parquet"]`.
    Many(Vec<String>),
}

/// Which columns, under which keys.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Columns {
    /// Column names, in key order.
    Names(Vec<String>),
    /// Column → key, in the file's column order.
    Keys(BTreeMap<String, String>),
}

/// The two layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Apache Parquet.
    Parquet,
    /// Arrow IPC, file or stream format.
    Arrow,
}

enum TableFile {
    Parquet(parquet::ParquetFile),
    Arrow(ipc::IpcFile),
}

impl TableFile {
    fn open(format: Format, path: &Path) -> std::result::Result<Self, String> {
        Ok(match format {
            Format::Parquet => TableFile::Parquet(parquet::ParquetFile::open(path)?),
            Format::Arrow => TableFile::Arrow(ipc::IpcFile::open(path)?),
        })
    }

    fn schema(&self) -> SchemaRef {
        match self {
            TableFile::Parquet(f) => f.schema(),
            TableFile::Arrow(f) => f.schema(),
        }
    }

    fn group_rows(&self) -> Vec<u64> {
        match self {
            TableFile::Parquet(f) => f.group_rows(),
            TableFile::Arrow(f) => f.group_rows(),
        }
    }

    fn project(&mut self, projection: Vec<usize>) -> std::result::Result<(), String> {
        match self {
            TableFile::Parquet(f) => {
                f.project(projection);
                Ok(())
            }
            TableFile::Arrow(f) => f.project(projection),
        }
    }

    fn read(&self, group: usize) -> std::result::Result<RecordBatch, String> {
        match self {
            TableFile::Parquet(f) => f.read(group),
            TableFile::Arrow(f) => f.read(group),
        }
    }

    fn path(&self) -> &Path {
        match self {
            TableFile::Parquet(f) => f.path(),
            TableFile::Arrow(f) => f.path(),
        }
    }
}

/// Where a row group is.
struct Group {
    file: usize,
    index: usize,
    /// The file's row number of the group's first row (errors name rows of the file).
    first_row: u64,
}

/// The rows of a set of Parquet or Arrow files, in file order.
pub struct TableSource {
    id: usize,
    files: Vec<TableFile>,
    groups: Vec<Group>,
    /// Global index of each group's first row, then the total.
    first: Vec<u64>,
    /// Column names, in key order.
    columns: Vec<String>,
    keys: Vec<String>,
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

/// Row groups a worker keeps decoded, per dataset: a batch that straddles two groups
/// decodes each once.
pub const CACHED_GROUPS: usize = 2;

thread_local! {
    /// (dataset id, group, its used columns in key order), most recently used last.
    static DECODED: RefCell<Vec<(usize, usize, Vec<ArrayRef>)>> = const { RefCell::new(Vec::new()) };
}

impl TableSource {
    /// Lists the files and reads their footers.
    pub fn open(config: &TableConfig, dir: &Path, format: Format) -> Result<Self> {
        let extension = match format {
            Format::Parquet => "parquet",
            Format::Arrow => "arrow",
        };
        let patterns = match &config.path {
            Paths::One(one) => vec![one.clone()],
            Paths::Many(many) => many.clone(),
        };
        let mut paths: Vec<PathBuf> = Vec::new();
        for pattern in &patterns {
            paths.extend(files::expand(pattern, dir, extension)?);
        }
        if paths.is_empty() {
            return Err(Error::data(dir, "`path` names no files"));
        }
        let mut files = Vec::with_capacity(paths.len());
        for path in &paths {
            files.push(TableFile::open(format, path).map_err(|e| Error::data(path, e))?);
        }
        let (columns, keys) = select(&files[0].schema(), config.columns.as_ref())
            .map_err(|e| Error::data(&paths[0], e))?;
        let first_schema = files[0].schema();
        let (mut groups, mut first) = (Vec::new(), vec![0u64]);
        for (f, file) in files.iter_mut().enumerate() {
            let schema = file.schema();
            let mut projection = Vec::with_capacity(columns.len());
            for name in &columns {
                let index = schema.index_of(name).map_err(|_| {
                    Error::data(
                        file.path(),
                        format!("has no column `{name}` (the first file has)"),
                    )
                })?;
                let found = schema.field(index).data_type();
                if let Ok(expected) = first_schema.field_with_name(name) {
                    if expected.data_type() != found {
                        return Err(Error::data(
                            file.path(),
                            format!(
                                "column `{name}` is {found}, but {} in the first file",
                                expected.data_type()
                            ),
                        ));
                    }
                }
                projection.push(index);
            }
            projection.sort_unstable();
            file.project(projection)
                .map_err(|e| Error::data(file.path(), e))?;
            let mut row = 0u64;
            for (index, rows) in file.group_rows().into_iter().enumerate() {
                // Empty groups hold no sample; keeping them out keeps `first` strictly rising.
                if rows > 0 {
                    groups.push(Group {
                        file: f,
                        index,
                        first_row: row,
                    });
                    first.push(first.last().copied().unwrap_or(0) + rows);
                }
                row += rows;
            }
        }
        Ok(Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            files,
            groups,
            first,
            columns,
            keys,
        })
    }

    /// Rows per row group, in order.
    pub fn group_sizes(&self) -> Vec<u64> {
        self.first.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// Group `g`'s used columns, decoded by this thread (or found among those it keeps).
    fn with_group<T>(
        &self,
        g: usize,
        f: impl FnOnce(&[ArrayRef]) -> std::result::Result<T, String>,
    ) -> std::result::Result<T, String> {
        DECODED.with(|decoded| {
            let mut decoded = decoded.borrow_mut();
            let at = decoded
                .iter()
                .position(|(id, group, _)| *id == self.id && *group == g);
            let entry = match at {
                Some(at) => decoded.remove(at),
                None => {
                    let mine: Vec<usize> = (0..decoded.len())
                        .filter(|&i| decoded[i].0 == self.id)
                        .collect();
                    if mine.len() >= CACHED_GROUPS {
                        decoded.remove(mine[0]);
                    }
                    (self.id, g, self.decode(g)?)
                }
            };
            let out = f(&entry.2);
            decoded.push(entry);
            out
        })
    }

    /// Reads group `g` and checks its used columns hold no null.
    fn decode(&self, g: usize) -> std::result::Result<Vec<ArrayRef>, String> {
        let group = &self.groups[g];
        let file = &self.files[group.file];
        let batch = file
            .read(group.index)
            .map_err(|e| format!("{}: {e}", file.path().display()))?;
        let mut out = Vec::with_capacity(self.columns.len());
        for name in &self.columns {
            let column = batch.column_by_name(name).ok_or_else(|| {
                format!(
                    "{}: internal error: column `{name}` was not read",
                    file.path().display()
                )
            })?;
            if let Some(row) = convert::first_null(column) {
                return Err(format!(
                    "{}, column `{name}`, row {}: null (fe-host reads no missing values; fill or drop them before training)",
                    file.path().display(),
                    group.first_row + row as u64
                ));
            }
            out.push(column.clone());
        }
        Ok(out)
    }
}

/// The columns to read and their keys: `columns` checked against the schema, each of a type
/// fe-host reads.
fn select(
    schema: &SchemaRef,
    columns: Option<&Columns>,
) -> std::result::Result<(Vec<String>, Vec<String>), String> {
    let all: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let (names, keys): (Vec<String>, Vec<String>) = match columns {
        None => (all.clone(), all.clone()),
        Some(Columns::Names(names)) => (names.clone(), names.clone()),
        Some(Columns::Keys(map)) => all
            .iter()
            .filter_map(|c| map.get(c).map(|k| (c.clone(), k.clone())))
            .unzip(),
    };
    let asked: Vec<&String> = match columns {
        Some(Columns::Keys(map)) => map.keys().collect(),
        _ => names.iter().collect(),
    };
    if let Some(missing) = asked.into_iter().find(|n| !all.contains(*n)) {
        return Err(format!(
            "has no column `{missing}` (it has {})",
            all.join(", ")
        ));
    }
    if names.is_empty() {
        return Err("`columns` selects no column".into());
    }
    for (i, key) in keys.iter().enumerate() {
        if keys[..i].contains(key) {
            return Err(format!("two columns would both be key `{key}`"));
        }
    }
    for name in &names {
        let field = schema.field_with_name(name).map_err(|e| e.to_string())?;
        convert::check(field.data_type()).map_err(|e| format!("column `{name}`: {e}"))?;
    }
    Ok((names, keys))
}

/// A shuffled pass read group by group: the groups in a seeded order, the rows of each in a
/// seeded order of their own.
pub fn group_order(first: &[u64], seed: u64) -> Vec<u64> {
    let mut groups: Vec<u64> = (0..first.len().saturating_sub(1) as u64).collect();
    crate::pipeline::order::shuffle_in_place(&mut groups, seed);
    let mut out = Vec::with_capacity(first.last().copied().unwrap_or(0) as usize);
    for g in groups {
        let mut rows: Vec<u64> = (first[g as usize]..first[g as usize + 1]).collect();
        crate::pipeline::order::shuffle_in_place(&mut rows, crate::rng::mix(seed, g + 1));
        out.extend(rows);
    }
    out
}

impl Source for TableSource {
    fn len(&self) -> u64 {
        self.first.last().copied().unwrap_or(0)
    }

    fn keys(&self) -> &[String] {
        &self.keys
    }

    fn get(&self, index: u64) -> std::result::Result<Vec<Tensor>, String> {
        if index >= self.len() {
            return Err(format!("sample {index} of {}", self.len()));
        }
        let g = self.first.partition_point(|&f| f <= index) - 1;
        let row = (index - self.first[g]) as usize;
        self.with_group(g, |columns| {
            let group = &self.groups[g];
            columns
                .iter()
                .zip(&self.columns)
                .map(|(column, name)| {
                    convert::value(column, row).map_err(|e| {
                        format!(
                            "{}, column `{name}`, row {}: {e}",
                            self.files[group.file].path().display(),
                            group.first_row + row as u64
                        )
                    })
                })
                .collect()
        })
    }

    fn stream_order(&self, seed: u64) -> Option<Vec<u64>> {
        Some(group_order(&self.first, seed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_order_is_a_seeded_permutation_that_keeps_groups_together() {
        let first = [0u64, 3, 10, 11, 20];
        let a = group_order(&first, 7);
        assert_eq!(a, group_order(&first, 7));
        assert_ne!(a, group_order(&first, 8));
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..20).collect::<Vec<_>>());
        // Every group's rows come out together.
        let group = |i: u64| first.partition_point(|&f| f <= i);
        let switches = a.windows(2).filter(|w| group(w[0]) != group(w[1])).count();
        assert_eq!(switches, 3, "{a:?}");
    }
}
