//! Versioned run directories, as PyTorch Lightning keeps them: a run whose `run.log_dir` is
//! `runs/lenet` (the *root*) writes into `runs/lenet/version_N`, N the next free number, and
//! `runs/lenet/latest` links to the version last started or resumed. A resumed run appends to
//! the version its checkpoint came from, so a second run never overwrites a first one.
//!
//! Every output the manifest names under the root moves into the version directory with it
//! (savers, loggers, TensorBoard, and `[checkpoint] dir`); outputs named elsewhere stay where
//! they are named. A checkpoint folder outside the root is shared by every run, and a new run
//! refuses one that holds another run's checkpoints (see [`crate::checkpoint::check_owner`]).
//!
//! The choice is split from the writing: [`RunDir::choose`] reads the listing only, so a run
//! refused at start leaves nothing behind; [`RunDir::create`] makes the directory when the
//! run starts. A launcher of several ranks lets rank 0 choose ([`RunDir::prepare`]) and passes
//! the version to every rank in [`VERSION_ENV`].

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Set by launchers: the version every process of one run uses (a non-negative integer).
pub const VERSION_ENV: &str = "FE_RUN_VERSION";
/// The link in the root naming the version last started or resumed.
pub const LATEST: &str = "latest";
/// What a version directory records about its run.
pub const RUN_FILE: &str = "run.json";
const PREFIX: &str = "version_";

/// `run.json`: which run a version directory belongs to and when it started.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RunRecord {
    /// The run's id, as its checkpoints record it.
    pub run_id: String,
    /// When the run first started (`YYYYmmdd-HHMMSS`, UTC).
    pub started: String,
    /// The manifest it was started from.
    pub manifest: PathBuf,
}

/// `version_N`.
pub fn version_name(version: u32) -> String {
    format!("{PREFIX}{version}")
}

/// The N of `version_N`; `None` for any other name (`version_03` included, so that two names
/// never mean one version).
pub fn parse_version(name: &str) -> Option<u32> {
    let digits = name.strip_prefix(PREFIX)?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    canonical.then(|| digits.parse().ok()).flatten()
}

/// The version a new run takes among the entries `names` of its root: one past the highest,
/// 0 in an empty root (gaps are never filled: a deleted version's number stays unused).
pub fn next_version<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> u32 {
    names
        .into_iter()
        .filter_map(|n| parse_version(n.as_ref()))
        .max()
        .map_or(0, |v| v.saturating_add(1))
}

/// The value of [`VERSION_ENV`], checked.
pub fn parse_env_version(value: &str) -> std::result::Result<u32, String> {
    value.trim().parse().map_err(|_| {
        format!(
            "{VERSION_ENV}={value:?}: expected a version number (0, 1, ...), as launchers set it"
        )
    })
}

/// The version [`VERSION_ENV`] asks for, if set.
pub fn version_from_env() -> Result<Option<u32>> {
    match std::env::var(VERSION_ENV) {
        Ok(value) => parse_env_version(&value).map(Some).map_err(Error::Usage),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(Error::Usage(format!(
            "{VERSION_ENV} is not valid text; expected a version number"
        ))),
    }
}

/// The versions in `root`, ascending (none when it does not exist).
pub fn versions(root: &Path) -> Result<Vec<u32>> {
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(root, e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(root, e))?;
        let name = entry.file_name();
        if let Some(v) = name.to_str().and_then(parse_version) {
            if entry.path().is_dir() {
                found.push(v);
            }
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// The version `latest` names, or the highest when the link is missing or names none.
pub fn latest(root: &Path) -> Result<Option<u32>> {
    let all = versions(root)?;
    let linked = read_latest(root).filter(|v| all.contains(v));
    Ok(linked.or_else(|| all.last().copied()))
}

fn read_latest(root: &Path) -> Option<u32> {
    let link = root.join(LATEST);
    let target = std::fs::read_link(&link)
        .ok()
        .or_else(|| std::fs::read_to_string(&link).ok().map(PathBuf::from))?;
    parse_version(target.file_name()?.to_str()?.trim())
}

/// `path` with `.` dropped and `..` applied to the part before it, without touching the file
/// system (so `examples/../runs/x` is `runs/x`).
pub fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        lexical(path)
    } else {
        let here = std::env::current_dir().unwrap_or_default();
        lexical(&here.join(path))
    }
}

/// `path` moved from under `from` to the same place under `to`; `None` when it is not under
/// `from`.
pub fn relocate(path: &Path, from: &Path, to: &Path) -> Option<PathBuf> {
    let rest = absolute(path).strip_prefix(absolute(from)).ok()?.to_owned();
    Some(if rest.as_os_str().is_empty() {
        to.to_path_buf()
    } else {
        to.join(rest)
    })
}

