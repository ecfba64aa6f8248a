//! torchvision's resnet18 (num_classes 10, 32×32 inputs), scripted with `torch.jit.script`,
//! trained 5 steps in fe-host as a TorchScript architecture and 5 steps in plain PyTorch
//! (the eager torchvision module, started from the scripted file's weights) on the same
//! batches: the final weights, batch-norm statistics included, are bit-identical under SGD
//! with momentum and weight decay and under (fused) Adam. Needs torchvision in `.venv`
//! (scripts/test.sh installs it).

use std::path::Path;

use crate::util::{fe_host_in, TempDir};

/// `make`: writes `net.pt` (the scripted resnet18, seed 0) and 5 batches of 32 random images
/// and labels (`x.npy`, `y.npy`). `train OPTIMIZER KWARGS WEIGHTS`: trains the eager resnet18
/// from `net.pt`'s state 5 steps on those batches in order, then compares every entry of its
/// state dict with fe-host's saved weights and prints `entries N differing D max-diff M`.
const PYTHON: &str = r#"
import json, struct, sys
import numpy as np, torch, torchvision
import torch.nn.functional as F

torch.set_num_threads(2)
if sys.argv[1] == 'make':
    torch.manual_seed(0)
    torch.jit.script(torchvision.models.resnet18(num_classes=10)).save('net.pt')
    rng = np.random.default_rng(0)
    np.save('x.npy', rng.standard_normal((160, 3, 32, 32), dtype=np.float32))
    np.save('y.npy', rng.integers(0, 10, 160, dtype=np.int64))
    sys.exit(0)

def safetensors(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    kinds = {'F32': torch.float32, 'I64': torch.int64}
    out = {}
    for name, info in header.items():
        if name == '__metadata__':
            continue
        start, end = info['data_offsets']
        data = bytearray(raw[8 + n + start:8 + n + end])
        out[name] = torch.frombuffer(data, dtype=kinds[info['dtype']]).reshape(info['shape'])
    return out

net = torchvision.models.resnet18(num_classes=10)
net.load_state_dict(torch.jit.load('net.pt').state_dict())
net.train()
optimizer = getattr(torch.optim, sys.argv[2])(net.parameters(), **json.loads(sys.argv[3]))
x, y = torch.from_numpy(np.load('x.npy')), torch.from_numpy(np.load('y.npy'))
for step in range(5):
    batch = slice(32 * step, 32 * (step + 1))
    optimizer.zero_grad()
    F.cross_entropy(net(x[batch]), y[batch]).backward()
    optimizer.step()
ours = safetensors(sys.argv[4])
theirs = net.state_dict()
assert sorted(ours) == sorted(theirs), (sorted(set(ours) ^ set(theirs)))
differing, largest = 0, 0.0
for name, value in theirs.items():
    if not torch.equal(value, ours[name]):
        differing += 1
        largest = max(largest, (value.double() - ours[name].double()).abs().max().item())
        print('differs', name, (value.double() - ours[name].double()).abs().max().item())
print('entries', len(theirs), 'differing', differing, 'max-diff', largest)
"#;

/// Runs the python helper with `args` in `dir`; returns its stdout.
fn python(dir: &Path, args: &[&str]) -> String {
    crate::util::run_python_helper(dir, PYTHON, args)
}

/// The scripted resnet18 on `x.npy`/`y.npy` in order (no shuffling), 5 steps of 32, logits
/// into `CrossEntropy` (`from_logits`), updated by `optimizer`.
fn manifest(optimizer: &str) -> String {
    format!(
        r#"[run]
epochs = 1
seed = 0
log_steps = 1
train_steps_per_epoch = 5
threads = 2

[pipeline]
batch_size = 32
shuffle = false

[pipeline.data.train]
type = "npy"
files = {{ x = "x.npy", y = "y.npy" }}

[[models]]
name = "resnet18"
architecture = "TorchScript"
file = "net.pt"
optimizer = {optimizer}

[[network.ops]]
op = "ModelOp"
model = "resnet18"
inputs = "x"
outputs = "y_pred"

[[network.ops]]
op = "CrossEntropy"
inputs = ["y_pred", "y"]
outputs = "ce"
from_logits = true

[[network.ops]]
op = "UpdateOp"
model = "resnet18"
loss = "ce"
"#
    )
}

/// Trains in fe-host and in PyTorch; returns the helper's comparison line.
fn compare(tag: &str, optimizer: &str, torch_class: &str, kwargs: &str) -> String {
    let dir = TempDir::new(tag);
    python(dir.path(), &["make"]);
    dir.write("m.toml", &manifest(optimizer));
    let run = fe_host_in(
        dir.path(),
        &["run", "m.toml", "-q", "--save-weights", "weights"],
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let saved = dir.path().join("weights/resnet18.safetensors");
    assert!(
        saved.is_file(),
        "{:?}",
        crate::util::file_names(&dir.path().join("weights"))
    );
    python(
        dir.path(),
        &["train", torch_class, kwargs, &saved.to_string_lossy()],
    )
}

fn assert_identical(out: &str) {
    let last = out.lines().last().unwrap_or_default();
    // 62 parameters, 40 batch-norm statistics and 20 batch counters.
    assert!(last.starts_with("entries 122 "), "{out}");
    assert!(last.contains(" differing 0 "), "{out}");
}

#[test]
fn resnet18_trained_with_sgd_momentum_and_weight_decay_ends_bit_identical_to_pytorch() {
    let out = compare(
        "tv-resnet-sgd",
        "{ type = \"sgd\", lr = 0.05, momentum = 0.9, weight_decay = 5e-4 }",
        "SGD",
        r#"{"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}"#,
    );
    assert_identical(&out);
}

#[test]
fn resnet18_trained_with_fused_adam_ends_bit_identical_to_pytorch() {
    let out = compare(
        "tv-resnet-adam",
        "{ type = \"adam\", lr = 0.001 }",
        "Adam",
        r#"{"lr": 0.001, "fused": true}"#,
    );
    assert_identical(&out);
}
