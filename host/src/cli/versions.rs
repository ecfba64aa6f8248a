//! Which version directory of its root (`run.log_dir`) a run writes into (see
//! [`crate::run_dir`]): the one [`VERSION_ENV`](crate::run_dir::VERSION_ENV) names, the one a
//! resumed checkpoint came from, or the next free one.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::run_dir::{self, Claim, RunDir, RunRecord};

/// The version a run took, and whether it is new (not resumed nor named by a launcher).
pub struct Chosen {
    /// The version.
    pub dir: RunDir,
    /// A newly chosen version, which no other run may hold.
    pub fresh: bool,
    /// Named by the environment ([`VERSION_ENV`](crate::run_dir::VERSION_ENV)), not chosen.
    named: bool,
    /// The version `latest` named before this run.
    previous: Option<u32>,
    /// The root and those of its parents that did not exist before this run, innermost first.
    new_dirs: Vec<PathBuf>,
    /// Whether this process made the (empty) version directory when it chose it, and has not
    /// started the run in it yet: dropped so, it removes what it made.
    claimed: std::cell::Cell<bool>,
}

impl Drop for Chosen {
    /// A run refused between choosing its version and starting leaves nothing behind.
    fn drop(&mut self) {
        if self.claimed.get() {
            crate::stop::remove_on_setup_stop(&[]);
            let _ = std::fs::remove_dir(self.dir.path());
            self.remove_new_dirs();
        }
    }
}

impl Chosen {
    /// Makes the version directory when the run starts; says where the run writes. `run_id`
    /// is the run's id once any resume has set it. A version the environment names is a
    /// launcher's way to put its ranks in one version, not a way to start afresh over a
    /// finished run: one holding another run's results is refused.
    pub fn create(&self, run_id: &str, manifest: &Path, quiet: bool) -> Result<()> {
        let record = RunRecord {
            run_id: run_id.to_owned(),
            started: crate::system::timestamp(),
            manifest: manifest.to_path_buf(),
        };
        let claim = if self.fresh {
            Claim::New
        } else if self.named {
            Claim::Named
        } else {
            Claim::Resumed
        };
        self.dir.create(&record, claim)?;
        self.claimed.set(false);
        crate::stop::remove_on_setup_stop(&[]);
        if !quiet {
            println!(
                "fe-host run: writing into {} ({} links to it);",
                self.dir.path().display(),
                self.dir.root.join(run_dir::LATEST).display()
            );
        }
        Ok(())
    }

    /// After a failed run: a new version it wrote nothing into but its `run.json` and record
    /// (it failed at start, in the warm-up say) is removed and `latest` named what it named
    /// before, so the failure leaves nothing behind.
    pub fn forget_if_unused(&self) {
        let dir = self.dir.path();
        let names: Vec<_> = std::fs::read_dir(&dir)
            .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        let unused = !names.is_empty() && names.iter().all(|n| run_dir::is_record_file(n));
        if !self.fresh || !unused {
            return;
        }
        for name in names {
            let _ = std::fs::remove_file(dir.join(name));
        }
        let _ = std::fs::remove_dir(&dir);
        match self.previous {
            Some(version) => {
                let _ = run_dir::RunDir {
                    root: self.dir.root.clone(),
                    version,
                }
                .point_latest();
            }
            None => {
                let _ = std::fs::remove_file(self.dir.root.join(run_dir::LATEST));
                self.remove_new_dirs();
            }
        }
    }

