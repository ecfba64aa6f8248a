//! Safe wrappers over csrc/shim.cpp: libtorch features tch does not expose.

use std::ffi::{c_char, c_int, CStr};

use tch::Tensor;
use torch_sys::C_tensor;

extern "C" {
    fn fe_fused_adam(
        params: *const *mut C_tensor,
        grads: *const *mut C_tensor,
        exp_avgs: *const *mut C_tensor,
        exp_avg_sqs: *const *mut C_tensor,
        max_exp_avg_sqs: *const *mut C_tensor,
        steps: *const *mut C_tensor,
        count: c_int,
        lr: f64,
        beta1: f64,
        beta2: f64,
        weight_decay: f64,
        eps: f64,
        amsgrad: bool,
        decoupled: bool,
        found_inf: *mut C_tensor,
    ) -> *mut c_char;
    fn fe_unscale_grads(
        grads: *const *mut C_tensor,
        count: c_int,
        found_inf: *mut C_tensor,
        inv_scale: *mut C_tensor,
    ) -> *mut c_char;
    fn fe_autocast(device_type: c_int, half: bool, enabled: bool) -> *mut c_char;
    fn fe_generator_state(device_type: c_int, index: c_int, out: *mut *mut C_tensor)
        -> *mut c_char;
    fn fe_set_generator_state(
        device_type: c_int,
        index: c_int,
        state: *mut C_tensor,
    ) -> *mut c_char;
    fn fe_set_deterministic(on: bool) -> *mut c_char;
    fn fe_set_cudnn_benchmark(on: bool) -> *mut c_char;
    fn fe_memory_stats(index: c_int, out: *mut i64) -> *mut c_char;
    fn fe_cuda_versions(out: *mut std::ffi::c_long) -> *mut c_char;
}

/// Deterministic algorithms (libtorch then refuses, naming it, any op that has none),
/// deterministic cuDNN and no cuDNN autotuning; or the defaults back.
pub fn set_deterministic(on: bool) -> Result<(), String> {
    // SAFETY: no pointers cross; the shim catches every exception.
    check(unsafe { fe_set_deterministic(on) })
}

/// cuDNN autotuning of convolution kernels.
pub fn set_cudnn_benchmark(on: bool) -> Result<(), String> {
    // SAFETY: no pointers cross; the shim catches every exception.
    check(unsafe { fe_set_cudnn_benchmark(on) })
}

/// The caching allocator's view of a device, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryStats {
    /// Most bytes held by tensors since the last call.
    pub peak_allocated: i64,
    /// Most bytes reserved from the driver since the last call.
    pub peak_reserved: i64,
    /// Bytes held by tensors now.
    pub allocated: i64,
    /// Bytes reserved now.
    pub reserved: i64,
}

/// Memory statistics of CUDA device `index` since the previous call (peaks are reset).
pub fn memory_stats(index: usize) -> Result<MemoryStats, String> {
    let mut out = [0i64; 4];
    // SAFETY: `out` has the four slots the shim writes.
    check(unsafe { fe_memory_stats(index as c_int, out.as_mut_ptr()) })?;
    Ok(MemoryStats {
        peak_allocated: out[0],
        peak_reserved: out[1],
        allocated: out[2],
        reserved: out[3],
    })
}

/// The CUDA runtime and cuDNN versions libtorch was built with (`0` without CUDA), as
/// libtorch encodes them (e.g. 13000 for CUDA 13.0).
pub fn cuda_versions() -> Result<(i64, i64), String> {
    let mut out: [std::ffi::c_long; 2] = [0; 2];
    // SAFETY: `out` has the two slots the shim writes.
    check(unsafe { fe_cuda_versions(out.as_mut_ptr()) })?;
    // `c_long` is 32 bits on some platforms.
    #[allow(clippy::unnecessary_cast)]
    Ok((out[0] as i64, out[1] as i64))
}

/// Turns a message returned by the shim into a `Result`.
pub(crate) fn check(error: *mut c_char) -> Result<(), String> {
    if error.is_null() {
        return Ok(());
    }
    // SAFETY: the shim returns NUL-terminated strings allocated with malloc.
    let message = unsafe { CStr::from_ptr(error) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: allocated by malloc in the shim, freed exactly once here.
    unsafe { libc::free(error.cast()) };
    Err(message)
}

fn pointers(tensors: &[Tensor]) -> Vec<*mut C_tensor> {
    tensors.iter().map(|t| t.as_ptr().cast_mut()).collect()
}

/// State and hyper-parameters of a fused Adam step.
pub struct FusedAdam<'a> {
    /// Parameters (updated in place).
    pub params: &'a [Tensor],
    /// Their gradients (all defined).
    pub grads: &'a [Tensor],
    /// First moments.
    pub exp_avgs: &'a [Tensor],
    /// Second moments.
    pub exp_avg_sqs: &'a [Tensor],
    /// Maxima of second moments (AMSGrad; may be empty otherwise).
    pub max_exp_avg_sqs: &'a [Tensor],
    /// Step counts as float scalars, already incremented for this step.
    pub steps: &'a [Tensor],
    /// Mixed precision: the overflow flag (0 or 1, float, on the parameters' device); the
    /// kernel skips the update where it is 1, without the host reading it.
    pub found_inf: Option<&'a Tensor>,
}

