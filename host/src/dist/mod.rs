//! Data parallelism on PyTorch's c10d: a rank joins a Gloo process group through torchrun's
//! rendezvous variables ([`env`]) and runs the collectives training needs. The engine is
//! libtorch's own (csrc/dist.cpp); this module only makes it safe: every C++ exception (a lost
//! peer, a timeout) comes back as an error naming this rank and the collective.

pub mod check;
pub mod cluster;
pub mod env;
pub mod overlap;
pub mod role;
pub mod startup;
mod states;
pub mod strategy;
pub mod sync;
pub mod waits;
mod watchdog;

use std::ffi::{c_char, c_int, c_void, CString};
use std::time::{Duration, Instant};

use tch::Tensor;
use torch_sys::C_tensor;

/// Whether `message` is a failed collective's (`rank 1 of 2: all-gather failed: rank 0 ...
/// lost`, `rank 0 of 2: stopped because rank 1 failed (...)`, a check mode mismatch): the run
/// ends because of the ranks together, whatever the caller was doing, so callers pass it on
/// as it is instead of blaming their own work ("cannot save the state of Accuracy") for it.
pub fn is_collective_failure(message: &str) -> bool {
    let Some((member, rest)) = message.split_once(": ") else {
        return false;
    };
    let of_group = member
        .strip_prefix("rank ")
        .and_then(|numbers| numbers.split_once(" of "))
        .is_some_and(|(rank, world)| {
            rank.parse::<usize>().is_ok() && world.parse::<usize>().is_ok()
        });
    of_group
        && (rest.starts_with("stopped because rank ")
            || rest.starts_with("collective mismatch")
            || rest
                .split_once(": ")
                .is_some_and(|(what, _)| what.ends_with(" failed")))
}

pub use env::{membership, Cluster, GlooDevice, Membership};
pub use overlap::Overlap;
pub use strategy::Strategy;
pub use sync::SharedGroup;

extern "C" {
    fn fe_dist_join(
        host: *const c_char,
        port: c_int,
        rank: c_int,
        world: c_int,
        is_server: bool,
        prefix: *const c_char,
        timeout_ms: i64,
        device_mode: c_int,
        device_name: *const c_char,
        cuda_device: c_int,
        out: *mut *mut c_void,
    ) -> *mut c_char;
    fn fe_dist_nccl_built() -> bool;
    fn fe_dist_free(group: *mut c_void);
    fn fe_dist_all_reduce(
        group: *mut c_void,
        tensors: *const *mut C_tensor,
        count: c_int,
        op: c_int,
    ) -> *mut c_char;
    fn fe_dist_broadcast(
        group: *mut c_void,
        tensors: *const *mut C_tensor,
        count: c_int,
        root: c_int,
    ) -> *mut c_char;
    fn fe_dist_all_gather(
        group: *mut c_void,
        input: *mut C_tensor,
        out: *mut *mut C_tensor,
    ) -> *mut c_char;
    fn fe_dist_barrier(group: *mut c_void, monitored: bool) -> *mut c_char;
    fn fe_dist_census(group: *mut c_void, wait_ms: i64, missing: *mut *mut c_char) -> *mut c_char;
    fn fe_dist_post_failure(group: *mut c_void, message: *const c_char) -> *mut c_char;
    fn fe_dist_have_verdict(group: *mut c_void) -> *mut c_char;
    fn fe_dist_linger(group: *mut c_void, wait_ms: i64) -> *mut c_char;
    fn fe_dist_posted_failure(
        group: *mut c_void,
        rank: c_int,
        message: *mut *mut c_char,
    ) -> *mut c_char;
}

/// How long a rank whose collective failed waits for the others to answer the roll call that
/// tells which rank is lost (live ranks see the same failure within moments of each other), at
/// most: it comes out of the configured timeout (see [`census_wait`]).
const CENSUS_WAIT: Duration = Duration::from_secs(5);

/// How long the store's host, failed by itself, keeps the store up at most for the ranks it
/// leaves to read why (each says when it has: see csrc/dist.cpp's `fe_dist_linger`). A peer
/// in a collective reads it within moments; one mid-step, at its next collective.
const LINGER: Duration = Duration::from_secs(30);

/// The roll call's share of `timeout`: a quarter of it, at most [`CENSUS_WAIT`]. A collective
/// waits for the rest, so a lost rank is named within the configured timeout, not after it.
fn census_wait(timeout: Duration) -> Duration {
    (timeout / 4).min(CENSUS_WAIT)
}

