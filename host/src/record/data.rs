//! The identity of a run's data files, computed without reading terabytes.
//!
//! Every string in a `[pipeline.data.*]` table that names an existing file or directory
//! (relative to the manifest's directory) is identified:
//!
//! * a file of at most [`FULL_HASH_LIMIT`] bytes: the sha256 of its contents (`sha256`);
//! * a larger file: the sha256 of its size, its first and its last MiB (`head-tail-sha256`),
//!   which any appended, truncated or re-generated file changes, at a cost of 2 MiB of reads;
//! * a directory (an image folder, shards): the sha256 of its listing — every file's relative
//!   path, size and modification time, sorted (`listing-sha256`); contents are not read.
//!
//! Globs and URLs, which name no existing path, are not identified.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::manifest::Manifest;

/// Files up to this size are hashed whole.
pub const FULL_HASH_LIMIT: u64 = 64 << 20;
const EDGE: u64 = 1 << 20;

/// One identified data path.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DataFile {
    /// Where the manifest names it (`pipeline.data.train.files.x`).
    pub key: String,
    /// The path, absolute.
    pub path: PathBuf,
    /// Bytes (a directory: the sum over its files).
    pub size: u64,
    /// `sha256`, `head-tail-sha256` or `listing-sha256` (see the module doc).
    pub method: String,
    /// The digest, lowercase hex.
    pub sha256: String,
}

/// Every data path of `manifest`, identified; each path once (the first key naming it).
pub fn identify(manifest: &Manifest) -> std::io::Result<Vec<DataFile>> {
    let base = absolute(&manifest.dir());
    let mut found: Vec<DataFile> = Vec::new();
    for entry in &manifest.pipeline.data {
        for dataset in &entry.datasets.values {
            let mut strings = Vec::new();
            collect(&dataset.path.to_string(), &dataset.config, &mut strings);
            for (key, text) in strings {
                let path = crate::run_dir::lexical(&base.join(&text));
                if found.iter().any(|f| f.path == path) || !path.exists() {
                    continue;
                }
                found.push(identify_path(key, path)?);
            }
        }
    }
    Ok(found)
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    std::env::current_dir()
        .map(|here| here.join(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// Every string under `table`, with its key path.
fn collect(prefix: &str, table: &toml::Table, out: &mut Vec<(String, String)>) {
    for (key, value) in table {
        walk(&format!("{prefix}.{key}"), value, out);
    }
}

fn walk(key: &str, value: &toml::Value, out: &mut Vec<(String, String)>) {
    match value {
        toml::Value::String(text) => out.push((key.to_owned(), text.clone())),
        toml::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(&format!("{key}[{i}]"), item, out);
            }
        }
        toml::Value::Table(table) => collect(key, table, out),
        _ => {}
    }
}

/// The identity of one existing file or directory.
pub fn identify_path(key: String, path: PathBuf) -> std::io::Result<DataFile> {
    let (size, method, sha256) = if path.is_dir() {
        let (size, digest) = listing_digest(&path)?;
        (size, "listing-sha256", digest)
    } else {
        let size = std::fs::metadata(&path)?.len();
        if size <= FULL_HASH_LIMIT {
            (size, "sha256", crate::plugins::sha256_file(&path)?)
        } else {
            (size, "head-tail-sha256", head_tail_digest(&path, size)?)
        }
    };
    Ok(DataFile {
        key,
        path,
        size,
        method: method.to_owned(),
        sha256,
    })
}

fn head_tail_digest(path: &Path, size: u64) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    hasher.update(size.to_le_bytes());
    let mut edge = vec![0u8; EDGE as usize];
    file.read_exact(&mut edge)?;
    hasher.update(&edge);
    file.seek(SeekFrom::Start(size - EDGE))?;
    file.read_exact(&mut edge)?;
    hasher.update(&edge);
    Ok(hex(&hasher.finalize()))
}

fn listing_digest(dir: &Path) -> std::io::Result<(u64, String)> {
    let mut rows = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                pending.push(entry.path());
                continue;
            }
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            let relative = entry.path().strip_prefix(dir).map(Path::to_path_buf);
            let relative = relative.unwrap_or_else(|_| entry.path());
            rows.push((relative, meta.len(), mtime));
        }
    }
    rows.sort();
    let mut hasher = Sha256::new();
    let mut total = 0u64;
    for (path, size, mtime) in &rows {
        total = total.saturating_add(*size);
        hasher.update(format!("{}\t{size}\t{mtime}\n", path.display()).as_bytes());
    }
    Ok((total, hex(&hasher.finalize())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_files_are_fingerprinted_by_their_edges_and_small_ones_hashed_whole() {
        let dir = crate::report::test_dir::TestDir::new("record-data");
        let small = dir.path().join("small.bin");
        std::fs::write(&small, b"abc").unwrap();
        let id = identify_path("k".into(), small).unwrap();
        assert_eq!(id.method, "sha256");
        assert_eq!(
            id.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );

        let large = dir.path().join("large.bin");
        let mut bytes = vec![0u8; (FULL_HASH_LIMIT + 1) as usize];
        std::fs::write(&large, &bytes).unwrap();
        let before = identify_path("k".into(), large.clone()).unwrap();
        assert_eq!(before.method, "head-tail-sha256");
        // A change in the last MiB changes the fingerprint; one in the middle does not (the
        // stated limit of a fingerprint that reads 2 MiB).
        let middle = bytes.len() / 2;
        bytes[middle] = 1;
        std::fs::write(&large, &bytes).unwrap();
        let same = identify_path("k".into(), large.clone()).unwrap();
        assert_eq!(same.sha256, before.sha256);
        let last = bytes.len() - 1;
        bytes[last] = 1;
        std::fs::write(&large, &bytes).unwrap();
        let changed = identify_path("k".into(), large).unwrap();
        assert_ne!(changed.sha256, before.sha256);
    }
}
