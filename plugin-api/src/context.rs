//! What a component is told about the run: at creation, and at every call.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use abi_stable::std_types::{RSlice, RStr, RString};
use abi_stable::StableAbi;

use crate::run::RunInfo;

/// An execution mode, as in FastEstimator.
#[repr(u8)]
#[derive(
    StableAbi,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Training: gradients and updates.
    Train = 0,
    /// Evaluation after each training epoch.
    Eval = 1,
    /// Testing after training.
    Test = 2,
    /// Inference on new data (no labels, no losses).
    Infer = 3,
}

impl Mode {
    /// Every mode, in order.
    pub const ALL: [Mode; 4] = [Mode::Train, Mode::Eval, Mode::Test, Mode::Infer];

    /// The lowercase name used in manifests and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Train => "train",
            Mode::Eval => "eval",
            Mode::Test => "test",
            Mode::Infer => "infer",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        Mode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == text)
            .ok_or_else(|| format!("unknown mode `{text}` (expected train, eval, test or infer)"))
    }
}

/// Where a component's tensors live.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceSpec {
    /// `true` for a CUDA device, `false` for the CPU.
    pub cuda: bool,
    /// CUDA device index (ignored for the CPU).
    pub index: u32,
}

impl DeviceSpec {
    /// The CPU.
    pub const CPU: DeviceSpec = DeviceSpec {
        cuda: false,
        index: 0,
    };
}

impl From<DeviceSpec> for tch::Device {
    fn from(spec: DeviceSpec) -> tch::Device {
        if spec.cuda {
            tch::Device::Cuda(spec.index as usize)
        } else {
            tch::Device::Cpu
        }
    }
}

impl From<tch::Device> for DeviceSpec {
    fn from(device: tch::Device) -> DeviceSpec {
        match device {
            tch::Device::Cuda(index) => DeviceSpec {
                cuda: true,
                index: index as u32,
            },
            _ => DeviceSpec::CPU,
        }
    }
}

/// Given to a component's constructor.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct CreateContext<'a> {
    /// Where the component is declared, e.g. `network.ops[2]`; for messages.
    pub location: RStr<'a>,
    /// The keys the component reads, in order (empty for models and datasets).
    pub inputs: RSlice<'a, RString>,
    /// The keys the component writes, in order.
    pub outputs: RSlice<'a, RString>,
    /// The device the run uses; models create their parameters there.
    pub device: DeviceSpec,
    /// A seed derived from the run seed and the component's position.
    pub seed: u64,
}

impl<'a> CreateContext<'a> {
    /// A context for tests and tools: no keys, CPU, seed 0.
    pub fn detached(location: &'a str) -> Self {
        Self {
            location: location.into(),
            inputs: RSlice::from_slice(&[]),
            outputs: RSlice::from_slice(&[]),
            device: DeviceSpec::CPU,
            seed: 0,
        }
    }

    /// The run this component is part of: manifest and output directories, rank and world
    /// size (see [`RunInfo`]; all unknown under a host older than fe-plugin-api 0.1.1).
    pub fn run(&self) -> RunInfo {
        crate::run::current()
    }

    /// The directory of the run's manifest, when the host said.
    pub fn manifest_dir(&self) -> Option<PathBuf> {
        self.run().manifest_dir
    }

    /// A path from the component's configuration as the manifest's author means it: relative
    /// to the manifest's directory (absolute paths as given).
    pub fn resolve_path(&self, path: impl AsRef<Path>) -> PathBuf {
        self.run().resolve_path(path)
    }

    /// Where to write the output `path`: inside the run's output directory, which `--smoke`
    /// and versioned runs redirect (absolute paths as given).
    pub fn output_path(&self, path: impl AsRef<Path>) -> PathBuf {
        self.run().output_path(path)
    }

    /// Fails unless the component was given exactly `inputs` input keys and `outputs` output
    /// keys; `None` accepts any number.
    pub fn expect_arity(&self, inputs: Option<usize>, outputs: Option<usize>) -> crate::Result<()> {
        let check = |what: &str, want: Option<usize>, got: usize| match want {
            Some(want) if want != got => Err(crate::Error::config(
                what,
                format!("expected {want} key(s), got {got}"),
            )),
            _ => Ok(()),
        };
        check("inputs", inputs, self.inputs.len())?;
        check("outputs", outputs, self.outputs.len())
    }
}

/// Given to every per-step call.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct StepContext<'a> {
    /// The current mode.
    pub mode: Mode,
    /// The current epoch, from 1.
    pub epoch: u32,
    /// Training steps so far (the current one included while training).
    pub global_step: u64,
    /// Index of the batch within the epoch, from 1 (0 outside batches).
    pub batch_idx: u64,
    /// The dataset id, `""` when a mode has a single dataset.
    pub ds_id: RStr<'a>,
    /// `true` during the warm-up pass that checks the network before training.
    pub warmup: bool,
    /// A seed unique to this call site and sample/step, for reproducible randomness.
    pub seed: u64,
}

impl StepContext<'static> {
    /// A context for tests: training, epoch 1, step 1. Struct update gives any other:
    ///
    /// ```
    /// use fe_plugin_api::{Mode, StepContext};
    /// let eval = StepContext { mode: Mode::Eval, epoch: 2, ..StepContext::for_tests() };
    /// assert_eq!((eval.mode, eval.epoch, eval.global_step), (Mode::Eval, 2, 1));
    /// ```
    pub fn for_tests() -> Self {
        Self {
            mode: Mode::Train,
            epoch: 1,
            global_step: 1,
            batch_idx: 1,
            ds_id: RStr::from_str(""),
            warmup: false,
            seed: 0,
        }
    }
}