/// c10d's words for a failed join, said in terms of ranks where they can be: a store wait that
/// timed out names the rank whose key never came (gloo's rendezvous keys end in the awaited
/// rank), and a store that hung up is the store's host giving up or being lost.
fn explain_join_failure(message: &str) -> String {
    if let Some((_, keys)) = message
        .split_once("keys: ")
        .filter(|_| message.contains("timeout"))
    {
        let ranks: Vec<usize> = keys
            .split([',', ' '])
            .filter_map(|key| key.trim().rsplit('/').next()?.parse().ok())
            .collect();
        if let [first, ..] = ranks.as_slice() {
            return format!(
                "rank {first} did not join in time (the first rank still awaited; c10d: {message})"
            );
        }
    }
    if message.contains("Connection was likely closed") {
        return format!(
            "the rendezvous store hung up: its host (rank 0, or torchrun's agent) gave up waiting for another rank or was lost (c10d: {message})"
        );
    }
    message.to_owned()
}

/// Waits until something accepts connections at `host:port` (the rendezvous store), for at
/// most `within`. c10d's own client retries a store that is not there for twice its timeout,
/// logging each attempt; this says it once, within the timeout, in words.
fn wait_for_store(host: &str, port: u16, within: Duration) -> Result<(), String> {
    use std::net::{TcpStream, ToSocketAddrs};
    let deadline = Instant::now() + within;
    let mut problem = String::from("nothing accepted a connection there");
    loop {
        match (host, port).to_socket_addrs() {
            Ok(addresses) => {
                for address in addresses {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let attempt = left.clamp(Duration::from_millis(1), Duration::from_secs(1));
                    if TcpStream::connect_timeout(&address, attempt).is_ok() {
                        return Ok(());
                    }
                }
            }
            Err(error) => problem = format!("`{host}` does not resolve ({error})"),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "{problem} within {} s (the rendezvous store is rank 0's, or torchrun's agent's: \
                 is it running, and are MASTER_ADDR and MASTER_PORT right?)",
                within.as_secs_f64()
            ));
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
}

/// How an all-reduce combines the ranks' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// Elementwise sum.
    Sum,
    /// Elementwise maximum.
    Max,
}

/// This process's membership in a Gloo process group; leaving it (drop) closes its connections.
pub struct ProcessGroup {
    handle: *mut c_void,
    rank: usize,
    world: usize,
    /// The launcher that started the ranks.
    cluster: Cluster,
    /// How long a roll call after a failed collective waits (see [`census_wait`]).
    census_wait: Duration,
    /// `run.process_group_timeout`: what a collective that timed out waited, roll call included.
    timeout: Duration,
    /// Ends the process should a wait outlast the timeout anyway.
    watchdog: watchdog::Watchdog,
    /// This process hosts the rendezvous store (rank 0 under `run --nproc`).
    hosts_store: bool,
    /// This rank posted a failure of its own (see [`ProcessGroup::post_failure`]).
    failed_by_itself: bool,
}

// SAFETY: the c10d group is used from one thread at a time (&mut self on every collective);
// libtorch's ProcessGroupGloo itself is safe to move between threads.
unsafe impl Send for ProcessGroup {}

