//! Parquet files: the footer (schema and rows per row group) is read once at open and kept;
//! a row group is read alone, only the columns used, when a sample in it is asked for.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;
use parquet::basic::Compression;
use parquet::file::metadata::ParquetMetaData;

/// One Parquet file.
pub struct ParquetFile {
    path: PathBuf,
    metadata: ArrowReaderMetadata,
    projection: Vec<usize>,
}

impl ParquetFile {
    /// Reads the file's footer.
    pub fn open(path: &Path) -> Result<Self, String> {
        let file = File::open(path).map_err(|e| format!("cannot read: {e}"))?;
        let metadata = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new())
            .map_err(|e| format!("not a Parquet file (or a corrupt one): {e}"))?;
        readable_codecs(metadata.metadata())?;
        Ok(Self {
            path: path.to_owned(),
            metadata,
            projection: Vec::new(),
        })
    }

    /// The schema as Arrow types (pyarrow's own, where the file records it).
    pub fn schema(&self) -> SchemaRef {
        self.metadata.schema().clone()
    }

    /// Rows of each row group.
    pub fn group_rows(&self) -> Vec<u64> {
        let groups = self.metadata.metadata().row_groups();
        groups.iter().map(|g| g.num_rows().max(0) as u64).collect()
    }

    /// Reads only the top-level columns `projection` from here on.
    pub fn project(&mut self, projection: Vec<usize>) {
        self.projection = projection;
    }

    /// Row group `index`, decoded (the projected columns only, in file order).
    pub fn read(&self, index: usize) -> Result<RecordBatch, String> {
        let rows = self.group_rows().get(index).copied().unwrap_or(0);
        let file = File::open(&self.path).map_err(|e| format!("cannot read: {e}"))?;
        let mask = ProjectionMask::roots(
            self.metadata.parquet_schema(),
            self.projection.iter().copied(),
        );
        let reader =
            ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.metadata.clone())
                .with_row_groups(vec![index])
                .with_projection(mask)
                .with_batch_size(rows.max(1) as usize)
                .build()
                .map_err(|e| format!("row group {index}: {e}"))?;
        let batches = reader
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("row group {index}: {e}"))?;
        let schema = match batches.first() {
            Some(first) => first.schema(),
            None => return Err(format!("row group {index} holds no rows")),
        };
        arrow_select::concat::concat_batches(&schema, &batches)
            .map_err(|e| format!("row group {index}: {e}"))
    }

    /// The file, for errors.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Refuses, at start, a file with pages in a codec this build does not decode: otherwise the
/// run would stop at the first sample of that row group with the parquet crate's "disabled
/// feature" message, which names a Rust crate instead of the codec.
fn readable_codecs(metadata: &ParquetMetaData) -> Result<(), String> {
    for (g, group) in metadata.row_groups().iter().enumerate() {
        for column in group.columns() {
            let codec = column.compression();
            if !matches!(
                codec,
                Compression::UNCOMPRESSED | Compression::SNAPPY | Compression::ZSTD(_)
            ) {
                return Err(format!(
                    "column `{}` (row group {g}) is compressed with {codec}: fe-host reads \
                     uncompressed, snappy and zstd Parquet (rewrite it, e.g. pyarrow's \
                     `pq.write_table(pq.read_table(src), dst, compression=\"zstd\")`)",
                    column.column_path().string()
                ));
            }
        }
    }
    Ok(())
}
