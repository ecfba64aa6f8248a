//! Reading one sample's members, and turning them into tensors.
//!
//! Local shards are read in place (`pread` at the offsets the index found). A stream (`http`,
//! `pipe:`) cannot seek, so each pipeline worker keeps one open stream and reads forward: the
//! samples it passes on the way to the one asked for are kept in a bounded per-worker cache
//! (the epoch order is shard by shard with a bounded shuffle buffer, so what a worker passes
//! is mostly what it is asked for next). A sample behind the stream and not cached reopens the
//! shard: correct, only slower.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::Read;
use std::os::unix::fs::FileExt;

use tch::Tensor;

use super::index::{read_exact, Member};
use super::urls::Shard;
use crate::pipeline::formats::npy::NpyArray;
use crate::pipeline::formats::Bytes;

/// One worker's open shard, per dataset.
struct Cursor {
    source: usize,
    shard: usize,
    stream: Stream,
    /// Samples read past, as `(global index, member bytes)`, oldest first.
    cache: VecDeque<(u64, Vec<Vec<u8>>)>,
}

enum Stream {
    File(std::fs::File),
    Forward {
        reader: Box<dyn Read + Send>,
        position: u64,
    },
}

thread_local! {
    static CURSORS: RefCell<Vec<Cursor>> = const { RefCell::new(Vec::new()) };
}

/// What [`read_sample`] needs to know about the dataset.
pub struct Layout<'a> {
    /// A number unique to the dataset (per-thread cursors are keyed by it).
    pub source: usize,
    /// Its shards.
    pub shards: &'a [Shard],
    /// Global index of each shard's first sample, plus the total at the end.
    pub first: &'a [u64],
    /// Members of every sample, in key order.
    pub members: &'a [Box<[Member]>],
    /// Member names for errors: sample names and key extensions.
    pub names: &'a dyn Fn(u64, usize) -> String,
    /// Samples a worker may keep while reading a stream forward.
    pub cache: usize,
}

/// The bytes of every member of sample `index`, in key order.
pub fn read_sample(layout: &Layout<'_>, index: u64) -> Result<Vec<Vec<u8>>, String> {
    let shard = layout.first.partition_point(|&f| f <= index) - 1;
    CURSORS.with(|cursors| {
        let mut cursors = cursors.borrow_mut();
        let found = cursors
            .iter()
            .position(|c| c.source == layout.source && c.shard == shard);
        // Most recently used last: a shuffle buffer mixes the ends of a few neighbouring
        // shards, so each worker keeps a few open rather than reopening at every switch.
        let mut cursor = match found {
            Some(at) => cursors.remove(at),
            None => {
                let mine: Vec<usize> = (0..cursors.len())
                    .filter(|&i| cursors[i].source == layout.source)
                    .collect();
                if mine.len() >= OPEN_SHARDS {
                    cursors.remove(mine[0]);
                }
                Cursor {
                    source: layout.source,
                    shard,
                    stream: open(&layout.shards[shard])?,
                    cache: VecDeque::new(),
                }
            }
        };
        let result = read_from(&mut cursor, layout, shard, index);
        if result.is_ok() {
            // After an error the stream is in an unknown state: it is dropped and reopened.
            cursors.push(cursor);
        }
        result
    })
}

/// Shards each worker keeps open per dataset.
const OPEN_SHARDS: usize = 4;

fn open(shard: &Shard) -> Result<Stream, String> {
    match shard {
        Shard::File(path) => std::fs::File::open(path)
            .map(Stream::File)
            .map_err(|e| format!("shard {}: cannot open: {e}", shard.name())),
        _ => shard
            .open()
            .map(|reader| Stream::Forward {
                reader,
                position: 0,
            })
            .map_err(|e| format!("shard {}: {e}", shard.name())),
    }
}

