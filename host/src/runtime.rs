//! Process-wide settings applied once at start-up: libtorch threads and the allocator.

/// Sets libtorch's intra-op thread count (`None`: one per core) and returns what is in force.
pub fn set_threads(threads: Option<u32>) -> i32 {
    if let Some(threads) = threads {
        tch::set_num_threads(threads as i32);
    }
    tch::get_num_threads()
}

/// Keeps libtorch ops run on the calling thread (a pipeline worker's) on that thread.
///
/// libtorch parallelises with OpenMP, and each thread that opens a parallel region gets its
/// own team of OpenMP threads, which stays alive, docked. Once the process holds more OpenMP
/// threads than cores, libgomp stops spinning between parallel regions and parks its threads
/// on a futex, so every region of the training step pays a wake-up: scripted resnet18 at
/// batch 32 lost a quarter of its speed to that. PyTorch's DataLoader workers avoid it by
/// being processes that call `torch.set_num_threads(1)`. `omp_set_num_threads` sets this
/// thread's own value only (an OpenMP ICV), whereas `tch::set_num_threads` would also
/// change libtorch's process-wide default. Without OpenMP in the process, nothing to do.
pub fn keep_ops_on_this_thread() {
    // libtorch sets a thread's OpenMP count once, lazily, at its first parallel call: have
    // that happen now so it cannot undo the setting below.
    tch::get_num_threads();
    #[cfg(target_os = "linux")]
    {
        type SetNumThreads = unsafe extern "C" fn(libc::c_int);
        // SAFETY: a lookup of a symbol by name in the already-loaded objects.
        let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"omp_set_num_threads".as_ptr()) };
        if !symbol.is_null() {
            // SAFETY: omp_set_num_threads has this C signature in every OpenMP runtime.
            let set: SetNumThreads = unsafe { std::mem::transmute(symbol) };
            // SAFETY: sets an ICV of the calling thread; any positive count is valid.
            unsafe { set(1) };
        }
    }
}

/// `run.deterministic` and `run.cudnn_benchmark`: deterministic algorithms everywhere (an op
/// without a deterministic implementation then fails naming itself, and through fe-host's
/// error path the plugin, op and step), or cuDNN autotuning. Asking for both is refused: the
/// autotuner picks kernels by timing.
pub fn set_determinism(deterministic: bool, cudnn_benchmark: bool) -> crate::Result<()> {
    if deterministic && cudnn_benchmark {
        return Err(crate::Error::Usage(
            "run.deterministic and run.cudnn_benchmark exclude each other: cuDNN's autotuner picks kernels by timing"
                .into(),
        ));
    }
    let applied = crate::shim::set_deterministic(deterministic)
        .and_then(|()| crate::shim::set_cudnn_benchmark(cudnn_benchmark));
    applied.map_err(|e| crate::Error::Internal(format!("cannot configure libtorch: {e}")))
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

/// The most memory this process has held resident so far (Linux's `VmHWM`): libtorch, plugins
/// and every pipeline worker included, since workers are threads. `None` off Linux.
pub fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}
