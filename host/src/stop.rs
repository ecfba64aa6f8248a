//! Stopping a run on request: Ctrl-C (SIGINT) or SIGTERM (what SLURM and Kubernetes send
//! before they preempt a job).
//!
//! The first signal only raises a flag. The fit loop reads it between steps, finishes the
//! step it is in, writes a checkpoint through the normal crash-safe path, flushes its logs,
//! says where to resume from and ends with [`EXIT_STOPPED`]. A second signal ends the process
//! at once with the shell's code for it (130 for SIGINT, 143 for SIGTERM); the checkpoint
//! store's atomic protocol means the last complete checkpoint is still there, and what a
//! write in flight left is removed when the next run starts.
//!
//! The handler goes in when `run` starts, not when training does: a process started with the
//! signals ignored (a non-interactive shell's background job, `cmd &`, ignores SIGINT) would
//! otherwise lose a signal sent while it sets up, and take the next one, meant to stop it at
//! once, as a first. Before training ([`install_for_setup`]) there is no step to finish, so
//! any signal stops at once, as the default action would.
//!
//! The request is a flag read at step boundaries rather than an action taken inside the
//! handler, so that a data-parallel run can agree on it: every rank reads its own flag after
//! the same step and the ranks combine them (any rank asked to stop stops them all) before
//! acting — [`StopRequest::agreed`] is the one place that combination goes.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Exit code of a run stopped by its first SIGINT or SIGTERM after it saved a checkpoint
/// (BSD's `EX_TEMPFAIL`: try again, here with `--resume`).
pub const EXIT_STOPPED: u8 = 75;

/// Signals received since [`install`]: 0, or the signal number of the first in the low byte
/// and the count above it.
static RECEIVED: AtomicU32 = AtomicU32::new(0);

/// Whether a first signal only asks to stop after the step ([`install`]); before that, every
/// signal stops at once ([`install_for_setup`]).
static TRAINING: AtomicBool = AtomicBool::new(false);

/// Whether the run has a complete checkpoint to go back to (one it wrote, or the one it
/// resumed from): what a signal that stops it at once can promise.
static CHECKPOINT_KEPT: AtomicBool = AtomicBool::new(false);

/// Records that the run has a complete checkpoint (see [`CHECKPOINT_KEPT`]).
pub fn checkpoint_complete() {
    CHECKPOINT_KEPT.store(true, Ordering::SeqCst);
}

/// The signal that asks a run to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Ctrl-C.
    Interrupt,
    /// A scheduler's polite kill.
    Terminate,
}

impl Signal {
    /// `SIGINT` or `SIGTERM`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        }
    }

    /// A number for the ranks' max all-reduce: 0 for none; SIGTERM outranks SIGINT, so that a
    /// preemption is what every rank reports when both arrived.
    pub fn code(signal: Option<Self>) -> f64 {
        match signal {
            None => 0.0,
            Some(Signal::Interrupt) => 1.0,
            Some(Signal::Terminate) => 2.0,
        }
    }

    /// The inverse of [`Signal::code`].
    pub fn from_code(code: f64) -> Option<Self> {
        if code >= 2.0 {
            Some(Signal::Terminate)
        } else if code >= 1.0 {
            Some(Signal::Interrupt)
        } else {
            None
        }
    }

    fn from_number(number: u32) -> Option<Self> {
        match number as libc::c_int {
            libc::SIGINT => Some(Signal::Interrupt),
            libc::SIGTERM => Some(Signal::Terminate),
            _ => None,
        }
    }
}

/// Set in a data-parallel rank, whose parent (`run --nproc`, torchrun's agent) forwards the
/// signals it gets: see [`parent_forwards_signals`].
static PARENT_FORWARDS: AtomicBool = AtomicBool::new(false);

/// Signals received while training, from the parent and from anyone else (a user's `kill`, a
/// terminal, a scheduler): one request can reach a rank along both.
static FROM_PARENT: AtomicU32 = AtomicU32::new(0);
static FROM_OTHERS: AtomicU32 = AtomicU32::new(0);