/// The version of `root` that `path` lies in (`root/version_3/checkpoints` → 3).
pub fn version_containing(root: &Path, path: &Path) -> Option<u32> {
    let rest = absolute(path).strip_prefix(absolute(root)).ok()?.to_owned();
    match rest.components().next()? {
        Component::Normal(name) => parse_version(name.to_str()?),
        _ => None,
    }
}

/// Reads the `run.json` of `dir`, if it has one.
pub fn read_record(dir: &Path) -> Option<RunRecord> {
    let bytes = std::fs::read(dir.join(RUN_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The version of `root` whose run is `run_id`.
pub fn version_of_run(root: &Path, run_id: &str) -> Result<Option<u32>> {
    Ok(versions(root)?
        .into_iter()
        .find(|&v| read_record(&root.join(version_name(v))).is_some_and(|r| r.run_id == run_id)))
}

/// One version of a root: where a run writes.
#[derive(Debug, Clone, PartialEq)]
pub struct RunDir {
    /// The root (`run.log_dir`).
    pub root: PathBuf,
    /// N of `version_N`.
    pub version: u32,
}

impl RunDir {
    /// The version `requested`, or the next free one, of `root`; writes nothing.
    pub fn choose(root: &Path, requested: Option<u32>) -> Result<Self> {
        let version = match requested {
            Some(v) => v,
            None => {
                let names = versions(root)?.into_iter().map(version_name);
                next_version(names)
            }
        };
        Ok(Self {
            root: lexical(root),
            version,
        })
    }

    /// The next free version of `root`, its directory made (empty) at once: a run started at
    /// the same moment, which chose the same number, finds it taken and takes the one after,
    /// as does a run finding a file where a version would go. `root` is made when missing.
    pub fn claim_next(root: &Path) -> Result<Self> {
        std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
        let mut chosen = Self::choose(root, None)?;
        loop {
            let dir = chosen.path();
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok(chosen),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    chosen.version = chosen.version.checked_add(1).ok_or_else(|| {
                        Error::Usage(format!("{}: no free version left", root.display()))
                    })?;
                }
                Err(e) => return Err(Error::io(&dir, e)),
            }
        }
    }

    /// [`RunDir::choose`], and the directory made (empty) so that no other run takes it:
    /// what a launcher calls once before starting ranks with [`VERSION_ENV`] set to
    /// [`RunDir::version`].
    pub fn prepare(root: &Path, requested: Option<u32>) -> Result<Self> {
        let chosen = Self::choose(root, requested)?;
        refuse_foreign_latest(root)?;
        let dir = chosen.path();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        Ok(chosen)
    }

    /// `root/version_N`.
    pub fn path(&self) -> PathBuf {
        self.root.join(version_name(self.version))
    }

    /// Makes the directory when the run starts, records `record` in it unless it has a
    /// record already (a resumed run keeps its first start), and points `latest` at it.
    /// A record of another run in a [`Claim::New`] directory means two runs chose the same
    /// version at once: refused, so they never share files. A [`Claim::Named`] directory that
    /// holds another run's results is refused too: this run would overwrite them.
    pub fn create(&self, record: &RunRecord, claim: Claim) -> Result<()> {
        let dir = self.path();
        let own = read_record(&dir).is_some_and(|r| r.run_id == record.run_id);
        if claim == Claim::Named && !own && holds_results(&dir)? {
            return Err(Error::Usage(format!(
                "{VERSION_ENV}={}: {} already holds another run's results; continue that run \
                 with --resume, or unset {VERSION_ENV} to start a new version",
                self.version,
                dir.display()
            )));
        }
        refuse_foreign_latest(&self.root)?;
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        match read_record(&dir) {
            Some(existing) if claim == Claim::New && existing.run_id != record.run_id => {
                return Err(Error::Usage(format!(
                    "{}: another run ({}) took this version at the same time; start this run again",
                    dir.display(),
                    existing.run_id
                )));
            }
            // The record of a run that wrote nothing else (it failed at start): this run
            // takes the version over, and its checkpoints must match the record.
            Some(existing) if claim == Claim::Named && existing.run_id != record.run_id => {
                write_record(&dir, record)?;
            }
            Some(_) => {}
            None => write_record(&dir, record)?,
        }
        self.point_latest()
    }

    /// Replaces `root/latest` by a link to this version (a relative link, so the root can
    /// move), through a temporary link renamed over it.
    pub fn point_latest(&self) -> Result<()> {
        point_latest(&self.root, self.version)
    }
}

/// How a run came to a version, which decides what it may find there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Newly chosen, the next free number: no other run's record may be there.
    New,
    /// Named by [`VERSION_ENV`]: empty (a launcher may have made it with
    /// [`RunDir::prepare`]), holding at most another run's record, or this run's own results
    /// (it resumes the run recorded there); never another run's results.
    Named,
    /// The version of the checkpoint the run resumes: its files are the run's own.
    Resumed,
}

