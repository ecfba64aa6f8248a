//! The CUDA driver API, opened at run time: names, memory and compute capability of the GPUs
//! for `fe-host devices`. `libcuda.so.1` ships with the NVIDIA driver, not with libtorch, so it
//! is looked up when asked for and its absence is an answer ("no driver"), not a link error.
//! The driver applies `CUDA_VISIBLE_DEVICES` itself: what it lists is what a run can use.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// One GPU as the driver describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Its index (`cuda:N`).
    pub index: usize,
    /// The product name.
    pub name: String,
    /// Memory in bytes.
    pub total_memory: u64,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
}

/// What the driver reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Driver {
    /// The driver's CUDA version, as encoded by CUDA (e.g. 13000 for 13.0).
    pub version: i32,
    /// Visible GPUs.
    pub gpus: Vec<Gpu>,
}

const COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const COMPUTE_CAPABILITY_MINOR: c_int = 76;

type Init = unsafe extern "C" fn(c_uint) -> c_int;
type GetInt = unsafe extern "C" fn(*mut c_int) -> c_int;
type DeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type DeviceName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type DeviceMemory = unsafe extern "C" fn(*mut usize, c_int) -> c_int;
type DeviceAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;

/// Asks the driver; `Err` says why there is no answer (no driver, or an error code).
pub fn probe() -> Result<Driver, String> {
    // SAFETY: dlopen with a constant, NUL-terminated name; the handle is never closed, as
    // libtorch may hold the same library.
    let handle =
        unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err("no NVIDIA driver (libcuda.so.1 not found)".into());
    }
    let symbol = |name: &CStr| -> Result<*mut c_void, String> {
        // SAFETY: `handle` is a live dlopen handle and `name` is NUL-terminated.
        let pointer = unsafe { libc::dlsym(handle, name.as_ptr()) };
        if pointer.is_null() {
            Err(format!("libcuda.so.1 has no {}", name.to_string_lossy()))
        } else {
            Ok(pointer)
        }
    };
    // SAFETY: each symbol is the driver API function of that name, with the signature CUDA's
    // cuda.h declares for it (CUdevice is an int, CUresult an enum of int size).
    let (init, driver_version, count, device_get, name, memory, attribute) = unsafe {
        (
            std::mem::transmute::<*mut c_void, Init>(symbol(c"cuInit")?),
            std::mem::transmute::<*mut c_void, GetInt>(symbol(c"cuDriverGetVersion")?),
            std::mem::transmute::<*mut c_void, GetInt>(symbol(c"cuDeviceGetCount")?),
            std::mem::transmute::<*mut c_void, DeviceGet>(symbol(c"cuDeviceGet")?),
            std::mem::transmute::<*mut c_void, DeviceName>(symbol(c"cuDeviceGetName")?),
            std::mem::transmute::<*mut c_void, DeviceMemory>(symbol(c"cuDeviceTotalMem_v2")?),
            std::mem::transmute::<*mut c_void, DeviceAttribute>(symbol(c"cuDeviceGetAttribute")?),
        )
    };
    let ok = |what: &str, code: c_int| {
        if code == 0 {
            Ok(())
        } else {
            Err(format!("{what} failed with CUDA error {code}"))
        }
    };
    let mut version = 0;
    let mut devices = 0;
    // SAFETY: the out-pointers are valid for the writes the API makes.
    unsafe {
        ok("cuInit", init(0))?;
        ok("cuDriverGetVersion", driver_version(&mut version))?;
        ok("cuDeviceGetCount", count(&mut devices))?;
    }
    let mut gpus = Vec::new();
    for ordinal in 0..devices {
        let mut device = 0;
        let mut text = [0 as c_char; 256];
        let mut bytes = 0usize;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: as above; `text` holds the 256 bytes the call may write, NUL-terminated.
        let name = unsafe {
            ok("cuDeviceGet", device_get(&mut device, ordinal))?;
            ok("cuDeviceGetName", name(text.as_mut_ptr(), 256, device))?;
            ok("cuDeviceTotalMem", memory(&mut bytes, device))?;
            ok(
                "cuDeviceGetAttribute",
                attribute(&mut major, COMPUTE_CAPABILITY_MAJOR, device),
            )?;
            ok(
                "cuDeviceGetAttribute",
                attribute(&mut minor, COMPUTE_CAPABILITY_MINOR, device),
            )?;
            CStr::from_ptr(text.as_ptr()).to_string_lossy().into_owned()
        };
        gpus.push(Gpu {
            index: ordinal as usize,
            name,
            total_memory: bytes as u64,
            compute_capability: (major, minor),
        });
    }
    Ok(Driver { version, gpus })
}

/// `13.0` from CUDA's `13000`.
pub fn version_text(encoded: i64) -> String {
    format!("{}.{}", encoded / 1000, encoded % 1000 / 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_cuda_writes_them() {
        assert_eq!(version_text(13000), "13.0");
        assert_eq!(version_text(12080), "12.8");
    }

    #[test]
    fn a_machine_without_a_driver_says_so() {
        // On a GPU machine this lists its devices; either way it must not fail silently.
        match probe() {
            Ok(driver) => assert!(driver.version > 0),
            Err(reason) => assert!(reason.contains("libcuda") || reason.contains("CUDA error")),
        }
    }
}