/// Set in a data-parallel rank other than rank 0, which speaks for the run: see
/// [`speaks_for_the_run`].
static SILENT: AtomicBool = AtomicBool::new(false);

/// Whether this process's notes about a signal (what it will do, what a stop at once leaves)
/// reach the user. A rank other than 0 keeps them to itself: it writes no checkpoints, so what
/// it could say about them would be wrong ("nothing to resume" beside rank 0's checkpoint),
/// and N ranks saying one thing is noise.
pub fn speaks_for_the_run(speaks: bool) {
    SILENT.store(!speaks, Ordering::SeqCst);
}

/// Tells the handler that this process's parent forwards the signals it receives (a launcher
/// of data-parallel ranks does). A scheduler that signals every process of a job (SLURM's
/// `--signal`, `scancel`) then reaches each rank twice with one request: directly and
/// forwarded. The copy that arrives along the other path is the same request, not a second
/// one; a second request along the same path (a second Ctrl-C at the launcher, a second
/// `kill` of the rank) still stops at once.
pub fn parent_forwards_signals() {
    PARENT_FORWARDS.store(true, Ordering::SeqCst);
}

/// Empty directories a signal before training removes as it ends the process (a version the
/// run claimed, and the parents it made for it), innermost first: a leaked, NUL-terminated
/// list, read by the handler without allocating.
static SETUP_DIRS: std::sync::atomic::AtomicPtr<Vec<std::ffi::CString>> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// Makes a signal that stops the run during set-up remove `dirs` (when empty), or nothing with
/// `dirs` empty. The previous list is leaked, not freed: a handler may be reading it.
pub fn remove_on_setup_stop(dirs: &[std::path::PathBuf]) {
    use std::os::unix::ffi::OsStrExt;
    let list: Vec<std::ffi::CString> = dirs
        .iter()
        .filter_map(|d| std::ffi::CString::new(d.as_os_str().as_bytes()).ok())
        .collect();
    let new = if list.is_empty() {
        std::ptr::null_mut()
    } else {
        Box::into_raw(Box::new(list))
    };
    SETUP_DIRS.store(new, Ordering::SeqCst);
}

fn remove_setup_dirs() {
    let dirs = SETUP_DIRS.load(Ordering::SeqCst);
    if dirs.is_null() {
        return;
    }
    // SAFETY: set by `remove_on_setup_stop` from a leaked Box, never freed; rmdir(2) is
    // async-signal-safe and removes a directory only when it is empty.
    unsafe {
        for dir in (*dirs).iter() {
            libc::rmdir(dir.as_ptr());
        }
    }
}

extern "C" fn on_signal(signal: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let forwarding = PARENT_FORWARDS.load(Ordering::SeqCst);
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler; getppid(2) is
    // async-signal-safe.
    let from_parent =
        forwarding && !info.is_null() && unsafe { (*info).si_pid() == libc::getppid() };
    let path = if from_parent {
        &FROM_PARENT
    } else {
        &FROM_OTHERS
    };
    let before_on_path = path.fetch_add(1, Ordering::SeqCst);
    let before = RECEIVED.fetch_add(1 << 8, Ordering::SeqCst);
    let silent = SILENT.load(Ordering::SeqCst);
    if !TRAINING.load(Ordering::SeqCst) {
        remove_setup_dirs();
        // No leading newline: nothing (no progress bar) is mid-line before training.
        let note = b"fe-host: stopped at once, before training started\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe.
        unsafe {
            if !silent && !from_parent {
                libc::write(2, note.as_ptr().cast(), note.len());
            }
            libc::_exit(128 + signal);
        }
    }
    if before == 0 {
        RECEIVED.fetch_or(signal as u32 & 0xff, Ordering::SeqCst);
        // A signal from the launcher is the launcher's to explain: the user's stop it passes on
        // (it says so itself), or the end of a run another rank failed, where this promise
        // would be broken at the next collective.
        if !silent && !from_parent {
            let note = b"\nfe-host: stopping after this step (a checkpoint is saved); signal again to stop at once\n";
            // SAFETY: write(2) is async-signal-safe; the buffer is static.
            unsafe {
                libc::write(2, note.as_ptr().cast(), note.len());
            }
        }
        return;
    }
    if forwarding && before_on_path == 0 {
        // The first request again, along the other path.
        return;
    }
    let note: &[u8] = if CHECKPOINT_KEPT.load(Ordering::SeqCst) {
        b"\nfe-host: stopped at once; the last complete checkpoint is kept\n"
    } else {
        b"\nfe-host: stopped at once, before any checkpoint was complete (nothing to resume)\n"
    };
    // SAFETY: write(2) and _exit(2) are async-signal-safe.
    unsafe {
        if !silent {
            libc::write(2, note.as_ptr().cast(), note.len());
        }
        libc::_exit(128 + signal);
    }
}

