//! Arrow IPC files, in both layouts: the file format (`ARROW1` magic and a footer listing the
//! record batches; pyarrow's `ipc.new_file`, Feather v2) and the stream format (messages one
//! after another; pyarrow's `ipc.new_stream`, and what Hugging Face `datasets` keeps in its
//! cache as `*.arrow`).
//!
//! Either way the file is memory-mapped and, at open, only message headers are parsed: each
//! record batch's position and row count. A record batch then plays the part a Parquet row
//! group plays, and is decoded alone when a sample in it is asked for.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use arrow_ipc::reader::FileDecoder;
use arrow_ipc::{Block, MessageHeader, MetadataVersion};
use arrow_schema::SchemaRef;

use crate::pipeline::formats::Bytes;

const MAGIC: &[u8] = b"ARROW1";
const CONTINUATION: [u8; 4] = [0xff; 4];

/// One IPC file: where its record batches are, and a decoder for the columns used.
pub struct IpcFile {
    path: PathBuf,
    bytes: Bytes,
    schema: SchemaRef,
    version: MetadataVersion,
    dictionaries: Vec<Block>,
    batches: Vec<(Block, u64)>,
    decoder: Option<FileDecoder>,
}

impl IpcFile {
    /// Maps the file and indexes its record batches.
    pub fn open(path: &Path) -> Result<Self, String> {
        // The caller names the file; keep only the reason.
        let bytes = Bytes::map(path).map_err(|e| match e {
            crate::error::Error::Data { message, .. } => message,
            other => other.to_string(),
        })?;
        let data = bytes.as_slice();
        let layout = if data.starts_with(MAGIC) {
            file_layout(data)
        } else {
            stream_layout(data)
        };
        let (schema, version, dictionaries, blocks) = layout.map_err(|e| {
            format!("not an Arrow IPC file (pyarrow's ipc.new_file or ipc.new_stream): {e}")
        })?;
        let mut batches = Vec::with_capacity(blocks.len());
        for block in blocks {
            let message = message_at(data, &block)?;
            let rows = message
                .header_as_record_batch()
                .ok_or("a record-batch block holds another message")?
                .length();
            batches.push((
                block,
                u64::try_from(rows).map_err(|_| "a negative row count")?,
            ));
        }
        Ok(Self {
            path: path.to_owned(),
            bytes,
            schema,
            version,
            dictionaries,
            batches,
            decoder: None,
        })
    }

    /// The schema the file declares.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Rows of each record batch.
    pub fn group_rows(&self) -> Vec<u64> {
        self.batches.iter().map(|(_, rows)| *rows).collect()
    }

    /// Decodes only the columns `projection` from here on (and reads the dictionaries).
    pub fn project(&mut self, projection: Vec<usize>) -> Result<(), String> {
        let mut decoder =
            FileDecoder::new(self.schema.clone(), self.version).with_projection(projection);
        for block in &self.dictionaries {
            decoder
                .read_dictionary(block, &self.block_bytes(block)?)
                .map_err(|e| format!("dictionary batch: {e}"))?;
        }
        self.decoder = Some(decoder);
        Ok(())
    }

    /// Record batch `index`, decoded (the projected columns only).
    pub fn read(&self, index: usize) -> Result<RecordBatch, String> {
        let (block, _) = self.batches.get(index).ok_or("no such record batch")?;
        let decoder = self
            .decoder
            .as_ref()
            .ok_or("internal error: no projection set")?;
        decoder
            .read_record_batch(block, &self.block_bytes(block)?)
            .map_err(|e| format!("record batch {index}: {e}"))?
            .ok_or_else(|| format!("record batch {index} is empty"))
    }

    /// A copy of the block's bytes: one record batch, bounded, and aligned as arrow wants.
    fn block_bytes(&self, block: &Block) -> Result<Buffer, String> {
        let data = self.bytes.as_slice();
        let (start, end) = block_range(data, block)?;
        Ok(Buffer::from_slice_ref(&data[start..end]))
    }

