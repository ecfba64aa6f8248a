//! Checkpoint directories on disk, written so that a crash at any instant leaves either the
//! previous complete checkpoint or the new one, never a half-written one that loads.
//!
//! A checkpoint is written into a temporary sibling (`.tmp-ckpt-N-<pid>`): every file, then
//! `MANIFEST.json` (every file with its size and sha256, hashed from the bytes in memory) and
//! the new pointer `latest.tmp-<pid>`; all of them and the new directory entries are flushed
//! together, the directory is renamed into place, the pointer renamed over `latest`, and the
//! parent fsynced. The rename is what makes a checkpoint visible, and it happens only once
//! every byte is durable; flushing the file list in a round of its own would buy no safety and
//! cost a journal commit. Old checkpoints are renamed to `.trash-...` before they are removed.
//! Leftover temporaries and trash are removed when the next run starts. Loading verifies every
//! size and hash before anything is parsed.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The file naming every other file of a checkpoint with its hash; written last.
pub const MANIFEST: &str = "MANIFEST.json";
/// The pointer to the newest complete checkpoint, in the checkpoint root.
pub const LATEST: &str = "latest";
const FORMAT: u32 = 1;

/// One file of a checkpoint, as `MANIFEST.json` lists it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FileEntry {
    /// Path relative to the checkpoint directory, `/`-separated.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Lowercase hex sha256.
    pub sha256: String,
}

#[derive(Serialize, Deserialize, Debug)]
struct FileList {
    format: u32,
    files: Vec<FileEntry>,
}

/// The files of a checkpoint, read and verified.
#[derive(Debug, Default)]
pub struct Files {
    /// The checkpoint directory.
    pub dir: PathBuf,
    /// Contents by relative path.
    pub contents: BTreeMap<String, Vec<u8>>,
    /// The sha256 of its `MANIFEST.json` as read: one hash that names the whole checkpoint
    /// (every file's hash is in it), for ranks that must agree they read the same one.
    pub manifest_sha256: String,
}

impl Files {
    /// The contents of `path`, or an error naming the missing file.
    pub fn get(&self, path: &str) -> Result<&[u8]> {
        self.contents
            .get(path)
            .map(Vec::as_slice)
            .ok_or_else(|| Error::Checkpoint {
                path: self.dir.join(path),
                message: "is missing from the checkpoint (not listed in MANIFEST.json)".to_owned(),
            })
    }

