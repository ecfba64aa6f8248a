//! What a component may know about the run as a whole: where its manifest is, where it may
//! write files, and which data-parallel rank it runs on.
//!
//! These are the same for every component of a process, so the host hands them to each
//! plugin once, before creating anything (`set_run_info` of the extension module added in
//! 0.1.1, [`PluginExt`](crate::ffi::PluginExt)), instead of in
//! [`CreateContext`](crate::CreateContext) and [`TraceContext`](crate::TraceContext), whose
//! layouts are frozen. Components read them through those contexts'
//! methods; a host older than 0.1.1 never calls `set_run_info`, and components then see
//! [`RunInfo::unknown`].

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use abi_stable::std_types::RStr;
use abi_stable::StableAbi;

/// The run as every component of this process sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunInfo {
    /// The directory of the run's manifest; relative paths in a component's configuration
    /// mean "relative to the manifest" when resolved with
    /// [`CreateContext::resolve_path`](crate::CreateContext::resolve_path).
    pub manifest_dir: Option<PathBuf>,
    /// Where the run's outputs go (its log directory, or the manifest's directory when it has
    /// none; a temporary directory under `--smoke`). Files a component writes belong here:
    /// [`CreateContext::output_path`](crate::CreateContext::output_path).
    pub output_dir: Option<PathBuf>,
    /// This process's data-parallel rank, `0..world_size`.
    pub rank: u32,
    /// How many processes train together (1 without data parallelism).
    pub world_size: u32,
}

impl RunInfo {
    /// What a component sees when the host did not say: no directories, rank 0 of 1.
    pub const fn unknown() -> Self {
        Self {
            manifest_dir: None,
            output_dir: None,
            rank: 0,
            world_size: 1,
        }
    }

    /// `path` as the configuration means it: absolute paths as given, relative ones against
    /// the manifest's directory when known (else as given, i.e. against the working directory).
    pub fn resolve_path(&self, path: impl AsRef<Path>) -> PathBuf {
        join_relative(self.manifest_dir.as_deref(), path.as_ref())
    }

    /// Where to write the output file or directory `path`: absolute paths as given, relative
    /// ones inside the run's output directory when known (else against the working directory).
    pub fn output_path(&self, path: impl AsRef<Path>) -> PathBuf {
        join_relative(self.output_dir.as_deref(), path.as_ref())
    }
}

fn join_relative(base: Option<&Path>, path: &Path) -> PathBuf {
    match base {
        Some(base) if path.is_relative() => base.join(path),
        _ => path.to_path_buf(),
    }
}

/// [`RunInfo`] as it crosses the boundary. Frozen: a host whose `FfiRunInfo` had more fields
/// than a plugin's would fail that plugin's layout check, so new run facts come in a new type
/// handed over by a new module (the evolution rules in [`crate::ffi`]).
/// Its accessors copy fields out, so the texts are `'static`: the host leaks one per run.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = FfiRunInfoRef)))]
#[sabi(missing_field(panic))]
pub struct FfiRunInfo {
    /// The manifest's directory, `""` when unknown.
    pub manifest_dir: RStr<'static>,
    /// The run's output directory, `""` when unknown.
    pub output_dir: RStr<'static>,
    /// This process's rank.
    pub rank: u32,
    /// The number of ranks.
    #[sabi(last_prefix_field)]
    pub world_size: u32,
}

impl FfiRunInfo {
    /// The boundary form of `info`, leaked (with its texts): the host makes one per run and
    /// hands the same one to every plugin. Paths that are not UTF-8 cross lossily.
    pub fn leak(info: &RunInfo) -> FfiRunInfoRef {
        use abi_stable::prefix_type::PrefixTypeTrait;
        let text = |dir: &Option<PathBuf>| -> RStr<'static> {
            let owned = dir
                .as_deref()
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_default();
            RStr::from_str(Box::leak(owned.into_boxed_str()))
        };
        Self {
            manifest_dir: text(&info.manifest_dir),
            output_dir: text(&info.output_dir),
            rank: info.rank,
            world_size: info.world_size,
        }
        .leak_into_prefix()
    }
}

impl From<FfiRunInfoRef> for RunInfo {
    fn from(ffi: FfiRunInfoRef) -> Self {
        let dir = |text: RStr<'_>| (!text.is_empty()).then(|| PathBuf::from(text.as_str()));
        Self {
            manifest_dir: dir(ffi.manifest_dir()),
            output_dir: dir(ffi.output_dir()),
            rank: ffi.rank(),
            world_size: ffi.world_size().max(1),
        }
    }
}

static PROCESS: RwLock<Option<RunInfo>> = RwLock::new(None);

thread_local! {
    /// Set by [`crate::testing::set_run_info`]: tests of one binary run on many threads, each
    /// with its own run.
    static THIS_THREAD: RefCell<Option<RunInfo>> = const { RefCell::new(None) };
}

/// The run this process is part of, as the host last described it.
pub fn current() -> RunInfo {
    if let Some(info) = THIS_THREAD.with(|slot| slot.borrow().clone()) {
        return info;
    }
    let guard = PROCESS
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    guard.clone().unwrap_or_else(RunInfo::unknown)
}

/// Records the run for every component of this binary (the host calls it through the root
/// module for each plugin, and directly for its own copy of this crate).
pub fn set_process(info: RunInfo) {
    let mut guard = PROCESS
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    *guard = Some(info);
}

/// Records the run for this thread only, over the process-wide one; `None` clears it.
pub(crate) fn set_thread(info: Option<RunInfo>) {
    THIS_THREAD.with(|slot| *slot.borrow_mut() = info);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_resolve_against_the_manifest_and_outputs_against_the_output_dir() {
        let info = RunInfo {
            manifest_dir: Some("/runs/exp".into()),
            output_dir: Some("/runs/exp/logs/version_2".into()),
            rank: 1,
            world_size: 2,
        };
        assert_eq!(
            info.resolve_path("data/x.csv"),
            Path::new("/runs/exp/data/x.csv")
        );
        assert_eq!(info.resolve_path("/abs/x.csv"), Path::new("/abs/x.csv"));
        assert_eq!(
            info.output_path("preds.csv"),
            Path::new("/runs/exp/logs/version_2/preds.csv")
        );
        assert_eq!(
            RunInfo::unknown().resolve_path("data/x.csv"),
            Path::new("data/x.csv")
        );
    }

    #[test]
    fn crosses_the_boundary_unchanged() {
        let info = RunInfo {
            manifest_dir: Some("/m".into()),
            output_dir: None,
            rank: 3,
            world_size: 4,
        };
        assert_eq!(RunInfo::from(FfiRunInfo::leak(&info)), info);
    }
}
