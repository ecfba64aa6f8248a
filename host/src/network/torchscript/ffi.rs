//! Safe wrappers over csrc/torchscript.cpp: a CModule's buffers and `forward` signature.

use std::ffi::{c_char, c_void, CStr};

use tch::{CModule, Tensor};
use torch_sys::C_tensor;

extern "C" {
    fn fe_ts_named_buffers(
        module: *mut c_void,
        data: *mut c_void,
        f: extern "C" fn(*mut c_void, *const c_char, *mut C_tensor),
    ) -> *mut c_char;
    fn fe_ts_forward_signature(module: *mut c_void, out: *mut *mut c_char) -> *mut c_char;
    #[cfg(test)]
    fn fe_ts_grad_fn_name(tensor: *const C_tensor, out: *mut *mut c_char) -> *mut c_char;
}

// tch keeps the `torch::jit::Module*` private in a struct with that one field. A struct the
// size of its only field holds it at offset 0, so reading the pointer there is sound as long
// as this holds; it is checked at compile time against the pinned tch.
const _: () = assert!(std::mem::size_of::<CModule>() == std::mem::size_of::<*mut c_void>());

fn raw(module: &CModule) -> *mut c_void {
    // SAFETY: see the assertion above: the only field, a pointer, is at offset 0.
    unsafe { *(module as *const CModule).cast::<*mut c_void>() }
}

extern "C" fn push_buffer(data: *mut c_void, name: *const c_char, tensor: *mut C_tensor) {
    // SAFETY: `data` is the Vec passed by `named_buffers` below, alive for the call; `name` is
    // a NUL-terminated string; `tensor` a new at::Tensor whose ownership passes to us.
    let out = unsafe { &mut *data.cast::<Vec<(String, Tensor)>>() };
    let name = unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned();
    out.push((name, unsafe { Tensor::from_ptr(tensor) }));
}

/// Every buffer of the module (recursively, dotted names), sharing storage with it.
pub fn named_buffers(module: &CModule) -> Result<Vec<(String, Tensor)>, String> {
    let mut out: Vec<(String, Tensor)> = Vec::new();
    // SAFETY: the module pointer is live while `module` is borrowed; the callback only pushes
    // into `out`.
    check(unsafe {
        fe_ts_named_buffers(
            raw(module),
            (&mut out as *mut Vec<(String, Tensor)>).cast(),
            push_buffer,
        )
    })?;
    Ok(out)
}

/// The shim's text for the signature of `forward` (see `Signature::parse`).
pub fn forward_signature(module: &CModule) -> Result<String, String> {
    let mut text: *mut c_char = std::ptr::null_mut();
    // SAFETY: the module pointer is live; `text` receives a malloc'd string.
    check(unsafe { fe_ts_forward_signature(raw(module), &mut text) })?;
    owned_text(text, "signature")
}

/// The name of the autograd node that produced `tensor` (empty for a leaf).
#[cfg(test)]
pub fn grad_fn_name(tensor: &Tensor) -> Result<String, String> {
    let mut text: *mut c_char = std::ptr::null_mut();
    // SAFETY: the tensor is live while borrowed; `text` receives a malloc'd string.
    check(unsafe { fe_ts_grad_fn_name(tensor.as_ptr(), &mut text) })?;
    owned_text(text, "autograd node name")
}

/// Takes ownership of a string the shim malloc'd.
fn owned_text(text: *mut c_char, what: &str) -> Result<String, String> {
    if text.is_null() {
        return Err(format!("the TorchScript shim returned no {what}"));
    }
    // SAFETY: NUL-terminated and malloc'd by the shim, freed exactly once here.
    let owned = unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned();
    unsafe { libc::free(text.cast()) };
    Ok(owned)
}

fn check(error: *mut c_char) -> Result<(), String> {
    if error.is_null() {
        return Ok(());
    }
    // SAFETY: NUL-terminated and malloc'd by the shim, freed exactly once here.
    let message = unsafe { CStr::from_ptr(error) }
        .to_string_lossy()
        .into_owned();
    unsafe { libc::free(error.cast()) };
    Err(message)
}