    /// Whether the checkpoint has `path`.
    pub fn has(&self, path: &str) -> bool {
        self.contents.contains_key(path)
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::io(path, e)
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let file = write_unsynced(path, bytes)?;
    // fdatasync: the data and the size are durable, timestamps need not be; directory
    // entries are made durable by `sync_dir`.
    file.sync_data().map_err(io(path))
}

/// Creates `path` with `bytes` and starts writing it back to disk without waiting.
fn write_unsynced(path: &Path, bytes: &[u8]) -> Result<File> {
    let mut file = File::create(path).map_err(io(path))?;
    file.write_all(bytes).map_err(io(path))?;
    start_writeback(&file);
    Ok(file)
}

/// Asks the kernel to start writing `file` back now. When every file's writeback has started
/// before the first flush, their block allocations land in one journal transaction and the
/// flushes that follow share a commit instead of paying one each. Only a hint: `sync_data`
/// reports any I/O error.
#[cfg(target_os = "linux")]
fn start_writeback(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for the duration of the call, which reads no memory.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File) {}

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes `files` as the checkpoint `root/name`, then points `latest` at it. Returns the
/// checkpoint directory.
pub fn write(root: &Path, name: &str, files: &[(String, Vec<u8>)]) -> Result<PathBuf> {
    std::fs::create_dir_all(root).map_err(io(root))?;
    let target = root.join(name);
    if target.exists() {
        return Err(Error::Internal(format!(
            "checkpoint {} already exists",
            target.display()
        )));
    }
    let temp = root.join(format!(".tmp-{name}-{}", std::process::id()));
    if temp.exists() {
        std::fs::remove_dir_all(&temp).map_err(io(&temp))?;
    }
    let pointer = root.join(format!("{LATEST}.tmp-{}", std::process::id()));
    let written = write_renamed(root, name, files, (&temp, &pointer));
    if written.is_err() {
        // A write that failed (a full disk, a read-only folder) is not a crash: this process
        // is alive to remove its temporaries, and must, since a run that starts afresh goes to
        // another version or folder and would never see them. Whatever the rename already
        // moved into place stays: it is complete.
        let _ = std::fs::remove_dir_all(&temp);
        let _ = std::fs::remove_file(&pointer);
    }
    written
}

/// The body of [`write`], into the temporaries `temp` (the directory) and `pointer` (the new
/// `latest`), which the caller removes when this fails.
fn write_renamed(
    root: &Path,
    name: &str,
    files: &[(String, Vec<u8>)],
    (temp, pointer): (&Path, &Path),
) -> Result<PathBuf> {
    let target = root.join(name);
    let mut dirs: Vec<PathBuf> = vec![temp.to_path_buf()];
    for (relative, _) in files {
        if let Some(parent) = temp.join(relative).parent() {
            if !dirs.iter().any(|d| d == parent) {
                dirs.push(parent.to_path_buf());
            }
        }
    }
    for dir in &dirs {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    // The hashes come from the bytes in memory, on a helper thread while this one writes, so
    // the file list is ready when the last file is written and goes out with the others.
    let (entries, mut written) = std::thread::scope(|scope| {
        let hashes = scope.spawn(|| {
            files
                .iter()
                .map(|(relative, bytes)| FileEntry {
                    path: relative.clone(),
                    bytes: bytes.len() as u64,
                    sha256: sha256_hex(bytes),
                })
                .collect::<Vec<_>>()
        });
        let written = files
            .iter()
            .map(|(relative, bytes)| {
                let path = temp.join(relative);
                write_unsynced(&path, bytes).map(|file| (path, file))
            })
            .collect::<Result<Vec<_>>>();
        let entries = hashes
            .join()
            .map_err(|_| Error::Internal("the checkpoint hashing thread panicked".into()));
        Ok::<_, Error>((entries?, written?))
    })?;
    let list = FileList {
        format: FORMAT,
        files: entries,
    };
    let json = serde_json::to_vec_pretty(&list)
        .map_err(|e| Error::Internal(format!("cannot serialize MANIFEST.json: {e}")))?;
    let list_path = temp.join(MANIFEST);
    written.push((list_path.clone(), write_unsynced(&list_path, &json)?));
    let pointer_file = write_unsynced(pointer, format!("{name}\n").as_bytes())?;
    written.push((pointer.to_path_buf(), pointer_file));
    // One flush for everything: the rename below, not the order of the flushes, is what makes
    // the checkpoint visible, and it happens only once every byte and entry is durable.
    for (path, file) in &written {
        file.sync_data().map_err(io(path))?;
    }
    for dir in &dirs {
        sync_dir(dir)?;
    }
    std::fs::rename(temp, &target).map_err(io(&target))?;
    let latest = root.join(LATEST);
    std::fs::rename(pointer, &latest).map_err(io(&latest))?;
    // One flush makes both renames durable. Should a power loss keep only the second, `latest`
    // names a missing directory and `resolve` falls back to the newest complete checkpoint.
    sync_dir(root)?;
    Ok(target)
}

/// Atomically points `root/latest` at checkpoint `name`.
pub fn set_latest(root: &Path, name: &str) -> Result<()> {
    let temp = root.join(format!("{LATEST}.tmp-{}", std::process::id()));
    let latest = root.join(LATEST);
    crate::replace::through_temp(&latest, &temp, |temp| {
        write_synced(temp, format!("{name}\n").as_bytes())
    })?;
    sync_dir(root)
}

/// The checkpoint `root/latest` points at, if any.
pub fn latest(root: &Path) -> Result<Option<PathBuf>> {
    let pointer = root.join(LATEST);
    let text = match std::fs::read_to_string(&pointer) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&pointer, e)),
    };
    let name = text.trim();
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(Error::Checkpoint {
            path: pointer,
            message: format!("does not name a checkpoint directory (`{name}`)"),
        });
    }
    Ok(Some(root.join(name)))
}

