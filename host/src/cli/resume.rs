//! One resume for the ranks of a data-parallel run. Rank 0 alone decides what the run continues
//! from (it resolves `latest`/`auto`, skips and sets aside damaged checkpoints); every other
//! rank then reads that exact checkpoint directory and proves it holds the same checkpoint —
//! the same run id, step and write order, and the same `MANIFEST.json` (whose sha256 covers
//! every file's). A rank that cannot read it, or reads another one (a checkpoint folder that
//! is not really shared, a copy out of date on one node), is named with its host and the
//! path, and every rank refuses together, before any restores.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::checkpoint::store::{self, Files};
use crate::checkpoint::CheckpointInfo;
use crate::dist::SharedGroup;
use crate::error::{Error, Result};
use crate::manifest::Manifest;

/// What one rank tells the others: its host, what it was asked to resume from, and (from
/// rank 0) the checkpoint the run continues from.
#[derive(Serialize, Deserialize)]
struct Said {
    host: String,
    request: Option<String>,
    choice: Choice,
}

/// Rank 0's decision.
#[derive(Serialize, Deserialize, Clone, PartialEq, Debug)]
enum Choice {
    /// No checkpoint: every rank starts fresh (also what ranks other than 0 send).
    Fresh,
    /// This checkpoint directory, which is this checkpoint.
    From { dir: PathBuf, id: Identity },
    /// Rank 0 could not decide: its error.
    Failed(String),
}

/// What names one checkpoint: its run, its place in the run, and the hash of its file list.
#[derive(Serialize, Deserialize, Clone, PartialEq, Debug)]
struct Identity {
    run_id: String,
    step: u64,
    sequence: u64,
    manifest_sha256: String,
}

impl Identity {
    fn of(files: &Files) -> Result<Self> {
        let info: CheckpointInfo = files.parse_json("checkpoint.json")?;
        Ok(Self {
            run_id: info.run_id,
            step: info.step,
            sequence: info.sequence,
            manifest_sha256: files.manifest_sha256.clone(),
        })
    }

    /// How `other` differs from this one, in words (empty when it does not).
    fn differences(&self, other: &Self) -> Vec<String> {
        let mut named = Vec::new();
        if self.run_id != other.run_id {
            named.push(format!("run id {} vs {}", self.run_id, other.run_id));
        }
        if (self.step, self.sequence) != (other.step, other.sequence) {
            named.push(format!(
                "step {} (write {}) vs step {} (write {})",
                self.step, self.sequence, other.step, other.sequence
            ));
        }
        if self.manifest_sha256 != other.manifest_sha256 {
            named.push(format!(
                "MANIFEST.json sha256 {} vs {}",
                short(&self.manifest_sha256),
                short(&other.manifest_sha256)
            ));
        }
        named
    }
}

fn short(hash: &str) -> &str {
    hash.get(..16).unwrap_or(hash)
}

/// The checkpoint every rank of `group` restores, read and verified on this rank, or `None`
/// for a fresh start; `request` is this rank's `--resume` (or `run.resume = "auto"`). Called
/// on every rank after joining the group and before restoring anything (a collective).
pub fn agree(
    group: &SharedGroup,
    manifest: &Manifest,
    request: Option<&str>,
    quiet: bool,
) -> Result<Option<Files>> {
    let rank = group.rank();
    let host = crate::report::hostname();
    let (choice, mut own) = if rank == 0 {
        decide(manifest, request, quiet)
    } else {
        (Choice::Fresh, Ok(None))
    };
    let said = Said {
        host: host.clone(),
        request: request.map(str::to_owned),
        choice,
    };
    let all = gather(group, &said)?;
    let Some(zero) = all.first() else {
        return Ok(None);
    };
    for (other, theirs) in all.iter().enumerate().skip(1) {
        if theirs.request != zero.request {
            return Err(Error::Checkpoint {
                path: PathBuf::from(theirs.request.as_deref().unwrap_or("(none)")),
                message: format!(
                    "rank {other} (on {}) was asked to resume from it, but rank 0 (on {}) from {}: every rank must restore the same checkpoint (start every rank with the same --resume)",
                    theirs.host,
                    zero.host,
                    zero.request.as_deref().unwrap_or("nothing (a fresh start)")
                ),
            });
        }
    }
    let (dir, id) = match &zero.choice {
        Choice::Fresh => return Ok(None),
        Choice::Failed(error) if rank != 0 => {
            return Err(Error::Checkpoint {
                path: PathBuf::from(request.unwrap_or_default()),
                message: format!(
                    "rank 0 (on {}) cannot resume from it, so no rank does: {error}",
                    zero.host
                ),
            })
        }
        Choice::Failed(_) => return own,
        Choice::From { dir, id } => (dir, id),
    };
    if rank != 0 {
        own = read_same(dir, id, rank, &host, &zero.host);
    }
    // Every rank hears every verdict, so all refuse alike, naming the first rank that failed.
    let verdict = match &own {
        Ok(_) => None,
        Err(Error::Checkpoint { message, .. }) => Some(message.clone()),
        Err(error) => Some(error.to_string()),
    };
    let failed = gather(group, &verdict)?.into_iter().flatten().next();
    match (own, failed) {
        (Err(error), _) => Err(error),
        (Ok(_), Some(message)) => Err(Error::Checkpoint {
            path: dir.clone(),
            message,
        }),
        (Ok(files), None) => Ok(files),
    }
}