/// libtorch's `_fused_adam_` / `_fused_adamw_`: one kernel launch for every parameter.
#[allow(clippy::too_many_arguments)]
pub fn fused_adam(
    state: FusedAdam<'_>,
    lr: f64,
    betas: (f64, f64),
    weight_decay: f64,
    eps: f64,
    amsgrad: bool,
    decoupled: bool,
) -> Result<(), String> {
    let n = state.params.len();
    let lists = [state.grads, state.exp_avgs, state.exp_avg_sqs, state.steps];
    if lists.iter().any(|l| l.len() != n) || (amsgrad && state.max_exp_avg_sqs.len() != n) {
        return Err("fused Adam: parameter and state lists differ in length".into());
    }
    let (p, g, m, v, vmax, s) = (
        pointers(state.params),
        pointers(state.grads),
        pointers(state.exp_avgs),
        pointers(state.exp_avg_sqs),
        pointers(state.max_exp_avg_sqs),
        pointers(state.steps),
    );
    // SAFETY: every pointer is a live tensor borrowed for the call; lengths checked above.
    check(unsafe {
        fe_fused_adam(
            p.as_ptr(),
            g.as_ptr(),
            m.as_ptr(),
            v.as_ptr(),
            vmax.as_ptr(),
            s.as_ptr(),
            n as c_int,
            lr,
            betas.0,
            betas.1,
            weight_decay,
            eps,
            amsgrad,
            decoupled,
            state
                .found_inf
                .map_or(std::ptr::null_mut(), |flag| flag.as_ptr().cast_mut()),
        )
    })
}

/// Multiplies every gradient by `inv_scale` (a one-element float tensor on their device) in
/// place, and sets `found_inf` (likewise) to 1 when any holds an infinity or NaN. Nothing is
/// read back to the host. Gradients must be defined, on one device.
pub fn unscale_grads(
    grads: &[Tensor],
    found_inf: &Tensor,
    inv_scale: &Tensor,
) -> Result<(), String> {
    if grads.is_empty() {
        return Ok(());
    }
    let g = pointers(grads);
    // SAFETY: every pointer is a live tensor borrowed for the call.
    check(unsafe {
        fe_unscale_grads(
            g.as_ptr(),
            g.len() as c_int,
            found_inf.as_ptr().cast_mut(),
            inv_scale.as_ptr().cast_mut(),
        )
    })
}

/// Enables autocast on this thread for `device` (CPU or CUDA) with float16 (`half`) or
/// bfloat16, or disables it. Calls must pair up.
pub fn autocast(device: tch::Device, half: bool, enabled: bool) -> Result<(), String> {
    let device_type = if device.is_cuda() { 1 } else { 0 };
    // SAFETY: plain values; the shim catches every exception.
    check(unsafe { fe_autocast(device_type, half, enabled) })
}

/// Which default generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generator {
    /// libtorch's CPU generator.
    Cpu,
    /// The generator of CUDA device `n`.
    Cuda(usize),
}

impl Generator {
    fn code(self) -> (c_int, c_int) {
        match self {
            Generator::Cpu => (0, 0),
            Generator::Cuda(index) => (1, index as c_int),
        }
    }
}

/// The state of a default generator (a uint8 tensor).
pub fn generator_state(generator: Generator) -> Result<Tensor, String> {
    let (device, index) = generator.code();
    let mut out: *mut C_tensor = std::ptr::null_mut();
    // SAFETY: `out` receives a tensor allocated with `new` by the shim.
    check(unsafe { fe_generator_state(device, index, &mut out) })?;
    if out.is_null() {
        return Err("generator state: no tensor returned".into());
    }
    // SAFETY: ownership of the new tensor passes to the Rust wrapper.
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// Restores a generator's state.
pub fn set_generator_state(generator: Generator, state: &Tensor) -> Result<(), String> {
    let (device, index) = generator.code();
    // SAFETY: `state` is live for the call; the shim copies what it needs.
    check(unsafe { fe_set_generator_state(device, index, state.as_ptr().cast_mut()) })
}

/// Held by the unit tests that seed or draw from libtorch's process-wide CPU generator: tests
/// run in parallel, and a draw from another test between two of ours would change what we see.
#[cfg(test)]
pub(crate) fn global_generator_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generator_state_round_trips() {
        let _lock = global_generator_lock();
        tch::manual_seed(5);
        let state = generator_state(Generator::Cpu).unwrap();
        let a = Tensor::rand([4], (tch::Kind::Float, tch::Device::Cpu));
        set_generator_state(Generator::Cpu, &state).unwrap();
        let b = Tensor::rand([4], (tch::Kind::Float, tch::Device::Cpu));
        assert!(a.equal(&b));
    }

    #[test]
    fn bad_generator_state_is_an_error() {
        let _lock = global_generator_lock();
        let err = set_generator_state(
            Generator::Cpu,
            &Tensor::zeros([3], (tch::Kind::Uint8, tch::Device::Cpu)),
        )
        .unwrap_err();
        assert!(!err.is_empty() && !err.contains('\n'), "{err}");
    }

    #[test]
    fn cpu_autocast_runs_matmul_in_bfloat16() {
        let a = Tensor::ones([2, 2], (tch::Kind::Float, tch::Device::Cpu));
        autocast(tch::Device::Cpu, false, true).unwrap();
        let inside = a.matmul(&a).kind();
        autocast(tch::Device::Cpu, false, false).unwrap();
        let outside = a.matmul(&a).kind();
        assert_eq!((inside, outside), (tch::Kind::BFloat16, tch::Kind::Float));
    }
}
