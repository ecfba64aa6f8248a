//! `fe-host checkpoint ...`, `run --resume` and `run --smoke`.

use std::path::{Path, PathBuf};

use clap::Subcommand;

use crate::checkpoint::{store, CheckpointInfo};
use crate::error::{Error, Result};
use crate::estimator::checkpointing::ResumeOptions;
use crate::estimator::Estimator;
use crate::manifest::{CheckpointConfig, Manifest};

/// `fe-host checkpoint ...`
#[derive(Subcommand, Debug)]
pub enum CheckpointCommand {
    /// Check that a checkpoint is complete: every file present with its recorded sha256.
    Verify {
        /// A checkpoint directory, or a checkpoint root (its `latest` is checked).
        path: PathBuf,
    },
    /// List the complete checkpoints of a checkpoint root, the newest last.
    List {
        /// The checkpoint root (or a run directory: its latest version's checkpoints).
        dir: PathBuf,
    },
}

/// Runs `fe-host checkpoint ...`.
pub fn run(command: CheckpointCommand) -> Result<()> {
    match command {
        CheckpointCommand::Verify { path } => {
            let dir = crate::checkpoint::resolve(&path)?;
            let files = store::read(&dir)?;
            let info = read_info(&dir)?;
            let bytes: usize = files.contents.values().map(Vec::len).sum();
            println!(
                "ok: {} ({} files, {} bytes, all hashes match); {}",
                dir.display(),
                files.contents.len() + 1,
                bytes,
                describe(&info)
            );
            Ok(())
        }
        CheckpointCommand::List { dir } => {
            let dir = crate::checkpoint::root_of(&dir);
            if !dir.is_dir() {
                let what = if dir.exists() {
                    "is not a directory"
                } else {
                    "does not exist"
                };
                return Err(Error::Checkpoint {
                    path: dir,
                    message: format!("{what}; `checkpoint list` takes a checkpoint root (the manifest's [checkpoint] dir)"),
                });
            }
            let latest = store::latest(&dir)?;
            let names = store::list(&dir)?;
            if names.is_empty() {
                println!("{}: no complete checkpoints", dir.display());
            }
            for name in names {
                let path = dir.join(&name);
                let info = read_info(&path)?;
                let mark = if latest.as_deref() == Some(path.as_path()) {
                    " (latest)"
                } else {
                    ""
                };
                println!("{name}{mark}: {}", describe(&info));
            }
            Ok(())
        }
    }
}

fn read_info(dir: &Path) -> Result<CheckpointInfo> {
    let path = dir.join("checkpoint.json");
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Checkpoint {
        path,
        message: format!("is not what fe-host wrote: {e}"),
    })
}

/// `step 120, inside epoch 2 (40 batches done)` or `step 160, after epoch 2; accuracy 0.97`.
pub fn describe(info: &CheckpointInfo) -> String {
    let at = info.cursor.describe();
    let monitor = info
        .monitor
        .as_ref()
        .map(|(key, value)| format!("; {key} {value}"))
        .unwrap_or_default();
    format!("step {}, {at}{monitor}", info.step)
}

/// The checkpoint root of `manifest`: its `[checkpoint] dir`, or `checkpoints` next to it.
pub fn root(manifest: &Manifest) -> PathBuf {
    crate::checkpoint::default_root(manifest)
}

/// What this run resumes from: `--resume` when given, else `auto` when the manifest says
/// `run.resume = "auto"`; nothing for a smoke run (it checkpoints into a directory of its own).
pub fn resume_request<'a>(
    flag: Option<&'a str>,
    manifest: &Manifest,
    smoke: bool,
) -> Option<&'a str> {
    match (flag, manifest.run.resume) {
        (Some(request), _) => Some(request),
        (None, _) if smoke => None,
        (None, crate::manifest::Resume::Auto) => Some(AUTO),
        (None, crate::manifest::Resume::Never) => None,
    }
}

/// `--resume auto` / `run.resume = "auto"`: continue when there is a checkpoint, else start.
pub const AUTO: &str = "auto";

/// Where `--resume REQUEST` continues from: `latest` means the manifest's checkpoint root,
/// `auto` the newest checkpoint there that verifies — or nothing, a fresh start, when the
/// root holds no checkpoint (said unless `quiet`) — anything else is a path.
pub fn resume_source(manifest: &Manifest, request: &str, quiet: bool) -> Result<Option<PathBuf>> {
    match request {
        "latest" => Ok(Some(root(manifest))),
        AUTO => {
            let found = newest_valid(&root(manifest))?;
            if found.is_none() && !quiet {
                println!(
                    "fe-host resume: no checkpoint in {}; starting fresh;",
                    root(manifest).display()
                );
            }
            Ok(found)
        }
        path => Ok(Some(PathBuf::from(path))),
    }
}