    /// The file, for errors.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

type Layout = (SchemaRef, MetadataVersion, Vec<Block>, Vec<Block>);

/// File format: `ARROW1`, padding, the stream, the footer, its length, `ARROW1`.
fn file_layout(data: &[u8]) -> Result<Layout, String> {
    let tail = data
        .len()
        .checked_sub(10)
        .filter(|&t| t >= 8 && data.ends_with(MAGIC))
        .ok_or("the file is truncated (no footer)")?;
    let mut length = [0u8; 4];
    length.copy_from_slice(&data[tail..tail + 4]);
    let footer_len = usize::try_from(i32::from_le_bytes(length)).map_err(|_| "bad footer")?;
    let start = tail.checked_sub(footer_len).ok_or("bad footer length")?;
    let footer = arrow_ipc::root_as_footer(&data[start..tail]).map_err(|e| e.to_string())?;
    let schema = footer.schema().ok_or("the footer has no schema")?;
    let dictionaries = footer.dictionaries().map(|v| v.iter().copied().collect());
    let batches = footer.recordBatches().map(|v| v.iter().copied().collect());
    Ok((
        Arc::new(arrow_ipc::convert::fb_to_schema(schema)),
        footer.version(),
        dictionaries.unwrap_or_default(),
        batches.unwrap_or_default(),
    ))
}

/// Stream format: messages (a length-prefixed flatbuffer header, then a body) until an
/// end-of-stream marker or the end of the file.
fn stream_layout(data: &[u8]) -> Result<Layout, String> {
    let (mut schema, mut version) = (None, MetadataVersion::V5);
    let (mut dictionaries, mut batches) = (Vec::new(), Vec::new());
    let mut at = 0usize;
    while at + 4 <= data.len() {
        let word = |i: usize| -> Result<u32, String> {
            let bytes = data.get(i..i + 4).ok_or("truncated message header")?;
            Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
        };
        // Since format 0.15 a message starts with 0xFFFFFFFF; older writers omit it.
        let prefix = if data[at..at + 4] == CONTINUATION {
            8
        } else {
            4
        };
        let meta = word(at + prefix - 4)? as usize;
        if meta == 0 {
            break;
        }
        let meta_len = i32::try_from(prefix + meta).map_err(|_| "message header too long")?;
        let probe = Block::new(at as i64, meta_len, 0);
        let message = message_at(data, &probe)?;
        let block = Block::new(at as i64, meta_len, message.bodyLength());
        match message.header_type() {
            MessageHeader::Schema => {
                let fb = message.header_as_schema().ok_or("bad schema message")?;
                schema = Some(Arc::new(arrow_ipc::convert::fb_to_schema(fb)));
                version = message.version();
            }
            MessageHeader::DictionaryBatch => dictionaries.push(block),
            MessageHeader::RecordBatch => batches.push(block),
            other => return Err(format!("unexpected {other:?} message")),
        }
        at = block_range(data, &block)?.1;
    }
    let schema = schema.ok_or("no schema message")?;
    Ok((schema, version, dictionaries, batches))
}

/// Bytes `start..end` of a block, checked against the file.
fn block_range(data: &[u8], block: &Block) -> Result<(usize, usize), String> {
    let start = usize::try_from(block.offset()).ok();
    let len = usize::try_from(block.metaDataLength())
        .ok()
        .zip(usize::try_from(block.bodyLength()).ok())
        .and_then(|(m, b)| m.checked_add(b));
    match start
        .zip(len)
        .and_then(|(s, l)| Some((s, s.checked_add(l)?)))
    {
        Some((s, e)) if e <= data.len() => Ok((s, e)),
        _ => Err(format!(
            "a message at byte {} runs past the end of the file (truncated?)",
            block.offset()
        )),
    }
}

/// The header of the message a block starts with.
fn message_at<'a>(data: &'a [u8], block: &Block) -> Result<arrow_ipc::Message<'a>, String> {
    let (start, _) = block_range(data, block)?;
    let end = start + block.metaDataLength() as usize;
    let header = &data[start..end];
    let skip = if header.starts_with(&CONTINUATION) {
        8
    } else {
        4
    };
    let flatbuffer = header.get(skip..).ok_or("truncated message header")?;
    arrow_ipc::root_as_message(flatbuffer).map_err(|e| format!("bad message header: {e}"))
}