/// Rank 0's decision and, when it resumes, the checkpoint it read.
fn decide(
    manifest: &Manifest,
    request: Option<&str>,
    quiet: bool,
) -> (Choice, Result<Option<Files>>) {
    let Some(request) = request else {
        return (Choice::Fresh, Ok(None));
    };
    let read = || -> Result<Option<Files>> {
        let Some(source) = super::checkpoint::resume_source(manifest, request, quiet)? else {
            return Ok(None);
        };
        let dir = crate::checkpoint::resolve(&source)?;
        store::read(&dir).map(Some)
    };
    match read() {
        Ok(None) => (Choice::Fresh, Ok(None)),
        Ok(Some(files)) => match Identity::of(&files) {
            Ok(id) => (
                Choice::From {
                    // Absolute: the other ranks may run in another directory.
                    dir: std::fs::canonicalize(&files.dir).unwrap_or_else(|_| files.dir.clone()),
                    id,
                },
                Ok(Some(files)),
            ),
            Err(error) => (Choice::Failed(error.to_string()), Err(error)),
        },
        Err(error) => (Choice::Failed(error.to_string()), Err(error)),
    }
}

/// Reads checkpoint `dir` on a rank other than 0 and checks it is rank 0's checkpoint `id`.
fn read_same(
    dir: &Path,
    id: &Identity,
    rank: usize,
    host: &str,
    zero_host: &str,
) -> Result<Option<Files>> {
    let refuse = |message: String| Error::Checkpoint {
        path: dir.to_path_buf(),
        message,
    };
    let spec = std::env::var("FE_TEST_CHECKPOINTS_SEEN_AS").ok();
    let files = store::read(&seen_here(dir, spec.as_deref())).map_err(|error| {
        refuse(format!(
            "rank {rank} (on {host}) cannot read the checkpoint rank 0 (on {zero_host}) resumes from: {error} (keep the checkpoint folder on a file system every node shares, at the same path)"
        ))
    })?;
    let mine = Identity::of(&files).map_err(|error| {
        refuse(format!(
            "rank {rank} (on {host}) cannot read the checkpoint rank 0 (on {zero_host}) resumes from: {error}"
        ))
    })?;
    let differences = id.differences(&mine);
    if !differences.is_empty() {
        return Err(refuse(format!(
            "rank {rank} (on {host}) reads another checkpoint there than rank 0 (on {zero_host}): {} (rank 0's first; every rank must restore the same checkpoint: keep the checkpoint folder on a file system every node shares, at the same path)",
            differences.join(", ")
        )));
    }
    Ok(Some(files))
}

/// Where this process reads `dir`. A test hook (`FE_TEST_CHECKPOINTS_SEEN_AS=<from>=<to>`,
/// undocumented) simulates a node whose checkpoint folder is not the shared one: paths under
/// `<from>` are read under `<to>` instead.
fn seen_here(dir: &Path, spec: Option<&str>) -> PathBuf {
    let Some((from, to)) = spec.and_then(|spec| spec.split_once('=')) else {
        return dir.to_path_buf();
    };
    match dir.strip_prefix(from) {
        Ok(rest) => Path::new(to).join(rest),
        Err(_) => dir.to_path_buf(),
    }
}

/// Every rank's `value`, in rank order.
fn gather<T: Serialize + for<'de> Deserialize<'de>>(
    group: &SharedGroup,
    value: &T,
) -> Result<Vec<T>> {
    let bytes = serde_json::to_vec(value)
        .map_err(|e| Error::Internal(format!("cannot encode the resume agreement: {e}")))?;
    let all = group.all_gather_bytes(&bytes).map_err(Error::Run)?;
    all.iter()
        .map(|bytes| {
            serde_json::from_slice(bytes)
                .map_err(|e| Error::Run(format!("a rank sent an unreadable resume agreement: {e}")))
        })
        .collect()
}

/// Says where the run continues, as a resume of one process does (unless `quiet`).
pub fn announce(files: &Files, quiet: bool) -> Result<()> {
    crate::stop::checkpoint_complete();
    let info: CheckpointInfo = files.parse_json("checkpoint.json")?;
    if !quiet {
        println!(
            "fe-host resume: {}: {};",
            files.dir.display(),
            super::checkpoint::describe(&info)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(step: u64, hash: &str) -> Identity {
        Identity {
            run_id: "r1".into(),
            step,
            sequence: step,
            manifest_sha256: hash.repeat(20),
        }
    }

    #[test]
    fn another_checkpoint_is_named_by_what_differs() {
        assert!(id(4, "a").differences(&id(4, "a")).is_empty());
        assert_eq!(
            id(4, "a").differences(&id(2, "b")),
            [
                "step 4 (write 4) vs step 2 (write 2)".to_owned(),
                format!(
                    "MANIFEST.json sha256 {} vs {}",
                    "a".repeat(16),
                    "b".repeat(16)
                )
            ]
        );
    }

    #[test]
    fn the_test_hook_reads_another_folder_only_below_its_prefix() {
        let spec = Some("/shared/ckpts=/local/ckpts");
        assert_eq!(
            seen_here(Path::new("/shared/ckpts/ckpt-4"), spec),
            PathBuf::from("/local/ckpts/ckpt-4")
        );
        assert_eq!(
            seen_here(Path::new("/else/ckpt-4"), spec),
            PathBuf::from("/else/ckpt-4")
        );
        assert_eq!(
            seen_here(Path::new("/shared/ckpts/ckpt-4"), None),
            PathBuf::from("/shared/ckpts/ckpt-4")
        );
    }
}