/// Removes what an interrupted write or delete left in `root`: `.tmp-*` and `.trash-*`
/// directories and `latest.tmp-*` files. Returns how many it removed.
pub fn remove_leftovers(root: &Path) -> Result<usize> {
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Error::io(root, e)),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(io(root))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.starts_with(".tmp-") || name.starts_with(".trash-") {
            std::fs::remove_dir_all(&path).map_err(io(&path))?;
            removed += 1;
        } else if name.starts_with(&format!("{LATEST}.tmp-")) {
            std::fs::remove_file(&path).map_err(io(&path))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Deletes checkpoint `root/name`: renamed out of sight first, so a crash never leaves a
/// half-deleted checkpoint that looks complete.
///
/// One already gone (deleted by hand while the run went on) is not an error: it is what
/// deleting it wanted, and failing there would fail the run after a good checkpoint.
pub fn delete(root: &Path, name: &str) -> Result<()> {
    let dir = root.join(name);
    let trash = root.join(format!(".trash-{name}-{}", std::process::id()));
    let failed = |path: &Path, e: std::io::Error| {
        Error::Run(format!(
            "{}: cannot remove this older checkpoint, which the retention policy (keep_last, keep_best) no longer keeps: {e}",
            path.display()
        ))
    };
    match std::fs::rename(&dir, &trash) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(failed(&dir, e)),
        Ok(()) => {}
    }
    std::fs::remove_dir_all(&trash).map_err(|e| failed(&trash, e))
}

/// The complete checkpoints in `root` (directory names with a `MANIFEST.json`).
pub fn list(root: &Path) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(root, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io(root))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && entry.path().join(MANIFEST).is_file() {
            names.push(name);
        }
    }
    names.sort_by_key(|name| in_step_order(name));
    Ok(names)
}

/// `ckpt-<step>[.<n>]` sorts by step, then by `n` (as people count: ckpt-2 before ckpt-10);
/// other names after them, by name.
fn in_step_order(name: &str) -> (bool, u64, u64, String) {
    let numbers = name.strip_prefix("ckpt-").and_then(|rest| {
        let (step, n) = rest.split_once('.').unwrap_or((rest, "0"));
        Some((step.parse::<u64>().ok()?, n.parse::<u64>().ok()?))
    });
    match numbers {
        Some((step, n)) => (false, step, n, String::new()),
        None => (true, 0, 0, name.to_owned()),
    }
}