    fn remove_new_dirs(&self) {
        for dir in &self.new_dirs {
            // Only when empty: another process may have written there meanwhile.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// `latest` in a run root is the link fe-host keeps to the newest version: a directory (a root copied with `cp -rL`) would make the run fail at its end, after its
/// version was made; refused before anything is written.
fn latest_is_a_link(root: &Path) -> Result<()> {
    let latest = root.join(run_dir::LATEST);
    match std::fs::symlink_metadata(&latest) {
        Ok(meta) if meta.is_dir() => Err(Error::Usage(format!(
            "{}: is a directory, but fe-host keeps a link to the latest run version there (a copy made with `cp -rL`?); move it away",
            latest.display()
        ))),
        _ => Ok(()),
    }
}

/// Chooses the version of a run with a `run.log_dir` (`named_root`: the one the manifest
/// names, which `--log-dir` may have replaced) and moves the run's outputs into it. `resume`
/// is `--resume`'s value. A new version is claimed at once (its directory made empty, removed
/// again when the run is refused before it starts) when `claims`: the process that writes the
/// run; other ranks only need its paths. Writes nothing else.
pub fn choose(
    manifest: &mut Manifest,
    named_root: Option<PathBuf>,
    resume: Option<&str>,
    claims: bool,
) -> Result<Option<Chosen>> {
    // Checked whether or not the run is versioned: a launcher's mistake is never silent.
    let from_env = run_dir::version_from_env()?;
    let Some(root) = manifest.run.log_dir.clone() else {
        return Ok(None);
    };
    latest_is_a_link(&root)?;
    let from = named_root.unwrap_or_else(|| root.clone());
    let requested = match (from_env, resume) {
        (Some(version), _) => Some(version),
        (None, None) => None,
        (None, Some(super::checkpoint::AUTO)) => auto_version(manifest, (&from, &root))?,
        (None, Some(request)) => resumed_version(manifest, (&from, &root), request)?,
    };
    let previous = run_dir::latest(&root)?;
    let new_dirs: Vec<PathBuf> = root
        .ancestors()
        .take_while(|dir| !dir.as_os_str().is_empty() && !dir.exists())
        .map(Path::to_path_buf)
        .collect();
    let claimed = claims && requested.is_none();
    let dir = if claimed {
        let dir = RunDir::claim_next(&root)?;
        // A signal during set-up ends the process at once, past `Drop`: its handler removes
        // what the claim made (when still empty).
        let mut made = vec![dir.path()];
        made.extend(new_dirs.iter().cloned());
        crate::stop::remove_on_setup_stop(&made);
        dir
    } else {
        RunDir::choose(&root, requested)?
    };
    manifest.move_outputs(&from, &dir.path());
    Ok(Some(Chosen {
        dir,
        fresh: requested.is_none(),
        named: from_env.is_some(),
        previous,
        new_dirs,
        claimed: std::cell::Cell::new(claimed),
    }))
}

/// `resume = "auto"` (an elastic restart, say): the latest version when its checkpoint folder
/// holds something to continue from, else a new version — never a fresh start written into a
/// finished run's version. Checkpoints kept outside the root are found where they are.
fn auto_version(manifest: &Manifest, (named, root): (&Path, &Path)) -> Result<Option<u32>> {
    let Some(version) = run_dir::latest(root)? else {
        return Ok(None);
    };
    let dir = RunDir {
        root: root.to_path_buf(),
        version,
    }
    .path();
    let inside = match &manifest.checkpoint {
        Some(config) if config.dir_named => run_dir::relocate(&config.dir, named, &dir),
        _ => Some(dir.join("checkpoints")),
    };
    let holds_checkpoints = inside
        .and_then(|d| std::fs::read_dir(d).ok())
        .is_some_and(|mut entries| entries.next().is_some());
    Ok(holds_checkpoints.then_some(version))
}

/// The version a resumed run appends to: `latest` resumes the latest version when the
/// checkpoints live in the versions; a checkpoint path inside a version names it; otherwise
/// the version whose run wrote the checkpoint. `None` (a new version) when no version did.
/// `named` is the root the manifest names, `root` the one the run writes under.
fn resumed_version(
    manifest: &Manifest,
    (named, root): (&Path, &Path),
    request: &str,
) -> Result<Option<u32>> {
    let checkpoints = crate::checkpoint::default_root(manifest);
    let path = if request == "latest" {
        let versioned = manifest
            .checkpoint
            .as_ref()
            .is_none_or(|config| !config.dir_named)
            || run_dir::relocate(&checkpoints, named, root).is_some();
        if versioned {
            return run_dir::latest(root);
        }
        checkpoints
    } else {
        PathBuf::from(request)
    };
    if let Some(version) = run_dir::version_containing(root, &path) {
        return Ok(Some(version));
    }
    // A checkpoint that cannot be read is reported by the resume itself.
    let Ok(checkpoint) = crate::checkpoint::resolve(&path) else {
        return Ok(None);
    };
    let Ok(bytes) = std::fs::read(checkpoint.join("checkpoint.json")) else {
        return Ok(None);
    };
    match serde_json::from_slice::<crate::checkpoint::CheckpointInfo>(&bytes) {
        Ok(info) if !info.run_id.is_empty() => run_dir::version_of_run(root, &info.run_id),
        _ => Ok(None),
    }
}