/// Whether version directory `dir` holds anything but its `run.json` and its record: results
/// (logs, models, checkpoints) that a run starting afresh in it would overwrite.
fn holds_results(dir: &Path) -> Result<bool> {
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(|e| Error::io(dir, e))?;
                if !is_record_file(&entry.file_name()) {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(dir, e)),
    }
}

/// `run.json` or a file of [`crate::record`]: what a run writes about itself at start.
pub fn is_record_file(name: &std::ffi::OsStr) -> bool {
    name == RUN_FILE || crate::record::FILES.iter().any(|file| name == *file)
}

fn write_record(dir: &Path, record: &RunRecord) -> Result<()> {
    let path = dir.join(RUN_FILE);
    let json = serde_json::to_vec_pretty(record)
        .map_err(|e| Error::Internal(format!("cannot serialize {RUN_FILE}: {e}")))?;
    std::fs::write(&path, json).map_err(|e| Error::io(&path, e))
}

/// Refuses a run root whose `latest` is not the link fe-host keeps there (a file or folder
/// someone put there): replacing it by the link would lose it.
fn refuse_foreign_latest(root: &Path) -> Result<()> {
    let path = root.join(LATEST);
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if !meta.file_type().is_symlink() => Err(Error::Usage(format!(
            "{}: is a {} fe-host did not make (it keeps `{LATEST}` as a link to the newest \
             version_N and would replace it); move it away and start again",
            path.display(),
            if meta.is_dir() { "folder" } else { "file" }
        ))),
        _ => Ok(()),
    }
}