impl ProcessGroup {
    /// Joins the group `membership` describes, waiting at most `timeout` for the others (the
    /// same timeout then bounds every collective). With `cuda`, this rank trains on that GPU
    /// and its CUDA tensors' collectives go through an NCCL group (see [`nccl_built`]).
    pub fn join(
        membership: &Membership,
        timeout: Duration,
        cuda: Option<usize>,
    ) -> Result<Self, String> {
        let context = |message: String| {
            format!(
                "rank {} of {}: cannot join the process group at {}:{}: {message}",
                membership.rank, membership.world, membership.master_addr, membership.master_port
            )
        };
        let nul = |_| context("a rendezvous setting contains a NUL byte".to_owned());
        let host = CString::new(membership.master_addr.as_str()).map_err(nul)?;
        let prefix = CString::new(membership.store_prefix.as_str()).map_err(nul)?;
        let (mode, name) = match &membership.gloo_device {
            GlooDevice::Address(address) => (0, address.as_str()),
            GlooDevice::Interface(interface) => (1, interface.as_str()),
            GlooDevice::Default => (2, ""),
        };
        let name = CString::new(name).map_err(nul)?;
        if !membership.hosts_store {
            wait_for_store(&membership.master_addr, membership.master_port, timeout)
                .map_err(context)?;
        }
        let census_wait = census_wait(timeout);
        let timeout_ms = i64::try_from((timeout - census_wait).as_millis()).unwrap_or(i64::MAX);
        let watchdog = watchdog::Watchdog::start(membership.rank, membership.world, timeout);
        let joining = watchdog.arm(
            "joining the process group (is what listens at MASTER_ADDR:MASTER_PORT a rendezvous store?)",
        );
        let mut handle = std::ptr::null_mut();
        // SAFETY: the strings outlive the call; the shim writes `handle` only on success and
        // catches every exception.
        let result = crate::shim::check(unsafe {
            fe_dist_join(
                host.as_ptr(),
                c_int::from(membership.master_port),
                membership.rank as c_int,
                membership.world as c_int,
                membership.hosts_store,
                prefix.as_ptr(),
                timeout_ms,
                mode,
                name.as_ptr(),
                cuda.map_or(-1, |index| index as c_int),
                &mut handle,
            )
        });
        result.map_err(|message| context(explain_join_failure(&message)))?;
        drop(joining);
        Ok(Self {
            handle,
            rank: membership.rank,
            world: membership.world,
            cluster: membership.cluster,
            census_wait,
            timeout,
            watchdog,
            hosts_store: membership.hosts_store,
            failed_by_itself: false,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many ranks are in the group.
    pub fn world(&self) -> usize {
        self.world
    }

    /// The launcher that started the ranks.
    pub fn cluster(&self) -> Cluster {
        self.cluster
    }

    fn context(&self, what: &str) -> impl Fn(String) -> String + '_ {
        let what = what.to_owned();
        move |message| {
            let census = self.census();
            // A rank that failed by itself said why before it left: that is the cause.
            let posted = census
                .as_ref()
                .ok()
                .and_then(|lost| self.posted_failure(lost));
            if let Some((rank, error)) = posted {
                return format!(
                    "rank {} of {}: stopped because rank {rank} failed ({error})",
                    self.rank, self.world
                );
            }
            let lost = match census {
                Ok(lost) if lost.is_empty() => String::new(),
                // A peer that stopped answering (hung, stopped) shows as a collective that timed
                // out: the wait was the whole process_group_timeout, which is what to say.
                Ok(lost) if ["timed out", "timeout"]
                    .iter()
                    .any(|word| message.to_lowercase().contains(word)) =>
                {
                    format!(
                        "{} lost (no answer within run.process_group_timeout, {:.0} s); ",
                        describe_ranks(&lost),
                        self.timeout.as_secs_f64()
                    )
                }
                Ok(lost) => format!(
                    "{} lost (no answer within {:.1} s of the failure); ",
                    describe_ranks(&lost),
                    self.census_wait.as_secs_f64()
                ),
                Err(_) if self.rank != 0 => {
                    "rank 0, which hosts the rendezvous store, is likely lost (the store does not answer); "
                        .to_owned()
                }
                Err(_) => String::new(),
            };
            format!(
                "rank {} of {}: {what} failed: {lost}{message}",
                self.rank, self.world
            )
        }
    }

    /// The ranks that do not answer a roll call on the store (see csrc/dist.cpp).
    fn census(&self) -> Result<Vec<usize>, String> {
        let mut missing: *mut c_char = std::ptr::null_mut();
        let wait_ms = self.census_wait.as_millis() as i64;
        // SAFETY: the shim writes a malloc'd string to `missing` only on success.
        crate::shim::check(unsafe { fe_dist_census(self.handle, wait_ms, &mut missing) })?;
        if missing.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: NUL-terminated, malloc'd by the shim, freed exactly once here.
        let list = unsafe { std::ffi::CStr::from_ptr(missing) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: as above.
        unsafe { libc::free(missing.cast()) };
        Ok(list.split(',').filter_map(|r| r.parse().ok()).collect())
    }

    /// Leaves `message`, this rank's own failure, where the other ranks look when their
    /// collectives fail (see [`ProcessGroup::posted_failure`]). Best effort: a store that is
    /// gone has no reader left either. The store's host keeps it up for them when it leaves
    /// (see `Drop`).
    pub fn post_failure(&mut self, message: &str) {
        self.failed_by_itself = true;
        let Ok(message) = CString::new(message.replace('\0', " ")) else {
            return;
        };
        // SAFETY: `message` outlives the call; the shim catches every exception.
        let _ = crate::shim::check(unsafe { fe_dist_post_failure(self.handle, message.as_ptr()) });
    }

    /// Tells the store's host that this rank knows how the run ended for it (here: it ended
    /// well), so that a host lingering after its own failure need not wait for it. Best effort.
    pub fn have_verdict(&self) {
        // SAFETY: only the handle crosses; the shim catches every exception.
        let _ = crate::shim::check(unsafe { fe_dist_have_verdict(self.handle) });
    }

    /// The first rank that left its own failure on the store, `lost` ranks first, with it.
    fn posted_failure(&self, lost: &[usize]) -> Option<(usize, String)> {
        let others = (0..self.world).filter(|r| *r != self.rank && !lost.contains(r));
        lost.iter().copied().chain(others).find_map(|rank| {
            let mut message: *mut c_char = std::ptr::null_mut();
            // SAFETY: the shim writes a malloc'd string to `message` only when one was posted.
            crate::shim::check(unsafe {
                fe_dist_posted_failure(self.handle, rank as c_int, &mut message)
            })
            .ok()?;
            if message.is_null() {
                return None;
            }
            // SAFETY: NUL-terminated, malloc'd by the shim, freed exactly once here.
            let text = unsafe { std::ffi::CStr::from_ptr(message) }
                .to_string_lossy()
                .into_owned();
            // SAFETY: as above.
            unsafe { libc::free(message.cast()) };
            Some((rank, text))
        })
    }

    /// Combines `tensors` across ranks in place (in flat buckets of one dtype).
    pub fn all_reduce(&mut self, tensors: &[Tensor], op: ReduceOp) -> Result<(), String> {
        if tensors.is_empty() {
            return Ok(());
        }
        let pointers = pointers(tensors);
        let op = match op {
            ReduceOp::Sum => 0,
            ReduceOp::Max => 1,
        };
        let _watched = self.watchdog.arm("an all-reduce");
        // SAFETY: `pointers` are live tensors for the call; the shim catches every exception.
        crate::shim::check(unsafe {
            fe_dist_all_reduce(self.handle, pointers.as_ptr(), pointers.len() as c_int, op)
        })
        .map_err(self.context("all-reduce"))
    }

    /// Overwrites `tensors` on every rank with rank `root`'s values.
    pub fn broadcast(&mut self, tensors: &[Tensor], root: usize) -> Result<(), String> {
        if tensors.is_empty() {
            return Ok(());
        }
        let pointers = pointers(tensors);
        let _watched = self.watchdog.arm("a broadcast");
        // SAFETY: as in all_reduce.
        crate::shim::check(unsafe {
            fe_dist_broadcast(
                self.handle,
                pointers.as_ptr(),
                pointers.len() as c_int,
                root as c_int,
            )
        })
        .map_err(self.context("broadcast"))
    }

    /// Every rank's `tensor` (same shape and dtype everywhere) stacked in rank order along a new
    /// first dimension.
    pub fn all_gather(&mut self, tensor: &Tensor) -> Result<Tensor, String> {
        let mut out: *mut C_tensor = std::ptr::null_mut();
        let _watched = self.watchdog.arm("an all-gather");
        // SAFETY: `tensor` is live for the call; on success the shim writes a new tensor that
        // we own from here on.
        crate::shim::check(unsafe {
            fe_dist_all_gather(self.handle, tensor.as_ptr().cast_mut(), &mut out)
        })
        .map_err(self.context("all-gather"))?;
        // SAFETY: `out` was allocated by the shim with `new at::Tensor`, as tch expects.
        Ok(unsafe { Tensor::from_ptr(out) })
    }

    /// Waits for every rank. `monitored`: rank 0 names the ranks that did not arrive in time.
    pub fn barrier(&mut self, monitored: bool) -> Result<(), String> {
        let _watched = self.watchdog.arm("a barrier");
        // SAFETY: no pointers cross but the handle; the shim catches every exception.
        crate::shim::check(unsafe { fe_dist_barrier(self.handle, monitored) })
            .map_err(self.context("barrier"))
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.failed_by_itself && self.hosts_store {
            // Dropped after the estimator (whose gradient hooks hold the backends), so the
            // shim's leaving closes this rank's connections and the peers' waits fail now.
            let wait = self.timeout.min(LINGER);
            // SAFETY: only the handle crosses; the shim catches every exception.
            let _ =
                crate::shim::check(unsafe { fe_dist_linger(self.handle, wait.as_millis() as i64) });
        }
        // Leaving waits for c10d's threads, which may be in a collective with a lost rank.
        let _watched = self.watchdog.arm("leaving the process group");
        // SAFETY: `handle` came from fe_dist_join and is freed exactly once.
        unsafe { fe_dist_free(self.handle) };
    }
}

fn pointers(tensors: &[Tensor]) -> Vec<*mut C_tensor> {
    tensors.iter().map(|t| t.as_ptr().cast_mut()).collect()
}

/// "rank 1 is" / "ranks 1, 3 are", for messages.
fn describe_ranks(ranks: &[usize]) -> String {
    let list: Vec<String> = ranks.iter().map(usize::to_string).collect();
    match ranks {
        [one] => format!("rank {one} is"),
        _ => format!("ranks {} are", list.join(", ")),
    }
}

/// Whether this fe-host was built with NCCL (CUDA's and NCCL's headers were there at build
/// time; scripts/env.sh installs them): data-parallel ranks can then train on GPUs.
pub fn nccl_built() -> bool {
    // SAFETY: no arguments; returns a constant.
    unsafe { fe_dist_nccl_built() }
}

/// A TCP port on loopback that was free a moment ago (the OS picks it), for a local rendezvous.
pub fn free_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}

#[cfg(test)]
mod logs;
#[cfg(test)]
mod tests;
