//! Devices: what the user asks for (`auto`, `cpu`, `cuda`, `cuda:N`) and what libtorch has.

use tch::{Cuda, Device};

use crate::error::{Error, Result};

/// A device request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// CUDA when present, else the CPU.
    Auto,
    /// The CPU.
    Cpu,
    /// A CUDA device (`cuda` means `cuda:0`).
    Cuda(usize),
}

impl std::str::FromStr for Request {
    type Err = String;
    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text {
            "auto" => Ok(Request::Auto),
            "cpu" => Ok(Request::Cpu),
            "cuda" => Ok(Request::Cuda(0)),
            other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(index)) => Ok(Request::Cuda(index)),
                _ => Err(format!(
                    "unknown device `{other}` (expected auto, cpu, cuda or cuda:N)"
                )),
            },
        }
    }
}

/// What libtorch can see, for messages and `fe-host devices`.
#[derive(Debug, Clone)]
pub struct Inventory {
    /// CUDA devices visible (after `CUDA_VISIBLE_DEVICES`).
    pub cuda_devices: usize,
    /// cuDNN usable.
    pub cudnn: bool,
    /// libtorch_cuda is mapped into this process.
    pub libtorch_cuda_loaded: bool,
}

impl Inventory {
    /// Asks libtorch.
    pub fn probe() -> Self {
        let cuda_devices = if Cuda::is_available() {
            Cuda::device_count().max(0) as usize
        } else {
            0
        };
        Self {
            cuda_devices,
            cudnn: cuda_devices > 0 && Cuda::cudnn_is_available(),
            libtorch_cuda_loaded: libtorch_cuda_loaded(),
        }
    }

    fn describe(&self) -> String {
        let visible = std::env::var("CUDA_VISIBLE_DEVICES")
            .map(|v| format!(", CUDA_VISIBLE_DEVICES={v:?}"))
            .unwrap_or_default();
        format!(
            "libtorch sees {} CUDA device(s){visible}; libtorch_cuda is {}",
            self.cuda_devices,
            if self.libtorch_cuda_loaded {
                "loaded"
            } else {
                "NOT loaded (this fe-host was linked without CUDA)"
            }
        )
    }
}

/// Resolves a request against what exists.
pub fn resolve(request: Request) -> Result<Device> {
    let inventory = Inventory::probe();
    match request {
        Request::Cpu => Ok(Device::Cpu),
        Request::Auto => Ok(if inventory.cuda_devices > 0 {
            Device::Cuda(0)
        } else {
            Device::Cpu
        }),
        Request::Cuda(index) if index < inventory.cuda_devices => Ok(Device::Cuda(index)),
        Request::Cuda(index) => Err(Error::Device(format!(
            "device cuda:{index} was requested but {}; use --device cpu (or auto)",
            inventory.describe()
        ))),
    }
}

/// `true` when libtorch_cuda is mapped into this process (Linux: /proc/self/maps).
pub fn libtorch_cuda_loaded() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .map(|maps| maps.contains("libtorch_cuda.so"))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_requests() {
        assert_eq!("auto".parse::<Request>(), Ok(Request::Auto));
        assert_eq!("cuda".parse::<Request>(), Ok(Request::Cuda(0)));
        assert_eq!("cuda:3".parse::<Request>(), Ok(Request::Cuda(3)));
        assert!("gpu".parse::<Request>().is_err());
        assert!("cuda:x".parse::<Request>().is_err());
    }
}
