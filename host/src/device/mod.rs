//! Devices: what the user asks for (`auto`, `cpu`, `cuda`, `cuda:N`) and what libtorch has.

pub mod driver;

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

/// The process-group backends this fe-host can join: c10d's Gloo always; NCCL for ranks on
/// GPUs when it was built in (csrc/nccl.cpp) and CUDA is usable, else what is missing.
fn process_groups(inventory: &Inventory) -> String {
    let nccl = match (crate::dist::nccl_built(), inventory.cuda_devices) {
        (false, _) => "nccl: not built in (CUDA's or NCCL's headers were missing at build time; scripts/env.sh installs them)".to_owned(),
        (true, 0) => "nccl: built in; needs CUDA, and none is usable here".to_owned(),
        (true, n) => format!("nccl (CUDA, one GPU per rank: {n} here)"),
    };
    format!("process groups: gloo (CPU); {nccl}\n")
}

/// This process's place in a process group, from its launcher's variables.
fn membership_line(vars: &std::collections::HashMap<String, String>) -> String {
    match crate::dist::membership(vars) {
        Ok(None) => {
            "rank: one process (no launcher's variables: torchrun, SLURM, OpenMPI, Kubeflow)\n"
                .to_owned()
        }
        Ok(Some(m)) => format!(
            "rank: {} of {}, local rank {} of {}, master {}:{}; cluster: {}\n",
            m.rank, m.world, m.local_rank, m.local_world, m.master_addr, m.master_port, m.cluster
        ),
        Err(problem) => format!("rank: {problem}\n"),
    }
}

/// What `fe-host devices` prints: libtorch's view, the driver's list of GPUs, the CUDA and
/// cuDNN versions libtorch was built with, the process-group backends, and this process's
/// rank when torchrun's variables are set.
pub fn report() -> String {
    let inventory = Inventory::probe();
    let mut out = format!("cpu: {} threads\n", tch::get_num_threads());
    out.push_str(&format!(
        "libtorch: {} CUDA device(s); cudnn: {}; libtorch_cuda loaded: {}\n",
        inventory.cuda_devices, inventory.cudnn, inventory.libtorch_cuda_loaded
    ));
    if let Ok((cuda, cudnn)) = crate::shim::cuda_versions() {
        if cuda > 0 {
            out.push_str(&format!(
                "built with: CUDA {}, cuDNN {cudnn}\n",
                driver::version_text(cuda)
            ));
        }
    }
    if let Ok(visible) = std::env::var("CUDA_VISIBLE_DEVICES") {
        out.push_str(&format!("CUDA_VISIBLE_DEVICES={visible:?}\n"));
    }
    match driver::probe() {
        Ok(found) => {
            out.push_str(&format!(
                "driver: CUDA {}, {} GPU(s)\n",
                driver::version_text(found.version.into()),
                found.gpus.len()
            ));
            for gpu in &found.gpus {
                out.push_str(&format!(
                    "cuda:{}: {}, {:.1} GiB, compute capability {}.{}\n",
                    gpu.index,
                    gpu.name,
                    gpu.total_memory as f64 / (1u64 << 30) as f64,
                    gpu.compute_capability.0,
                    gpu.compute_capability.1
                ));
            }
        }
        Err(reason) => out.push_str(&format!("driver: {reason}\n")),
    }
    out.push_str(&process_groups(&inventory));
    let vars: std::collections::HashMap<String, String> = std::env::vars().collect();
    out.push_str(&membership_line(&vars));
    out
}

/// `true` when libtorch_cuda is mapped into this process (Linux: /proc/self/maps).
pub fn libtorch_cuda_loaded() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .map(|maps| maps.contains("libtorch_cuda.so"))
        .unwrap_or(false)
}

/// Where memory ran out, for the advice that goes with it.
pub struct OomContext<'a> {
    /// The device the step ran on.
    pub device: Device,
    /// The global step.
    pub step: u64,
    /// Samples in the batch.
    pub batch_size: i64,
    /// The models of the network.
    pub models: &'a [&'a str],
}

/// A failure whose message says memory ran out, explained with where and what to try; `None`
/// for any other failure. libtorch's own text stays first: it has the numbers.
pub fn explain_oom(message: &str, at: &OomContext<'_>) -> Option<String> {
    let lower = message.to_ascii_lowercase();
    if !(lower.contains("out of memory") || lower.contains("defaultcpuallocator: can't allocate")) {
        return None;
    }
    let device = match at.device {
        Device::Cuda(index) => format!("cuda:{index}"),
        _ => "cpu".to_owned(),
    };
    Some(format!(
        "{message} — out of memory on {device} at step {step} with batch size {batch} (models: {models}); \
         try a smaller batch_size, a slicer that splits the batch (AxisSlicer), or mixed precision; \
         checkpoints already written are intact",
        step = at.step,
        batch = at.batch_size,
        models = at.models.join(", "),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_names_step_batch_and_models_and_suggests_what_to_try() {
        let at = OomContext {
            device: Device::Cuda(1),
            step: 420,
            batch_size: 512,
            models: &["generator", "discriminator"],
        };
        let libtorch =
            "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; 79.1 GiB total capacity)";
        let message = explain_oom(libtorch, &at).unwrap();
        assert!(message.starts_with(libtorch), "{message}");
        for part in [
            "cuda:1",
            "step 420",
            "batch size 512",
            "generator, discriminator",
            "slicer",
            "batch_size",
        ] {
            assert!(message.contains(part), "{part}: {message}");
        }
        assert!(!message.contains('\n'), "one line");
        assert_eq!(explain_oom("shape mismatch", &at), None);
    }

    #[test]
    fn parses_requests() {
        assert_eq!("auto".parse::<Request>(), Ok(Request::Auto));
        assert_eq!("cuda".parse::<Request>(), Ok(Request::Cuda(0)));
        assert_eq!("cuda:3".parse::<Request>(), Ok(Request::Cuda(3)));
        assert!("gpu".parse::<Request>().is_err());
        assert!("cuda:x".parse::<Request>().is_err());
    }
}