/// Reads checkpoint `dir`, verifying that every file `MANIFEST.json` lists is there with the
/// right size and hash.
pub fn read(dir: &Path) -> Result<Files> {
    let problem = |path: PathBuf, message: String| Error::Checkpoint { path, message };
    if !dir.is_dir() {
        return Err(problem(
            dir.to_path_buf(),
            "is not a checkpoint directory".into(),
        ));
    }
    let list_path = dir.join(MANIFEST);
    let bytes = std::fs::read(&list_path).map_err(|e| {
        problem(
            list_path.clone(),
            format!("cannot be read ({e}): the checkpoint is incomplete"),
        )
    })?;
    let list: FileList = serde_json::from_slice(&bytes)
        .map_err(|e| problem(list_path.clone(), format!("is not a valid file list: {e}")))?;
    if list.format != FORMAT {
        return Err(problem(
            list_path,
            format!(
                "is format {}, this fe-host reads format {FORMAT}",
                list.format
            ),
        ));
    }
    let mut contents = BTreeMap::new();
    for entry in list.files {
        if entry
            .path
            .split('/')
            .any(|part| part == ".." || part.is_empty())
        {
            return Err(problem(
                list_path.clone(),
                format!("lists an invalid path `{}`", entry.path),
            ));
        }
        let path = dir.join(&entry.path);
        let data = std::fs::read(&path)
            .map_err(|e| problem(path.clone(), format!("cannot be read: {e}")))?;
        if data.len() as u64 != entry.bytes {
            return Err(problem(
                path,
                format!(
                    "is {} bytes but MANIFEST.json says {}: the file is truncated or was changed",
                    data.len(),
                    entry.bytes
                ),
            ));
        }
        let actual = sha256_hex(&data);
        if actual != entry.sha256 {
            return Err(problem(
                path,
                format!(
                    "sha256 is {actual} but MANIFEST.json says {}: the file is corrupt",
                    entry.sha256
                ),
            ));
        }
        contents.insert(entry.path, data);
    }
    Ok(Files {
        dir: dir.to_path_buf(),
        contents,
        manifest_sha256: sha256_hex(&bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_are_listed_in_step_order() {
        let mut names = vec![
            "ckpt-10.1",
            "ckpt-2",
            "other",
            "ckpt-15",
            "ckpt-10",
            "ckpt-4",
        ];
        names.sort_by_key(|n| in_step_order(n));
        assert_eq!(
            names,
            [
                "ckpt-2",
                "ckpt-4",
                "ckpt-10",
                "ckpt-10.1",
                "ckpt-15",
                "other"
            ]
        );
    }

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fe-store-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn files() -> Vec<(String, Vec<u8>)> {
        vec![
            ("system.json".to_owned(), b"{}".to_vec()),
            ("models/net.safetensors".to_owned(), vec![1, 2, 3, 4]),
        ]
    }

    #[test]
    fn written_checkpoints_read_back_and_latest_follows() {
        let root = temp("roundtrip");
        let first = write(&root, "ckpt-1", &files()).unwrap();
        assert_eq!(latest(&root).unwrap(), Some(first.clone()));
        let read_back = read(&first).unwrap();
        assert_eq!(
            read_back.get("models/net.safetensors").unwrap(),
            [1, 2, 3, 4]
        );
        let second = write(&root, "ckpt-2", &files()).unwrap();
        assert_eq!(latest(&root).unwrap(), Some(second));
        assert_eq!(list(&root).unwrap(), ["ckpt-1", "ckpt-2"]);
        delete(&root, "ckpt-1").unwrap();
        assert_eq!(list(&root).unwrap(), ["ckpt-2"]);
        // Gone already (deleted by hand): nothing left to delete.
        delete(&root, "ckpt-1").unwrap();
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn corruption_is_refused_naming_the_file() {
        let root = temp("corrupt");
        let dir = write(&root, "ckpt-1", &files()).unwrap();
        let weights = dir.join("models/net.safetensors");
        std::fs::write(&weights, [1, 2, 3, 5]).unwrap();
        let err = read(&dir).unwrap_err().to_string();
        assert!(err.starts_with(&weights.display().to_string()), "{err}");
        assert!(err.contains("the file is corrupt"), "{err}");
        std::fs::write(&weights, [1, 2]).unwrap();
        let err = read(&dir).unwrap_err().to_string();
        assert!(err.contains("is 2 bytes but MANIFEST.json says 4"), "{err}");
        std::fs::remove_file(&weights).unwrap();
        let err = read(&dir).unwrap_err().to_string();
        assert!(err.contains("cannot be read"), "{err}");
        std::fs::remove_file(dir.join(MANIFEST)).unwrap();
        let err = read(&dir).unwrap_err().to_string();
        assert!(err.contains("the checkpoint is incomplete"), "{err}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn leftovers_of_an_interrupted_write_are_removed() {
        let root = temp("leftovers");
        write(&root, "ckpt-1", &files()).unwrap();
        std::fs::create_dir_all(root.join(".tmp-ckpt-2-999/models")).unwrap();
        std::fs::create_dir_all(root.join(".trash-ckpt-0-999")).unwrap();
        std::fs::write(root.join("latest.tmp-999"), "ckpt-2").unwrap();
        assert_eq!(remove_leftovers(&root).unwrap(), 3);
        assert_eq!(list(&root).unwrap(), ["ckpt-1"]);
        assert!(read(&root.join("ckpt-1")).is_ok());
        let _ = std::fs::remove_dir_all(&root);
    }
}
