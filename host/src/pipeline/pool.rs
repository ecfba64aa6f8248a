//! Worker threads that run numbered jobs and hand results back in job order.
//!
//! Job `k` runs entirely on worker `k % W` and comes back through that worker's own bounded
//! queue; the consumer reads the queues in turn. Results therefore arrive in order, and are
//! identical for any number of workers as long as a job's result depends only on `k`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver};

use crate::error::{Error, Result};

/// A job: `Ok(None)` means `k` is past the end of the work (for streams whose length is only
/// found while running); the worker then stops.
pub type Job<T> = Arc<dyn Fn(usize) -> Result<Option<T>> + Send + Sync>;

/// Workers running jobs `first..last` (or `first..` until a job reports the end).
pub struct OrderedPool<T> {
    receivers: Vec<Receiver<Result<T>>>,
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    first: usize,
    next: usize,
    last: Option<usize>,
    finished: bool,
}

impl<T: Send + 'static> OrderedPool<T> {
    /// Starts up to `workers` threads, each keeping up to `prefetch` results ready.
    pub fn start(
        name: &str,
        first: usize,
        last: Option<usize>,
        workers: usize,
        prefetch: usize,
        job: Job<T>,
    ) -> Result<Self> {
        let jobs = last.map_or(usize::MAX, |last| last.saturating_sub(first));
        let workers = workers.clamp(1, jobs.max(1));
        let stop = Arc::new(AtomicBool::new(false));
        let mut pool = Self {
            receivers: Vec::with_capacity(workers),
            threads: Vec::with_capacity(workers),
            stop: Arc::clone(&stop),
            first,
            next: first,
            last,
            finished: jobs == 0,
        };
        for worker in 0..workers {
            let (sender, receiver) = bounded(prefetch.max(1));
            let (job, halt) = (Arc::clone(&job), Arc::clone(&stop));
            let end = last.unwrap_or(usize::MAX);
            let thread = std::thread::Builder::new()
                .name(format!("{name}-{worker}"))
                .spawn(move || {
                    let _no_grad = tch::no_grad_guard();
                    crate::runtime::keep_ops_on_this_thread();
                    for k in (first + worker..end).step_by(workers) {
                        if halt.load(Ordering::Relaxed) {
                            break;
                        }
                        let outcome =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(k)))
                                .unwrap_or_else(|payload| {
                                    Err(Error::Internal(format!(
                                        "pipeline worker panicked: {}",
                                        fe_plugin_api::panic_message(payload.as_ref())
                                    )))
                                });
                        let outcome = match outcome {
                            Ok(Some(value)) => Ok(value),
                            Ok(None) => break,
                            Err(e) => Err(e),
                        };
                        let failed = outcome.is_err();
                        if sender.send(outcome).is_err() || failed {
                            break;
                        }
                    }
                });
            match thread {
                Ok(thread) => pool.threads.push(thread),
                Err(e) => {
                    return Err(Error::Run(format!(
                        "cannot start pipeline worker {worker}: {e}"
                    )));
                }
            }
            pool.receivers.push(receiver);
        }
        Ok(pool)
    }

    /// The next job's result in order; `None` after the last job.
    pub fn next_result(&mut self) -> Option<Result<T>> {
        if self.finished || self.last.is_some_and(|last| self.next >= last) {
            return None;
        }
        let receiver = &self.receivers[(self.next - self.first) % self.receivers.len()];
        self.next += 1;
        match receiver.recv() {
            Ok(Ok(value)) => Some(Ok(value)),
            Ok(Err(e)) => {
                self.finished = true;
                Some(Err(e))
            }
            // A worker stops without a result only when its job reported the end, or (with
            // a known end) when something killed it.
            Err(_) if self.last.is_none() => {
                self.finished = true;
                None
            }
            Err(_) => {
                self.finished = true;
                Some(Err(Error::Internal(
                    "a pipeline worker stopped without reporting why".into(),
                )))
            }
        }
    }
}

impl<T> Drop for OrderedPool<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Dropping the receivers unblocks workers waiting to send.
        self.receivers.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_run_libtorch_ops_single_threaded_and_leave_the_trainer_its_threads() {
        tch::set_num_threads(2);
        let job: Job<i32> = Arc::new(|_| Ok(Some(tch::get_num_threads())));
        let mut pool = OrderedPool::start("fe-test", 0, Some(4), 2, 1, job).unwrap();
        let seen: Vec<i32> = std::iter::from_fn(|| pool.next_result())
            .collect::<Result<_>>()
            .unwrap();
        // A worker's own OpenMP team would count against the cores and make libgomp park the
        // trainer's threads between parallel regions.
        assert_eq!(seen, [1, 1, 1, 1]);
        assert_eq!(
            tch::get_num_threads(),
            2,
            "the caller keeps its thread count"
        );
    }
}
