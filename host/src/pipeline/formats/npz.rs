//! `type = "npz"`: the arrays of one NPZ archive (numpy's `np.savez` / `np.savez_compressed`),
//! which is a zip file of NPY members named `<key>.npy`.
//!
//! Stored (uncompressed, `np.savez`) members are read in place from a memory map of the
//! archive, so a large archive costs no memory; their CRC is not checked, as reading it would
//! mean touching every byte at open. Deflated (`np.savez_compressed`) members are decompressed
//! into memory once, at open, with their CRC checked.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::npy::{ArraySource, NpyArray};
use super::Bytes;
use crate::error::{Error, Result};

/// `type = "npz"`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct NpzConfig {
    /// The archive (relative to the manifest).
    pub file: PathBuf,
    /// Key → array name in the archive (with or without `.npy`); every array, keyed by its
    /// name, when absent.
    #[serde(default)]
    pub keys: Option<BTreeMap<String, String>>,
}

/// Where a member's bytes are.
struct Member {
    index: usize,
    name: String,
}

/// Opens the archive and every array the config asks for.
pub fn open(config: &NpzConfig, dir: &Path) -> Result<ArraySource> {
    let path = dir.join(&config.file);
    let archive_bytes = Bytes::map(&path)?;
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(archive_bytes.as_slice()))
        .map_err(|e| {
            let why = if archive_bytes.as_slice().starts_with(b"\x93NUMPY") {
                "it is a single NPY file, which needs `type = \"npy\"`".to_owned()
            } else {
                e.to_string()
            };
            Error::data(&path, format!("not an NPZ (zip) archive: {why}"))
        })?;

    // Array name → member; directories and non-NPY members are not arrays.
    let mut members: BTreeMap<String, Member> = BTreeMap::new();
    for index in 0..archive.len() {
        let file = archive
            .by_index_raw(index)
            .map_err(|e| Error::data(&path, format!("member {}: {e}", index + 1)))?;
        let name = file.name().to_owned();
        if file.is_dir() {
            continue;
        }
        let Some(array) = name.strip_suffix(".npy") else {
            continue;
        };
        let array = array.to_owned();
        if members.contains_key(&array) {
            return Err(Error::data(
                &path,
                format!("member `{name}` appears twice in the archive"),
            ));
        }
        members.insert(array, Member { index, name });
    }
    if members.is_empty() {
        return Err(Error::data(&path, "the archive holds no .npy arrays"));
    }

    let wanted: Vec<(String, String)> = match &config.keys {
        None => members.keys().map(|k| (k.clone(), k.clone())).collect(),
        Some(keys) => keys
            .iter()
            .map(|(key, array)| {
                let array = array.strip_suffix(".npy").unwrap_or(array);
                (key.clone(), array.to_owned())
            })
            .collect(),
    };
    let mut named = Vec::with_capacity(wanted.len());
    for (key, array) in wanted {
        let Some(member) = members.get(&array) else {
            return Err(Error::data(
                &path,
                format!(
                    "`keys.{key}` names array `{array}`, which the archive does not hold (its arrays: {})",
                    members.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        };
        let bytes = member_bytes(&mut archive, &archive_bytes, member).map_err(|message| {
            Error::data(&path, format!("member `{}`: {message}", member.name))
        })?;
        let npy = NpyArray::new(bytes).map_err(|message| {
            Error::data(&path, format!("member `{}`: {message}", member.name))
        })?;
        named.push((key, npy, format!("array `{array}`")));
    }
    ArraySource::new(named, |_| path.clone())
}

fn member_bytes(
    archive: &mut zip::ZipArchive<std::io::Cursor<&[u8]>>,
    archive_bytes: &Bytes,
    member: &Member,
) -> std::result::Result<Bytes, String> {
    // `by_index` refuses encrypted members and unsupported compression with a clear error.
    let mut file = archive.by_index(member.index).map_err(|e| e.to_string())?;
    if file.compression() == zip::CompressionMethod::Stored {
        let start = usize::try_from(file.data_start()).map_err(|e| e.to_string())?;
        let len = usize::try_from(file.compressed_size()).map_err(|e| e.to_string())?;
        if file.size() != file.compressed_size() {
            return Err(format!(
                "stored member with a size of {} bytes but {} compressed bytes",
                file.size(),
                file.compressed_size()
            ));
        }
        return start
            .checked_add(len)
            .and_then(|end| archive_bytes.slice(start, end))
            .ok_or_else(|| {
                format!(
                    "truncated: its {len} bytes at offset {start} run past the end of the archive"
                )
            });
    }
    // The declared size only sizes the first allocation: a corrupt archive may lie about it.
    let capacity = usize::try_from(file.size()).unwrap_or(0).min(1 << 26);
    let mut out = Vec::with_capacity(capacity);
    file.read_to_end(&mut out)
        .map_err(|e| format!("cannot decompress: {e}"))?;
    Ok(Bytes::from_vec(out))
}