/// Routes SIGINT and SIGTERM to the stop flag for the rest of the process: what the fit loop
/// reads. Call it when training starts.
pub fn install() {
    TRAINING.store(true, Ordering::SeqCst);
    set_handler();
}

/// Makes SIGINT and SIGTERM stop the process at once (exit 128 + the signal) until [`install`]
/// is called, whatever their disposition was (ignored ones included). Call it first thing in
/// a command that will train.
pub fn install_for_setup() {
    set_handler();
}

fn set_handler() {
    // SAFETY: the handler only touches atomics and calls async-signal-safe functions.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal
            as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
            as libc::sighandler_t;
        // SA_RESTART: a signal must not make a file write or a read of the data fail.
        // SA_SIGINFO: the handler learns who sent it.
        action.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
}

/// The signal that asked this process to stop, if one did.
pub fn received() -> Option<Signal> {
    Signal::from_number(RECEIVED.load(Ordering::Relaxed) & 0xff)
}

/// The stop decision the fit loop takes between steps.
#[derive(Debug, Default)]
pub struct StopRequest {
    /// Set once the run decided to stop; later checks then cost nothing.
    pub decided: Option<Signal>,
}

impl StopRequest {
    /// Whether the run stops after the step that just ended. One relaxed atomic load: cheap
    /// enough for every step. In a data-parallel run this is where the ranks' flags are
    /// combined (a max all-reduce), so that all of them stop after the same step.
    ///
    /// `shared`: this is a rank of a data-parallel run, whose own flag is only a proposal:
    /// `decided` is then set by the ranks' agreement ([`StopRequest::decide`]), never by this
    /// process alone.
    pub fn agreed(&mut self, shared: bool) -> Option<Signal> {
        if self.decided.is_none() && !shared {
            self.decided = received();
        }
        self.decided
    }

    /// What this process proposes to the others: the signal it received, if any.
    pub fn local(&self) -> Option<Signal> {
        self.decided.or_else(received)
    }

    /// Records what the ranks agreed (the max of their proposals).
    pub fn decide(&mut self, agreed: Option<Signal>) {
        if self.decided.is_none() {
            self.decided = agreed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_numbers_map_to_their_names() {
        assert_eq!(
            Signal::from_number(libc::SIGINT as u32),
            Some(Signal::Interrupt)
        );
        assert_eq!(
            Signal::from_number(libc::SIGTERM as u32).map(Signal::name),
            Some("SIGTERM")
        );
        assert_eq!(Signal::from_number(0), None);
        assert_eq!(StopRequest::default().agreed(false), None);
        for signal in [None, Some(Signal::Interrupt), Some(Signal::Terminate)] {
            assert_eq!(Signal::from_code(Signal::code(signal)), signal);
        }
        assert!(Signal::code(Some(Signal::Terminate)) > Signal::code(Some(Signal::Interrupt)));
    }
}