fn point_latest(root: &Path, version: u32) -> Result<()> {
    refuse_foreign_latest(root)?;
    let link = root.join(LATEST);
    let temp = root.join(format!(".{LATEST}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&temp);
    crate::replace::through_temp(&link, &temp, |temp| {
        #[cfg(unix)]
        let made = std::os::unix::fs::symlink(version_name(version), temp);
        #[cfg(not(unix))]
        let made = std::fs::write(temp, version_name(version));
        made.map_err(|e| Error::io(temp, e))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_version_names_count() {
        assert_eq!(parse_version("version_0"), Some(0));
        assert_eq!(parse_version("version_12"), Some(12));
        for name in [
            "version_",
            "version_03",
            "version_-1",
            "version_1a",
            "latest",
            "v1",
        ] {
            assert_eq!(parse_version(name), None, "{name}");
        }
        assert_eq!(version_name(7), "version_7");
    }

    #[test]
    fn the_next_version_is_one_past_the_highest_and_never_fills_gaps() {
        assert_eq!(next_version(Vec::<&str>::new()), 0);
        assert_eq!(next_version(["latest", "notes.txt"]), 0);
        assert_eq!(next_version(["version_0", "version_1", "latest"]), 2);
        assert_eq!(next_version(["version_3", "version_0"]), 4);
        assert_eq!(next_version(["version_9", "version_10"]), 11);
        assert_eq!(next_version(["version_007"]), 0);
    }

    #[test]
    fn the_environment_names_a_version_or_is_refused() {
        assert_eq!(parse_env_version("3"), Ok(3));
        assert_eq!(parse_env_version(" 0\n"), Ok(0));
        let error = parse_env_version("latest").unwrap_err();
        assert!(error.contains("FE_RUN_VERSION=\"latest\""), "{error}");
        assert!(parse_env_version("-1").is_err());
    }

    #[test]
    fn paths_move_only_from_under_the_root() {
        let (from, to) = (
            Path::new("ex/../runs/lenet"),
            Path::new("runs/lenet/version_2"),
        );
        assert_eq!(
            relocate(Path::new("runs/lenet/best"), from, to),
            Some(PathBuf::from("runs/lenet/version_2/best"))
        );
        assert_eq!(
            relocate(Path::new("./runs/lenet"), from, to),
            Some(to.to_path_buf())
        );
        assert_eq!(relocate(Path::new("runs/lenet2/best"), from, to), None);
        assert_eq!(relocate(Path::new("models"), from, to), None);
        assert_eq!(lexical(Path::new("a/./b/../c")), PathBuf::from("a/c"));
        assert_eq!(lexical(Path::new("../a/..")), PathBuf::from(".."));
    }

    #[test]
    fn a_path_inside_a_version_names_it() {
        let root = Path::new("runs/lenet");
        let inside = Path::new("runs/lenet/version_3/checkpoints/ckpt-30");
        assert_eq!(version_containing(root, inside), Some(3));
        assert_eq!(version_containing(root, Path::new("runs/lenet/ckpt")), None);
        assert_eq!(
            version_containing(root, Path::new("elsewhere/version_1")),
            None
        );
    }

    #[test]
    fn runs_claiming_at_once_take_different_versions_and_skip_a_file_in_the_way() {
        let root = std::env::temp_dir().join(format!("fe-run-claim-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // Both chose version 0 before either made it: the second to claim takes version 1.
        let (first, second) = (RunDir::choose(&root, None), RunDir::choose(&root, None));
        assert_eq!(first.unwrap().version, second.unwrap().version);
        assert_eq!(RunDir::claim_next(&root).unwrap().version, 0);
        assert_eq!(RunDir::claim_next(&root).unwrap().version, 1);
        assert!(root.join("version_1").is_dir());
        // A file named like the next version is stepped over, not written into.
        std::fs::write(root.join("version_2"), "notes").unwrap();
        assert_eq!(RunDir::claim_next(&root).unwrap().version, 3);
        assert_eq!(
            std::fs::read_to_string(root.join("version_2")).unwrap(),
            "notes"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_latest_that_is_no_link_is_never_replaced() {
        let root = std::env::temp_dir().join(format!("fe-run-latest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join(LATEST), b"my notes").unwrap();
        let record = RunRecord {
            run_id: "a".into(),
            started: "20260101-000000".into(),
            manifest: "m.toml".into(),
        };
        let chosen = RunDir::choose(&root, None).unwrap();
        let error = chosen.create(&record, Claim::New).unwrap_err().to_string();
        assert!(error.contains("is a file fe-host did not make"), "{error}");
        assert!(RunDir::prepare(&root, None).is_err());
        assert_eq!(std::fs::read(root.join(LATEST)).unwrap(), b"my notes");
        assert!(!chosen.path().exists(), "nothing was made");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn create_records_the_run_and_latest_follows_the_last_started_version() {
        let root = std::env::temp_dir().join(format!("fe-run-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let record = |id: &str| RunRecord {
            run_id: id.into(),
            started: "20260101-000000".into(),
            manifest: "m.toml".into(),
        };
        let first = RunDir::choose(&root, None).unwrap();
        assert_eq!(first.version, 0);
        assert!(!root.exists(), "choosing writes nothing");
        first.create(&record("a"), Claim::New).unwrap();
        let second = RunDir::choose(&root, None).unwrap();
        assert_eq!(second.version, 1);
        second.create(&record("b"), Claim::New).unwrap();
        assert_eq!(latest(&root).unwrap(), Some(1));
        assert_eq!(version_of_run(&root, "a").unwrap(), Some(0));

        // Resuming version 0 keeps its record and makes it the latest.
        first.create(&record("a"), Claim::Resumed).unwrap();
        assert_eq!(latest(&root).unwrap(), Some(0));
        assert_eq!(read_record(&first.path()).unwrap(), record("a"));
        // Two runs that chose one version at once: the second is refused.
        let error = second
            .create(&record("c"), Claim::New)
            .unwrap_err()
            .to_string();
        assert!(error.contains("another run (b)"), "{error}");
        // A launcher's prepared version is taken by the ranks it starts.
        let prepared = RunDir::prepare(&root, None).unwrap();
        assert_eq!(prepared.version, 2);
        assert!(prepared.path().is_dir());
        prepared.create(&record("d"), Claim::Named).unwrap();
        assert_eq!(versions(&root).unwrap(), [0, 1, 2]);
        // Named for a fresh start, a version holding only another run's record is taken over;
        // one holding results is refused, naming it, and left as it was.
        first.create(&record("e"), Claim::Named).unwrap();
        assert_eq!(read_record(&first.path()).unwrap(), record("e"));
        std::fs::write(first.path().join("log.jsonl"), "{}\n").unwrap();
        let error = first.create(&record("f"), Claim::Named).unwrap_err();
        assert!(matches!(error, Error::Usage(_)), "{error}");
        let error = error.to_string();
        assert!(error.contains("FE_RUN_VERSION=0: "), "{error}");
        assert!(
            error.contains(&format!("{} already holds", first.path().display())),
            "{error}"
        );
        assert_eq!(read_record(&first.path()).unwrap(), record("e"));
        // The run recorded there resuming is what may write there.
        first.create(&record("e"), Claim::Named).unwrap();
        let _ = std::fs::remove_dir_all(&root);
    }
}
