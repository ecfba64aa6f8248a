//! Process-wide settings applied once at start-up: libtorch threads and the allocator.

/// Sets libtorch's intra-op thread count (`None`: one per core) and returns what is in force.
pub fn set_threads(threads: Option<u32>) -> i32 {
    if let Some(threads) = threads {
        tch::set_num_threads(threads as i32);
    }
    tch::get_num_threads()
}

/// libtorch allocates CPU tensors with glibc malloc. Above the default mmap threshold (128 KiB,
/// raised dynamically up to 32 MiB) every large tensor is a fresh mmap and every free an
/// munmap, so a training step page-faults its activations in again each time. Fixing the
/// thresholds keeps freed memory in the heap for reuse. `FE_MALLOC_TUNING=0` turns this off.
pub fn tune_malloc() -> bool {
    if std::env::var("FE_MALLOC_TUNING").is_ok_and(|v| v == "0") {
        return false;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const MIB: libc::c_int = 1 << 20;
        // SAFETY: mallopt only changes allocator parameters; called before worker threads start.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * MIB);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 512 * MIB);
        }
        true
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
