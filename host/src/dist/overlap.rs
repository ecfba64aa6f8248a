//! Gradients averaged over the ranks while backward still runs (csrc/overlap.cpp), as DDP's
//! Reducer does: hooks on a model's parameters fill flat buckets as autograd computes the
//! gradients, and each full bucket is all-reduced on Gloo's threads while backward carries on.
//! The buckets are cut again after the first averaged backward, in the order its gradients
//! arrived on rank 0 (DDP's bucket rebuild).

use std::ffi::{c_char, c_int, c_void};
use std::time::{Duration, Instant};

use tch::{Kind, Tensor};
use torch_sys::C_tensor;

use super::{pointers, ProcessGroup};

extern "C" {
    fn fe_dist_overlap_new(
        group: *mut c_void,
        params: *const *mut C_tensor,
        count: c_int,
        first_cap_bytes: i64,
        cap_bytes: i64,
        extra: c_int,
        out: *mut *mut c_void,
        buckets: *mut c_int,
    ) -> *mut c_char;
    fn fe_dist_overlap_arm(overlap: *mut c_void) -> *mut c_char;
    fn fe_dist_overlap_finish(
        overlap: *mut c_void,
        extra_in: *const f32,
        extra_out: *mut f32,
        grads_out: *mut *mut C_tensor,
    ) -> *mut c_char;
    fn fe_dist_overlap_layout(
        overlap: *mut c_void,
        params_out: *mut c_int,
        ends_out: *mut c_int,
        buckets: *mut c_int,
    ) -> *mut c_char;
    fn fe_dist_overlap_disarm(overlap: *mut c_void);
    fn fe_dist_overlap_free(overlap: *mut c_void);
}

/// The first bucket's size: small, so that the first all-reduce starts early in backward
/// (DDP's `first_bucket_bytes_cap` is 1 MiB).
pub const FIRST_BUCKET_BYTES: i64 = 1024 * 1024;

/// The other buckets' size (DDP's `bucket_cap_mb` default, 25 MiB).
pub const BUCKET_BYTES: i64 = 25 * 1024 * 1024;

/// How many numbers besides the gradients the last bucket carries (see `SharedGroup`).
pub const EXTRA: usize = 3;

/// A model's parameters, hooked for overlapped all-reduce. Dropping it removes the hooks.
pub struct Overlap {
    handle: *mut c_void,
    params: usize,
    /// The parameters' dtype and shapes, for check mode's fingerprints.
    kind: Option<Kind>,
    sizes: Vec<Vec<i64>>,
}

// SAFETY: the C++ state is only touched from the thread that holds the group's lock (arm,
// backward, finish) or owns the value (drop); its hooks run on the thread running backward
// (for CUDA parameters autograd's device thread, while the locking thread waits for backward).
unsafe impl Send for Overlap {}

impl Overlap {
    /// Hooks `params` (a model's trainable parameters) for averaging over `group`'s ranks in
    /// buckets of at most `first_cap` bytes (the first) and `cap` bytes (the rest).
    pub(super) fn new(
        group: &ProcessGroup,
        params: &[Tensor],
        first_cap: i64,
        cap: i64,
    ) -> Result<Self, String> {
        let pointers = pointers(params);
        let (mut handle, mut buckets): (_, c_int) = (std::ptr::null_mut(), 0);
        // SAFETY: the parameters are live for the call (the shim keeps its own references);
        // the shim writes `handle` and `buckets` only on success.
        crate::shim::check(unsafe {
            fe_dist_overlap_new(
                group.handle,
                pointers.as_ptr(),
                pointers.len() as c_int,
                first_cap,
                cap,
                EXTRA as c_int,
                &mut handle,
                &mut buckets,
            )
        })?;
        Ok(Self {
            handle,
            params: params.len(),
            kind: params.first().map(Tensor::kind),
            sizes: params.iter().map(Tensor::size).collect(),
        })
    }

    /// The hooked parameters' dtype and shapes.
    pub(super) fn sizes(&self) -> (Option<Kind>, &[Vec<i64>]) {
        (self.kind, &self.sizes)
    }

    /// How many buckets the parameters make.
    pub fn buckets(&self) -> Result<usize, String> {
        self.layout().map(|layout| layout.len())
    }

    /// The buckets as they stand, each as the indices of its parameters in the order they
    /// are filled: the parameters in reverse until the first averaged backward, then in the
    /// order rank 0's gradients arrived in it (those it did not reach last).
    pub fn layout(&self) -> Result<Vec<Vec<usize>>, String> {
        let mut indices: Vec<c_int> = vec![0; self.params];
        let mut ends: Vec<c_int> = vec![0; self.params];
        let mut count: c_int = 0;
        // SAFETY: `handle` is live until drop; both buffers hold one slot per parameter, the
        // most the shim writes (every bucket holds at least one parameter).
        crate::shim::check(unsafe {
            fe_dist_overlap_layout(
                self.handle,
                indices.as_mut_ptr(),
                ends.as_mut_ptr(),
                &mut count,
            )
        })?;
        let mut start = 0;
        let mut layout = Vec::new();
        for &end in ends.iter().take(usize::try_from(count).unwrap_or(0)) {
            let end = usize::try_from(end).unwrap_or(0).min(indices.len());
            let bucket = indices.get(start..end).unwrap_or_default();
            layout.push(bucket.iter().map(|&i| i as usize).collect());
            start = end;
        }
        Ok(layout)
    }

    /// Runs `backward` with the hooks armed, then sends what is left, waits for every bucket
    /// and returns the averaged gradients (one per parameter, zeros for those `backward` did
    /// not reach) with the sums over the ranks of `extra`, and how long it waited for them
    /// once `backward` was done.
    pub(super) fn around<T>(
        &mut self,
        group: &mut ProcessGroup,
        backward: impl FnOnce() -> Result<T, String>,
        extra: [f32; EXTRA],
    ) -> Result<(Vec<Tensor>, [f32; EXTRA], Duration), String> {
        // SAFETY: `handle` is live until drop.
        crate::shim::check(unsafe { fe_dist_overlap_arm(self.handle) })?;
        if let Err(error) = backward() {
            // SAFETY: as above.
            unsafe { fe_dist_overlap_disarm(self.handle) };
            return Err(error);
        }
        let mut sums = [0f32; EXTRA];
        let mut grads: Vec<*mut C_tensor> = vec![std::ptr::null_mut(); self.params];
        let _watched = group.watchdog.arm("the gradient all-reduce");
        let started = Instant::now();
        // SAFETY: `extra` and `sums` hold EXTRA floats and `grads` one slot per parameter, as
        // the shim was told at creation; it fills `grads` only on success.
        crate::shim::check(unsafe {
            fe_dist_overlap_finish(
                self.handle,
                extra.as_ptr(),
                sums.as_mut_ptr(),
                grads.as_mut_ptr(),
            )
        })
        .map_err(group.context("all-reduce"))?;
        let waited = started.elapsed();
        let grads = grads
            .into_iter()
            // SAFETY: each pointer is a `new at::Tensor` from the shim, owned from here on.
            .map(|pointer| unsafe { Tensor::from_ptr(pointer) })
            .collect();
        Ok((grads, sums, waited))
    }
}

impl Drop for Overlap {
    fn drop(&mut self) {
        // SAFETY: `handle` came from fe_dist_overlap_new and is freed exactly once.
        unsafe { fe_dist_overlap_free(self.handle) };
    }
}
