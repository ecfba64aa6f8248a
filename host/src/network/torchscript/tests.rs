//! A module scripted by `.venv`'s python at test time: train/eval mode reaches dropout and
//! batch norm, buffers share storage with the module, and outputs map by position or name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};

use super::TorchScriptModel;

const PYTHON: &str = r#"
import sys, torch
from typing import Dict
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)
    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        y = self.drop(self.bn(x))
        return {"out": y, "twice": 2 * y}

torch.jit.script(Net()).save(sys.argv[1])
"#;

/// A small conv net whose training forward has ops TorchScript's autodiff would take over.
const CONV_NET: &str = r#"
import sys, torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 3)
    def forward(self, x):
        x = torch.relu(self.conv(x)).flatten(1)
        return torch.softmax(torch.relu(self.fc(x)), -1)

torch.jit.script(Net()).save(sys.argv[1])
"#;

fn scripted(name: &str) -> PathBuf {
    scripted_from(name, PYTHON)
}

fn scripted_from(name: &str, python: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = root.join("target/tmp");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join(format!("{name}-{}.py", std::process::id()));
    let file = dir.join(format!("{name}-{}.pt", std::process::id()));
    std::fs::write(&script, python).unwrap();
    let status = std::process::Command::new(root.join(".venv/bin/python"))
        .arg(&script)
        .arg(&file)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "python could not script the module");
    file
}

#[test]
fn train_and_eval_modes_reach_dropout_and_batch_norm() {
    // Two dropout draws must differ: no other test may reseed the generator between them.
    let _lock = crate::shim::global_generator_lock();
    let file = scripted("modes");
    let names = Some(vec!["out".to_owned(), "twice".to_owned()]);
    let mut model = TorchScriptModel::load(&file, Device::Cpu, names).unwrap();
    assert_eq!(
        model.signature().describe(),
        "forward(x: Tensor) -> Dict[str, Tensor]"
    );
    let variables = model.named_variables().unwrap();
    let running_mean = variables
        .iter()
        .find(|(n, _)| n == "bn.running_mean")
        .map(|(_, t)| t.shallow_clone())
        .expect("batch-norm buffer exposed");
    let x = Tensor::randn([64, 4], (Kind::Float, Device::Cpu)) + 3.0;

    let _guard = tch::no_grad_guard();
    let a = model.run(&[&x], true).unwrap();
    assert_eq!(a.len(), 2, "both named dict entries, in order");
    assert!(a[1].allclose(&(&a[0] * 2.0), 1e-6, 1e-6, false));
    let b = model.run(&[&x], true).unwrap();
    assert!(!a[0].equal(&b[0]), "dropout draws differ in training");
    assert!(
        running_mean.abs().sum(Kind::Float).double_value(&[]) > 0.1,
        "training updated the running mean, seen through the host's tensor"
    );

    let mean_before = running_mean.copy();
    let c = model.run(&[&x], false).unwrap();
    let d = model.run(&[&x], false).unwrap();
    assert!(c[0].equal(&d[0]), "evaluation is deterministic");
    assert!(
        running_mean.equal(&mean_before),
        "evaluation leaves statistics alone"
    );

    // What the host writes into the shared tensors is what the module computes with.
    let mut shared = running_mean.shallow_clone();
    let _ = shared.fill_(0.0);
    let e = model.run(&[&x], false).unwrap();
    assert!(
        !e[0].equal(&c[0]),
        "the module reads the buffer the host changed"
    );
    let _ = std::fs::remove_file(file);
}

#[test]
fn training_records_eager_backward_nodes_not_torchscript_autodiff() {
    // The graph executor's autodiff subgraphs back-propagate with TorchScript's own formulas
    // (ReLU's as `gt`, a dtype copy and `mul`), slower than each op's native backward: training
    // must record the eager nodes, from the first call and after the executor's profiling runs.
    let file = scripted_from("autodiff", CONV_NET);
    let mut model = TorchScriptModel::load(&file, Device::Cpu, None).unwrap();
    let x = Tensor::rand([8, 1, 8, 8], (Kind::Float, Device::Cpu));
    for call in 0..4 {
        let y = model.run(&[&x], true).unwrap();
        assert_eq!(
            super::ffi::grad_fn_name(&y[0]).unwrap(),
            "SoftmaxBackward0",
            "call {call}"
        );
        y[0].sum(Kind::Float).backward();
    }
    let _ = std::fs::remove_file(file);
}

#[test]
fn a_file_that_is_not_torchscript_is_refused() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tmp");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("junk-{}.pt", std::process::id()));
    std::fs::write(&file, b"PK\x03\x04 not really").unwrap();
    let err = TorchScriptModel::load(&file, Device::Cpu, None)
        .err()
        .unwrap()
        .to_string();
    assert!(err.starts_with("is not a TorchScript module"), "{err}");
    assert!(!err.contains('\n'), "one line: {err}");
    let _ = std::fs::remove_file(file);
    let err = TorchScriptModel::load(&dir.join("missing.pt"), Device::Cpu, None)
        .err()
        .unwrap();
    assert_eq!(err, super::LoadError::Unusable("no such file".into()));
}

#[test]
fn libtorch_advice_about_corrupted_checkpoints_is_cut_from_the_reason() {
    let message = "PytorchStreamReader failed reading zip archive: not a ZIP archive. This is an internal miniz error. If you are seeing this error, there is a high likelihood that your checkpoint file is corrupted.";
    assert_eq!(
        super::without_miniz_advice(message),
        "PytorchStreamReader failed reading zip archive: not a ZIP archive"
    );
    assert_eq!(super::without_miniz_advice("other"), "other");
}

/// Flips one byte inside the archive entry whose name ends with `suffix`; returns its name.
pub(crate) fn corrupt_entry(file: &Path, suffix: &str) -> String {
    let mut archive = zip::ZipArchive::new(std::fs::File::open(file).unwrap()).unwrap();
    let (name, at) = (0..archive.len())
        .find_map(|i| {
            let entry = archive.by_index(i).unwrap();
            (entry.name().ends_with(suffix) && entry.size() > 0)
                .then(|| (entry.name().to_owned(), entry.data_start()))
        })
        .expect("an entry to corrupt");
    let mut bytes = std::fs::read(file).unwrap();
    bytes[at as usize] ^= 0x40;
    std::fs::write(file, bytes).unwrap();
    name
}

#[test]
fn a_tensor_entry_failing_its_crc_is_refused_naming_it() {
    let file = scripted_from("crc", CONV_NET);
    assert!(TorchScriptModel::load(&file, Device::Cpu, None).is_ok());
    let entry = corrupt_entry(&file, "/data/0");
    let err = TorchScriptModel::load(&file, Device::Cpu, None)
        .err()
        .unwrap();
    let super::LoadError::Corrupt(why) = &err else {
        panic!("not reported as corrupt: {err}");
    };
    assert!(
        why.starts_with(&format!("archive entry `{entry}` fails its CRC-32 check")),
        "{why}"
    );
    let _ = std::fs::remove_file(file);
}
