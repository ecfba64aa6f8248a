//! The in-place and scalar-argument ops PyTorch's optimizers use, bound through the shim
//! (csrc/optim.cpp) because tch's bindings drop their scalar: `add(other, alpha)`,
//! `addcmul(a, b, value)`, `addcdiv(a, b, value)`. Each rounds once where the tch spelling
//! (`mul` then `add`) rounds twice, and that extra rounding is what made fe-host's updates
//! differ from `torch.optim`'s in the last bits. Scalars are `f64`, as Python floats are.

use std::os::raw::c_char;

use tch::Tensor;
use torch_sys::C_tensor;

extern "C" {
    fn fe_add_alpha_(this: *mut C_tensor, other: *mut C_tensor, alpha: f64) -> *mut c_char;
    fn fe_add_alpha(
        this: *mut C_tensor,
        other: *mut C_tensor,
        alpha: f64,
        out: *mut *mut C_tensor,
    ) -> *mut c_char;
    fn fe_addcmul_(
        this: *mut C_tensor,
        a: *mut C_tensor,
        b: *mut C_tensor,
        value: f64,
    ) -> *mut c_char;
    fn fe_addcmul(
        this: *mut C_tensor,
        a: *mut C_tensor,
        b: *mut C_tensor,
        value: f64,
        out: *mut *mut C_tensor,
    ) -> *mut c_char;
    fn fe_addcdiv_(
        this: *mut C_tensor,
        a: *mut C_tensor,
        b: *mut C_tensor,
        value: f64,
    ) -> *mut c_char;
}

fn ptr(t: &Tensor) -> *mut C_tensor {
    t.as_ptr().cast_mut()
}

fn checked(error: *mut c_char) -> Result<(), tch::TchError> {
    crate::shim::check(error).map_err(tch::TchError::Torch)
}

/// Takes ownership of a tensor the shim allocated.
fn owned(out: *mut C_tensor) -> Result<Tensor, tch::TchError> {
    if out.is_null() {
        return Err(tch::TchError::Torch(
            "optimizer op: no tensor returned".into(),
        ));
    }
    // SAFETY: the shim allocated it with `new` and hands it over.
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// `this.add_(other, alpha=alpha)`
pub(crate) fn add_(this: &Tensor, other: &Tensor, alpha: f64) -> Result<(), tch::TchError> {
    // SAFETY: both tensors are live for the call; the shim catches every exception.
    checked(unsafe { fe_add_alpha_(ptr(this), ptr(other), alpha) })
}

/// `this.add(other, alpha=alpha)`
pub(crate) fn add(this: &Tensor, other: &Tensor, alpha: f64) -> Result<Tensor, tch::TchError> {
    let mut out = std::ptr::null_mut();
    // SAFETY: as in `add_`; `out` receives a new tensor.
    checked(unsafe { fe_add_alpha(ptr(this), ptr(other), alpha, &mut out) })?;
    owned(out)
}

/// `this.addcmul_(a, b, value=value)`
pub(crate) fn addcmul_(
    this: &Tensor,
    a: &Tensor,
    b: &Tensor,
    value: f64,
) -> Result<(), tch::TchError> {
    // SAFETY: as in `add_`.
    checked(unsafe { fe_addcmul_(ptr(this), ptr(a), ptr(b), value) })
}

/// `this.addcmul(a, b, value=value)`
pub(crate) fn addcmul(
    this: &Tensor,
    a: &Tensor,
    b: &Tensor,
    value: f64,
) -> Result<Tensor, tch::TchError> {
    let mut out = std::ptr::null_mut();
    // SAFETY: as in `add`.
    checked(unsafe { fe_addcmul(ptr(this), ptr(a), ptr(b), value, &mut out) })?;
    owned(out)
}

/// `this.addcdiv_(a, b, value=value)`
pub(crate) fn addcdiv_(
    this: &Tensor,
    a: &Tensor,
    b: &Tensor,
    value: f64,
) -> Result<(), tch::TchError> {
    // SAFETY: as in `add_`.
    checked(unsafe { fe_addcdiv_(ptr(this), ptr(a), ptr(b), value) })
}

/// Python's `x ** y` for floats (C's `pow`). The exponent goes through `black_box` so that a
/// constant one is not folded: LLVM rewrites `powf(x, 0.5)` as `sqrt(x)`, which differs from
/// glibc's `pow(x, 0.5)` in the last bit for some `x`, and PyTorch's Adam computes
/// `bias_correction2 ** 0.5`.
pub(crate) fn py_pow(x: f64, y: f64) -> f64 {
    x.powf(std::hint::black_box(y))
}
