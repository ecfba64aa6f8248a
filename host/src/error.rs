//! The host's error type and the exit code each kind of failure maps to.
//!
//! | code | meaning |
//! |-----:|---------|
//! | 0 | success |
//! | 1 | the run failed: an op, model or trace failed or panicked, or training diverged |
//! | 2 | usage: bad command line, or an invalid manifest (syntax, schema, unknown component, bad config) |
//! | 3 | plugins: a plugin file is missing, not a plugin, or incompatible (all problems listed) |
//! | 4 | device: the requested device is not available |
//! | 5 | data: a dataset file is missing, truncated or malformed; a model file (TorchScript, weights) is corrupt |
//! | 6 | checkpoint: a checkpoint is missing, corrupt or does not match the run |
//! | 75 | stopped by a first SIGINT (Ctrl-C) or SIGTERM after saving a checkpoint: continue with `--resume` |
//! | 130, 143 | stopped at once by a second SIGINT / SIGTERM (128 + the signal); the last complete checkpoint is kept. A `--smoke` run stops on the first (it keeps nothing to continue) |
//! | 70 | internal error in fe-host (a bug: please report it) |
//!
//! `run --nproc N` exits with the code of the first rank that failed (a rank killed by a
//! signal counts as 128 + the signal), after ending the others; 0 when every rank succeeded.

use std::fmt;
use std::path::PathBuf;

use fe_plugin_api::{ErrorKind, PluginError};

/// Everything that can stop fe-host.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad command-line usage.
    #[error("{0}")]
    Usage(String),
    /// The manifest is invalid; the message points at file, line, column and key.
    #[error("{0}")]
    Manifest(String),
    /// Loading plugins failed; every problem found, one per line.
    #[error("{}", plugin_problems(.0))]
    Plugins(Vec<String>),
    /// The requested device does not exist.
    #[error("{0}")]
    Device(String),
    /// A data file is missing or malformed.
    #[error("{path}: {message}")]
    Data {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A checkpoint is missing, corrupt or does not match.
    #[error("{path}: {message}")]
    Checkpoint {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A component failed (or panicked) while the run was going.
    #[error("{}", op_failure(.error, .during))]
    Component {
        /// The failure as reported across the plugin boundary (or by a built-in).
        error: PluginError,
        /// Where in the run: mode, epoch, step, batch.
        during: String,
    },
    /// The run failed for another reason (diverged, inconsistent data, ...).
    #[error("{0}")]
    Run(String),
    /// An I/O error on a file the run writes or reads.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The run stopped on SIGINT or SIGTERM after saving a checkpoint (see [`crate::stop`]).
    #[error("fe-host stopped: {signal} after step {step}; checkpoint: {}; continue with: {resume}", .checkpoint.display())]
    Stopped {
        /// `SIGINT` or `SIGTERM`.
        signal: &'static str,
        /// The last training step done.
        step: u64,
        /// The checkpoint it wrote.
        checkpoint: PathBuf,
        /// The command that continues the run (filled in by the command line).
        resume: String,
    },
    /// A `--smoke` run stopped on SIGINT or SIGTERM: it keeps nothing, so there is nothing to
    /// continue (exit 128 + the signal, as a run stopped at once).
    #[error("fe-host smoke: stopped by {signal} after step {step}; {}", match kept {
        Some(dir) => format!("what it wrote is kept in {}", dir.display()),
        None => "its temporary directory is removed".to_owned(),
    })]
    SmokeStopped {
        /// `SIGINT` or `SIGTERM`.
        signal: &'static str,
        /// The last training step done.
        step: u64,
        /// Its temporary directory, when `--keep` kept it.
        kept: Option<PathBuf>,
    },
    /// A rank that `run --nproc` started failed (the others were then stopped), or every rank
    /// stopped on a forwarded SIGINT/SIGTERM; the launcher exits with that rank's code.
    #[error("{}", rank_failure(*.rank, *.world, *.code, *.signal))]
    RankFailed {
        /// The first rank that ended unsuccessfully.
        rank: usize,
        /// How many ranks were started.
        world: usize,
        /// Its exit code (128 + the signal when a signal killed it).
        code: i32,
        /// The signal that killed it, if one did.
        signal: Option<i32>,
    },
    /// A rank of a data-parallel run failed by itself, not because another rank left it: it
    /// says so, and the other ranks, which it left, name it (see `SharedGroup::post_failure`).
    #[error("rank {rank} of {world} failed: {error}")]
    OnRank {
        /// This rank.
        rank: usize,
        /// How many ranks train together.
        world: usize,
        /// What failed.
        error: Box<Error>,
    },
    /// A bug in fe-host.
    #[error("internal error: {0} (this is a bug in fe-host; please report it)")]
    Internal(String),
}

