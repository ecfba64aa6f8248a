//! What is checked of a TorchScript model before training, with modules scripted by `.venv`'s
//! python: a damaged archive, a NamedTuple `forward`, a module without parameters under an
//! UpdateOp, and logits reaching a loss that reads probabilities. Every refusal comes before
//! the first step and leaves nothing in the run's directory.

use std::path::Path;
use std::process::Command;

use crate::util::{digits, fe_host_in, root, TempDir};

/// `probs|logits|named|no-params OUT`: a small conv net ending in a softmax, the same net
/// returning logits, one returning GoogLeNet-style `Outputs(logits, probs, aux)` with `aux`
/// set only in training, and a module with no parameters at all.
const PYTHON: &str = r#"
import sys, torch
from typing import NamedTuple, Optional
from torch import nn

class Outputs(NamedTuple):
    logits: torch.Tensor
    probs: torch.Tensor
    aux: Optional[torch.Tensor]

class Logits(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, stride=2)
        self.fc = nn.Linear(8 * 13 * 13, 10)
    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))

class Probs(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = Logits()
    def forward(self, x):
        return torch.softmax(self.net(x), -1)

class Named(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = Logits()
    def forward(self, x) -> Outputs:
        logits = self.net(x)
        aux: Optional[torch.Tensor] = None
        if self.training:
            aux = torch.softmax(logits * 0.5, -1)
        return Outputs(logits, torch.softmax(logits, -1), aux)

class NoParams(nn.Module):
    def forward(self, x):
        return torch.softmax(x.flatten(1)[:, :10], -1)

torch.manual_seed(0)
kind = {'probs': Probs, 'logits': Logits, 'named': Named, 'no-params': NoParams}[sys.argv[1]]
torch.jit.script(kind()).save(sys.argv[2])
"#;

/// A fresh directory holding `m.toml` (the small digits, `net.pt` as the model, checkpoints,
/// a versioned log root) and `net.pt` scripted as `kind`.
fn setup(
    parent: &TempDir,
    name: &str,
    kind: &str,
    edit: impl Fn(String) -> String,
) -> std::path::PathBuf {
    let dir = parent.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let text = crate::util::lenet_manifest(1, "\n[checkpoint]\ndir = \"ckpt\"\nevery_epochs = 1\n")
        .replace(
            "architecture = \"LeNet\"",
            "architecture = \"TorchScript\"\nfile = \"net.pt\"",
        )
        .replace(
            "log_steps = 50",
            "log_steps = 5\ntrain_steps_per_epoch = 20\neval_steps_per_epoch = 5\nlog_dir = \"runs\"",
        );
    std::fs::write(dir.join("m.toml"), edit(text)).unwrap();
    std::fs::write(dir.join("helper.py"), PYTHON).unwrap();
    let out = Command::new(root().join(".venv/bin/python"))
        .arg("helper.py")
        .args([kind, "net.pt"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python {kind}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

const TRAIN: [&str; 7] = [
    "run",
    "m.toml",
    "--save-weights",
    "weights",
    "--summary",
    "summary.json",
    "-q",
];

/// A refused run's: a run that fails still writes its `--summary` (of what it did), so
/// refusals are run without one.
const REFUSED: [&str; 5] = ["run", "m.toml", "--save-weights", "weights", "-q"];

/// Only what the test put there: no version, checkpoint, weights or summary.
fn assert_nothing_written(dir: &Path) {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["helper.py", "m.toml", "net.pt"]);
}

/// Flips one byte inside the archive entry whose name ends with `suffix`; returns its name.
fn corrupt_entry(file: &Path, suffix: &str) -> String {
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
fn a_torchscript_file_with_a_corrupt_tensor_entry_is_refused_naming_the_entry() {
    let parent = TempDir::new("ts-crc");
    let dir = setup(&parent, "crc", "probs", |t| t);
    // The first tensor's bytes: libtorch alone loads this file and trains on it, exit 0.
    let entry = corrupt_entry(&dir.join("net.pt"), "/data/0");
    let out = fe_host_in(&dir, &REFUSED);
    assert_eq!(out.code, 5, "{}{}", out.stdout, out.stderr);
    let error = out.stderr.trim();
    assert_eq!(error.lines().count(), 1, "{error}");
    assert_contains!(
        error,
        &format!("net.pt: archive entry `{entry}` fails its CRC-32 check: the file is corrupt")
    );
    assert_nothing_written(&dir);
    // Predicting loads the same file the same way.
    let images = digits()[2].to_string_lossy().into_owned();
    let out = fe_host_in(
        &dir,
        &[
            "predict",
            "m.toml",
            "--random-weights",
            "--input",
            &images,
            "--out",
            "p.csv",
        ],
    );
    assert_eq!(out.code, 5, "{}{}", out.stdout, out.stderr);
    assert_contains!(
        out.stderr,
        &format!("archive entry `{entry}` fails its CRC-32 check")
    );
    assert_nothing_written(&dir);
}

#[test]
fn a_namedtuple_forward_trains_and_predicts_by_position_and_by_field_name() {
    let parent = TempDir::new("ts-named");
    let images = digits()[2].to_string_lossy().into_owned();
    // By field name: `probs`, the second field, under the default CrossEntropy (which refuses
    // logits, so taking the first field would fail).
    let by_name = setup(&parent, "by-name", "named", |t| {
        t.replace(
            "file = \"net.pt\"",
            "file = \"net.pt\"\noutputs = [\"probs\"]",
        )
    });
    let out = fe_host_in(&by_name, &TRAIN);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(by_name.join("summary.json")).unwrap())
            .unwrap();
    let ce = crate::util::values(&summary, "train", "ce");
    assert!(ce.len() >= 3 && ce.last() < ce.first(), "train ce {ce:?}");
    let out = fe_host_in(
        &by_name,
        &[
            "predict",
            "m.toml",
            "--weights",
            "weights",
            "--input",
            &images,
            "--limit",
            "8",
            "--out",
            "p.csv",
        ],
    );
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let rows = std::fs::read_to_string(by_name.join("p.csv")).unwrap();
    assert_eq!(rows.lines().count(), 9, "{rows}");

    // By position: the ModelOp's keys take the first fields; `aux`, None in evaluation, may
    // follow unused, but a key on it is refused in the warm-up.
    let positional = setup(&parent, "positional", "named", |t| {
        t.replace("outputs = \"ce\"", "outputs = \"ce\"\nfrom_logits = true")
    });
    let out = fe_host_in(&positional, &TRAIN);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let three = setup(&parent, "three", "named", |t| {
        t.replace(
            "outputs = \"y_pred\"",
            "outputs = [\"y_pred\", \"p\", \"aux\"]",
        )
        .replace("outputs = \"ce\"", "outputs = \"ce\"\nfrom_logits = true")
    });
    let out = fe_host_in(&three, &REFUSED);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert_contains!(out.stderr, "warm-up, eval epoch 1");
    assert_contains!(
        out.stderr,
        "forward's output 2 is None, so output key `aux` gets no value"
    );
    assert_nothing_written(&three);
}

#[test]
fn a_model_without_parameters_under_an_update_op_is_refused_before_anything_is_written() {
    let parent = TempDir::new("ts-no-params");
    let dir = setup(&parent, "no-params", "no-params", |t| t);
    let out = fe_host_in(&dir, &REFUSED);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert_contains!(out.stderr, "network.ops[2].model");
    assert_contains!(
        out.stderr,
        "model `lenet` has no trainable parameters, so this UpdateOp has nothing to update: remove the UpdateOp"
    );
    assert!(!out.stdout.contains("step:"), "{}", out.stdout);
    assert_nothing_written(&dir);
}

#[test]
fn logits_under_the_default_cross_entropy_are_refused_in_the_warm_up_with_the_hint() {
    let parent = TempDir::new("ts-logits");
    let dir = setup(&parent, "refused", "logits", |t| t);
    let out = fe_host_in(&dir, &REFUSED);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let error = out.stderr.trim();
    assert_eq!(error.lines().count(), 1, "{error}");
    assert_contains!(error, "CrossEntropy");
    assert_contains!(error, "warm-up, train epoch 1");
    assert_contains!(error, "outside [0, 1], so they are not the probabilities");
    assert_contains!(error, "set `from_logits = true`");
    assert_nothing_written(&dir);

    // Told they are logits, the same model trains.
    let dir = setup(&parent, "told", "logits", |t| {
        t.replace("outputs = \"ce\"", "outputs = \"ce\"\nfrom_logits = true")
    });
    let out = fe_host_in(&dir, &TRAIN);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let ce = crate::util::values(&summary, "train", "ce");
    assert!(ce.len() >= 3 && ce.last() < ce.first(), "train ce {ce:?}");
}