/// Restores `estimator` from the checkpoint (or checkpoint root) `path` and says where it
/// continues (unless `quiet`).
pub fn resume(
    estimator: &mut Estimator,
    path: &Path,
    options: ResumeOptions,
    quiet: bool,
) -> Result<()> {
    let dir = estimator.resume(path, options)?;
    crate::stop::checkpoint_complete();
    let info = read_info(&dir)?;
    if !quiet {
        println!("fe-host resume: {}: {};", dir.display(), describe(&info));
    }
    Ok(())
}

/// The newest checkpoint in `root` whose files all verify, `None` when it holds none at all.
/// A restarted job must not die on the one checkpoint a crash damaged, so damaged ones are
/// skipped with a warning; but a root whose every checkpoint is damaged is an error, never a
/// silent fresh start that would overwrite them.
pub fn newest_valid(root: &Path) -> Result<Option<PathBuf>> {
    let names = store::list(root)?;
    if names.is_empty() {
        return match store::latest(root)? {
            // `latest` names nothing complete and nothing else is there: say so (as --resume).
            Some(_) => crate::checkpoint::resolve(root).map(Some),
            None => Ok(None),
        };
    }
    // `resolve` knows which checkpoint `latest` means (and refuses a root of several runs);
    // the others follow newest first, by the step and write order their info records.
    let chosen = crate::checkpoint::resolve(root)?;
    let mut others: Vec<(Option<(u64, u64)>, PathBuf)> = names
        .iter()
        .map(|name| {
            let dir = root.join(name);
            let order = read_info(&dir).ok().map(|info| (info.step, info.sequence));
            (order, dir)
        })
        .collect();
    others.sort_by_key(|other| std::cmp::Reverse(other.0));
    let candidates = std::iter::once(chosen).chain(others.into_iter().map(|(_, dir)| dir));
    let mut damaged = Vec::new();
    for dir in candidates {
        if damaged.contains(&dir) {
            continue;
        }
        match store::read(&dir) {
            Ok(_) => return Ok(Some(dir)),
            Err(error) => {
                eprintln!(
                    "warning: skipping a damaged checkpoint: {error}{}",
                    set_aside(&dir)
                );
                damaged.push(dir);
            }
        }
    }
    Err(Error::Checkpoint {
        path: root.to_path_buf(),
        message: format!(
            "none of its {} checkpoints verifies; resume one by name after repairing it, or move them away to start fresh",
            damaged.len()
        ),
    })
}

/// Moves damaged checkpoint `dir` out of the way (to a hidden `.damaged-<name>` next to it), so
/// the resumed run can write its own checkpoint of that step; kept, not deleted, for whoever
/// wants to look. Only one process does it: rank 0 of a data-parallel run, or a lone run.
fn set_aside(dir: &Path) -> String {
    let rank_zero = std::env::var("RANK").map_or(true, |rank| rank.trim() == "0");
    let (Some(root), Some(name)) = (dir.parent(), dir.file_name()) else {
        return String::new();
    };
    if !rank_zero {
        return String::new();
    }
    let aside = root.join(format!(".damaged-{}", name.to_string_lossy()));
    match std::fs::rename(dir, &aside) {
        Ok(()) => format!(" (moved to {})", aside.display()),
        Err(e) => format!(" (could not move it aside: {e})"),
    }
}

/// What `--smoke` changes in the manifest: one epoch of a few steps, a short evaluation, and
/// a checkpoint into `dir/checkpoints`. Everything the run would write — the run log and
/// plot (`dir/log`), every saver, logger and TensorBoard trace (`dir/outputs/<the path the
/// manifest names>`) — goes into `dir` too, so a smoke run never touches a real run's files.
pub fn smoke_manifest(manifest: &mut Manifest, dir: &Path) {
    manifest.run.epochs = 1;
    manifest.run.train_steps_per_epoch = Some(5);
    manifest.run.eval_steps_per_epoch = Some(2);
    manifest.run.log_dir = Some(dir.join("log"));
    manifest.outputs_into = Some(dir.join("outputs"));
    manifest.checkpoint = Some(CheckpointConfig {
        dir: smoke_checkpoints(dir),
        dir_named: true,
        every_epochs: Some(1),
        every_steps: None,
        keep_last: None,
        keep_best: None,
        monitor: None,
        maximize: false,
        background: true,
    });
}

/// Where a smoke run in `dir` writes its checkpoint.
pub fn smoke_checkpoints(dir: &Path) -> PathBuf {
    dir.join("checkpoints")
}

/// After a smoke run: the checkpoint it wrote loads back into the run.
pub fn smoke_reload(estimator: &mut Estimator, dir: &Path) -> Result<()> {
    let started = std::time::Instant::now();
    let checkpoint = estimator.resume(dir, ResumeOptions::default())?;
    let files = store::read(&checkpoint)?;
    let bytes: usize = files.contents.values().map(Vec::len).sum();
    println!(
        "fe-host smoke: ok: trained {} steps, evaluated, saved a checkpoint ({} files, {} KiB) and reloaded it in {:.3} s;",
        estimator.system.global_step,
        files.contents.len() + 1,
        bytes / 1024,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
