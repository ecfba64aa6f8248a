//! The backstop behind `run.process_group_timeout`. c10d bounds each collective by that timeout,
//! but not everything under it is bounded: a peer that is stopped rather than dead keeps its
//! sockets open, and a rendezvous store whose host stops answering leaves a rank blocked in a
//! store read for good. As DDP's NCCL watchdog does, a thread watches the wait this rank is in
//! and, once it has run past the timeout and a grace period, says so in one line and ends the
//! process: a hang becomes an error, whatever libtorch is blocked in.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Past the timeout, how long a wait may still take to fail by itself (c10d's error, the roll
/// call naming the lost rank) before the watchdog ends the process.
const GRACE: Duration = Duration::from_secs(10);

/// How often the watchdog looks.
const TICK: Duration = Duration::from_millis(200);

/// The exit code when the watchdog ends the process: the run failed (as for any lost rank).
const EXIT_CODE: i32 = 1;

/// Watches this rank's waits on the others; stops watching when dropped.
pub struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    /// Milliseconds since `epoch` when the current wait began, plus one; 0 when none is.
    since: AtomicU64,
    /// What the current wait is, for the message.
    what: Mutex<&'static str>,
    epoch: Instant,
    limit: Duration,
    who: String,
    closed: AtomicBool,
}

/// A wait being watched: ends the watch when dropped.
pub struct Armed<'a> {
    shared: Option<&'a Shared>,
}

impl Watchdog {
    /// Starts watching for rank `rank` of `world`, whose waits may each last `timeout`.
    pub fn start(rank: usize, world: usize, timeout: Duration) -> Self {
        let shared = Arc::new(Shared {
            since: AtomicU64::new(0),
            what: Mutex::new(""),
            epoch: Instant::now(),
            limit: timeout + GRACE,
            who: format!("rank {rank} of {world}"),
            closed: AtomicBool::new(false),
        });
        let watched = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("fe-dist-watchdog".into())
            .spawn(move || watch(&watched))
            .ok();
        Self { shared, thread }
    }

    /// Watches the wait `what` until the returned guard drops. A wait inside another (the roll
    /// call after a failed collective) belongs to the outer one.
    pub fn arm(&self, what: &'static str) -> Armed<'_> {
        let now = self.shared.epoch.elapsed().as_millis() as u64 + 1;
        if self
            .shared
            .since
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Armed { shared: None };
        }
        if let Ok(mut slot) = self.shared.what.lock() {
            *slot = what;
        }
        Armed {
            shared: Some(&self.shared),
        }
    }
}

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared {
            shared.since.store(0, Ordering::Release);
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn watch(shared: &Shared) {
    while !shared.closed.load(Ordering::Acquire) {
        std::thread::sleep(TICK);
        let since = shared.since.load(Ordering::Acquire);
        if since == 0 {
            continue;
        }
        let began = Duration::from_millis(since - 1);
        let waited = shared.epoch.elapsed().saturating_sub(began);
        if waited > shared.limit {
            let what = shared.what.lock().map_or("a collective", |w| *w);
            give_up(shared, what, waited);
        }
    }
}

/// Says why in one line and ends the process at once: the thread that would unwind is the one
/// that is stuck, and exit handlers could block on the same locks.
fn give_up(shared: &Shared, what: &str, waited: Duration) -> ! {
    let timeout = shared.limit.saturating_sub(GRACE);
    let line = format!(
        "error: {}: {what} has waited {:.0} s, past run.process_group_timeout ({:.0} s): another rank, or the rendezvous store's host (rank 0, or torchrun's agent), stopped answering without closing its connections (stopped, or its machine unreachable); giving up\n",
        shared.who,
        waited.as_secs_f64(),
        timeout.as_secs_f64()
    );
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(line.as_bytes());
    let _ = stderr.flush();
    // SAFETY: _exit ends the process without running anything else; nothing is left to flush.
    unsafe { libc::_exit(EXIT_CODE) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_inside_a_watched_wait_belongs_to_it() {
        let watchdog = Watchdog::start(0, 2, Duration::from_secs(60));
        let outer = watchdog.arm("all-reduce");
        assert!(outer.shared.is_some());
        {
            let inner = watchdog.arm("roll call");
            assert!(inner.shared.is_none());
        }
        assert_ne!(watchdog.shared.since.load(Ordering::Acquire), 0);
        assert_eq!(*watchdog.shared.what.lock().unwrap(), "all-reduce");
        drop(outer);
        assert_eq!(watchdog.shared.since.load(Ordering::Acquire), 0);
    }
}
