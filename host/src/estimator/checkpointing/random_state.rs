//! The random state of a checkpoint (`rng.safetensors`), checked whole before the run is
//! restored from it: a checkpoint without its CPU generator state used to resume silently on
//! the freshly seeded stream, and no longer the run it continues.

use tch::{Device, Tensor};

use crate::shim::Generator;

/// What a saved generator state is, by its name in `rng.safetensors`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Saved {
    /// `cpu` (rank 0's, what a single process resumes from) or `rank<r>/cpu`.
    Cpu,
    /// `cuda:<index>` (a single process on a GPU) or `rank<r>/cuda`.
    Cuda,
}

fn saved_kind(name: &str) -> Option<Saved> {
    let number = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if name == "cpu" {
        return Some(Saved::Cpu);
    }
    if let Some(index) = name.strip_prefix("cuda:") {
        return number(index).then_some(Saved::Cuda);
    }
    let (rank, device) = name.strip_prefix("rank")?.split_once('/')?;
    match device {
        "cpu" if number(rank) => Some(Saved::Cpu),
        "cuda" if number(rank) => Some(Saved::Cuda),
        _ => None,
    }
}

/// Checks the generator states `saved` before any is handed to libtorch: `cpu` is there,
/// every name is one fe-host writes, and each state has the dtype and shape of the generator
/// it is for (this process's CPU generator; on `device` CUDA, that GPU's generator; a GPU
/// state resumed on the CPU is not used, so only its form is checked).
pub(super) fn check(saved: &[(String, Tensor)], device: Device) -> Result<(), String> {
    if !saved.iter().any(|(name, _)| name == "cpu") {
        return Err(
            "is missing `cpu`, the CPU random state every checkpoint holds: without it the run would not continue the one it resumes".into(),
        );
    }
    let cpu = crate::shim::generator_state(Generator::Cpu)?;
    let cuda = match device {
        Device::Cuda(index) => Some((
            crate::shim::generator_state(Generator::Cuda(index))?,
            format!("the cuda:{index} generator's state"),
        )),
        _ => None,
    };
    for (name, state) in saved {
        let Some(kind) = saved_kind(name) else {
            return Err(format!(
                "has `{name}`, which is no random state fe-host writes (`cpu`, `cuda:<index>`, `rank<r>/cpu`, `rank<r>/cuda`)"
            ));
        };
        let expected = match kind {
            Saved::Cpu => Some((&cpu, "the CPU generator's state")),
            Saved::Cuda => cuda.as_ref().map(|(state, what)| (state, what.as_str())),
        };
        match expected {
            Some((expected, generator))
                if state.kind() != expected.kind() || state.size() != expected.size() =>
            {
                return Err(format!(
                    "`{name}` is {:?} {:?} but {generator} is {:?} {:?}",
                    state.kind(),
                    state.size(),
                    expected.kind(),
                    expected.size()
                ));
            }
            None if state.kind() != tch::Kind::Uint8 || state.dim() != 1 => {
                return Err(format!(
                    "`{name}` is {:?} {:?}, not the bytes of a generator state (Uint8, one dimension)",
                    state.kind(),
                    state.size()
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fe_host_writes_are_known() {
        assert_eq!(saved_kind("cpu"), Some(Saved::Cpu));
        assert_eq!(saved_kind("rank3/cpu"), Some(Saved::Cpu));
        assert_eq!(saved_kind("rank0/cuda"), Some(Saved::Cuda));
        assert_eq!(saved_kind("cuda:1"), Some(Saved::Cuda));
        for other in [
            "cuda",
            "cuda:",
            "rank/cpu",
            "rankx/cpu",
            "rank1/gpu",
            "cpu2",
        ] {
            assert_eq!(saved_kind(other), None, "{other}");
        }
    }

    #[test]
    fn a_missing_misshapen_or_unknown_state_is_refused() {
        let cpu = crate::shim::generator_state(Generator::Cpu).unwrap();
        let whole = vec![("cpu".to_owned(), cpu.copy())];
        assert_eq!(check(&whole, Device::Cpu), Ok(()));
        // A GPU state resumed on the CPU is kept out of the way, not refused.
        let from_gpu = vec![
            ("cpu".to_owned(), cpu.copy()),
            (
                "cuda:0".to_owned(),
                Tensor::zeros([16], (tch::Kind::Uint8, Device::Cpu)),
            ),
        ];
        assert_eq!(check(&from_gpu, Device::Cpu), Ok(()));
        let err = check(&[("rank0/cpu".to_owned(), cpu.copy())], Device::Cpu).unwrap_err();
        assert!(err.starts_with("is missing `cpu`"), "{err}");
        let short = vec![("cpu".to_owned(), cpu.narrow(0, 0, 8))];
        let err = check(&short, Device::Cpu).unwrap_err();
        assert_eq!(
            err,
            format!(
                "`cpu` is Uint8 [8] but the CPU generator's state is Uint8 {:?}",
                cpu.size()
            )
        );
        let extra = vec![
            ("cpu".to_owned(), cpu.copy()),
            ("mps".to_owned(), cpu.copy()),
        ];
        let err = check(&extra, Device::Cpu).unwrap_err();
        assert!(
            err.starts_with("has `mps`, which is no random state"),
            "{err}"
        );
    }
}