/// `Result` with the host's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The process exit code for this error (see the module docs).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Component { .. } | Error::Run(_) | Error::Io { .. } => 1,
            Error::Usage(_) | Error::Manifest(_) => 2,
            Error::Plugins(_) => 3,
            Error::Device(_) => 4,
            Error::Data { .. } => 5,
            Error::Checkpoint { .. } => 6,
            Error::Stopped { .. } => crate::stop::EXIT_STOPPED as i32,
            Error::SmokeStopped { signal, .. } => match *signal {
                "SIGTERM" => 128 + libc::SIGTERM,
                _ => 128 + libc::SIGINT,
            },
            Error::RankFailed { code, .. } => (*code).clamp(1, 255),
            Error::OnRank { error, .. } => error.exit_code(),
            Error::Internal(_) => 70,
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A data error on `path`.
    pub fn data(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Data {
            path: path.into(),
            message: message.into(),
        }
    }

    /// A failure of a built-in component, in the same shape plugin failures have.
    pub fn builtin(component: &str, method: &str, message: impl Into<String>) -> PluginError {
        PluginError {
            kind: ErrorKind::Failed,
            plugin: "fe-host".into(),
            component: component.into(),
            method: method.into(),
            field: "".into(),
            message: message.into().into(),
        }
    }
}

fn plugin_problems(problems: &[String]) -> String {
    let mut out = String::new();
    if problems.len() > 1 {
        out.push_str(&format!("{} plugin problems:", problems.len()));
        for problem in problems {
            out.push_str("\n  - ");
            out.push_str(problem);
        }
    } else if let Some(problem) = problems.first() {
        out.push_str(problem);
    }
    out
}

fn rank_failure(rank: usize, world: usize, code: i32, signal: Option<i32>) -> String {
    if code == i32::from(crate::stop::EXIT_STOPPED) {
        return format!(
            "fe-host stopped: every rank stopped once rank 0 had saved a checkpoint (rank {rank} of {world} exited first, with code {code}); continue with the same command and --resume"
        );
    }
    match signal {
        Some(signal) => format!(
            "rank {rank} of {world} was killed by signal {signal} ({}), the first to fail; any still running were stopped",
            signal_name(signal)
        ),
        None => format!(
            "rank {rank} of {world} exited with code {code}, the first to fail; any still running were stopped (its output above, prefixed [rank {rank}], says why)"
        ),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        _ => "a signal",
    }
}

fn op_failure(error: &PluginError, during: &str) -> String {
    let verb = match error.kind {
        ErrorKind::Panicked => "panicked",
        _ => "failed",
    };
    format!(
        "{}::{} {verb} in {} ({during}): {}",
        error.plugin, error.component, error.method, error.message
    )
}

/// Where in a run something happened, for error messages.
#[derive(Debug, Clone, Copy)]
pub struct During<'a> {
    /// Mode.
    pub mode: fe_plugin_api::Mode,
    /// Epoch from 1.
    pub epoch: u32,
    /// Global (training) step.
    pub step: u64,
    /// Batch within the epoch, from 1.
    pub batch: u64,
    /// Dataset id.
    pub ds_id: &'a str,
    /// `true` during the warm-up check.
    pub warmup: bool,
}

impl fmt::Display for During<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.warmup {
            write!(f, "warm-up, {} epoch {}", self.mode, self.epoch)?;
        } else {
            write!(
                f,
                "{} epoch {}, step {}, batch {}",
                self.mode, self.epoch, self.step, self.batch
            )?;
        }
        if !self.ds_id.is_empty() {
            write!(f, ", ds_id {}", self.ds_id)?;
        }
        Ok(())
    }
}