fn read_from(
    cursor: &mut Cursor,
    layout: &Layout<'_>,
    shard: usize,
    index: u64,
) -> Result<Vec<Vec<u8>>, String> {
    let name = |sample: u64, key: usize| {
        format!(
            "shard {}, member `{}`",
            layout.shards[shard].name(),
            (layout.names)(sample, key)
        )
    };
    let members = &layout.members[index as usize];
    if let Stream::File(file) = &cursor.stream {
        return members
            .iter()
            .enumerate()
            .map(|(key, m)| {
                let mut buffer = vec![0; m.size as usize];
                file.read_exact_at(&mut buffer, m.offset)
                    .map_err(|e| format!("{}: {e}", name(index, key)))?;
                Ok(buffer)
            })
            .collect();
    }
    if let Some(at) = cursor.cache.iter().position(|(i, _)| *i == index) {
        if let Some((_, bytes)) = cursor.cache.remove(at) {
            return Ok(bytes);
        }
    }
    let start = members.iter().map(|m| m.offset).min().unwrap_or(0);
    if matches!(cursor.stream, Stream::Forward { position, .. } if position > start) {
        cursor.stream = open(&layout.shards[shard])?;
        cursor.cache.clear();
    }
    // Read forward sample by sample, keeping the ones passed on the way.
    let mut sample = layout.first[shard];
    while sample < index {
        let first_offset = layout.members[sample as usize]
            .iter()
            .map(|m| m.offset)
            .min()
            .unwrap_or(0);
        let Stream::Forward { position, .. } = &cursor.stream else {
            break;
        };
        if first_offset >= *position && !cursor.cache.iter().any(|(i, _)| *i == sample) {
            let bytes = read_members(cursor, layout, sample, &name)?;
            if layout.cache > 0 {
                if cursor.cache.len() >= layout.cache {
                    cursor.cache.pop_front();
                }
                cursor.cache.push_back((sample, bytes));
            }
        }
        sample += 1;
    }
    read_members(cursor, layout, index, &name)
}

fn read_members(
    cursor: &mut Cursor,
    layout: &Layout<'_>,
    sample: u64,
    name: &dyn Fn(u64, usize) -> String,
) -> Result<Vec<Vec<u8>>, String> {
    let Stream::Forward { reader, position } = &mut cursor.stream else {
        return Err("internal: a file shard read as a stream".into());
    };
    let members = &layout.members[sample as usize];
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by_key(|&k| members[k].offset);
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); members.len()];
    for key in order {
        let member = members[key];
        let gap = member.offset.saturating_sub(*position);
        std::io::copy(&mut reader.by_ref().take(gap), &mut std::io::sink())
            .map_err(|e| format!("{}: {e}", name(sample, key)))?;
        out[key] = read_exact(reader.as_mut(), member.size, &name(sample, key))?;
        *position = member.offset + member.size;
    }
    Ok(out)
}

/// A member's bytes as a tensor, by the last part of its extension (`seg.png` → `png`):
/// class labels (`cls`, `cls2`, `index`, `id`) → an int64 scalar, `npy` → the array, anything
/// else → its bytes as a 1-D uint8 tensor, the pipeline's text (`txt`, `json`) and encoded
/// images (`jpg`, `png`, decoded by image-ops' `DecodeImage`).
pub fn decode(ext: &str, bytes: Vec<u8>) -> Result<Tensor, String> {
    let last = ext.rsplit('.').next().unwrap_or(ext).to_ascii_lowercase();
    match last.as_str() {
        "cls" | "cls2" | "index" | "id" => {
            let text = std::str::from_utf8(&bytes).map_err(|_| "a label that is not UTF-8")?;
            text.trim()
                .parse::<i64>()
                .map(Tensor::from)
                .map_err(|_| format!("label {:?} is not an integer", text.trim()))
        }
        "npy" => NpyArray::whole(Bytes::from_vec(bytes)),
        _ => Ok(Tensor::from_slice(&bytes)),
    }
}
