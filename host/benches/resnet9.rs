//! FastEstimator's ResNet9 on CIFAR-shaped data, batch 128: fe-host (manifest, plugin model,
//! pipeline, Adam) against the same network trained in PyTorch eager by `.venv`'s python, in
//! one run. Prints samples/s of each and the ratio.
//!
//! Both sides train on the same preprocessed data (generated CIFAR-shaped images, normalised
//! per channel, channels first, float32): fe-host reads it from an IDX file through its
//! pipeline, PyTorch indexes a tensor in memory. The PyTorch model is the reference definition
//! the zoo tests load weights into (tests/fixtures/zoo_reference.py).
//!
//! `cargo build --workspace && cargo bench -p fe-host --bench resnet9 --profile dev`.
//! Options (environment): FE_BENCH_STEPS (steps per round, default 10), FE_BENCH_ROUNDS (3),
//! FE_BENCH_THREADS (libtorch threads on both sides; default one per core),
//! FE_BENCH_WIDTH (ResNet9's first width, default FastEstimator's 64).

// A benchmark binary: any failure should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use tch::{Kind, Tensor};

mod common;
use common::{env_or, fe_host_steps_per_second, median, prepare};

const BATCH: usize = 128;
const SAMPLES: usize = 2048;
const MEAN: [f32; 3] = [0.4914, 0.4822, 0.4465];
const STD: [f32; 3] = [0.2471, 0.2435, 0.2616];

fn manifest(width: usize) -> String {
    format!(
        r#"
[run]
epochs = 1
seed = 42
log_steps = 0

[pipeline]
batch_size = {BATCH}

[pipeline.data.train]
type = "idx"
files = {{ x = "x.idx", y = "y.idx" }}

[[models]]
name = "resnet9"
architecture = "ResNet9"
width = {width}
optimizer = {{ type = "adam", lr = 0.001 }}

[[network.ops]]
op = "ModelOp"
model = "resnet9"
inputs = "x"
outputs = "y_pred"

[[network.ops]]
op = "CrossEntropy"
inputs = ["y_pred", "y"]
outputs = "ce"

[[network.ops]]
op = "UpdateOp"
model = "resnet9"
loss = "ce"
"#
    )
}

/// The PyTorch side: FastEstimator's training step (softmax output, cross-entropy on the
/// probabilities, Adam) over shuffled batches; prints `samples/s <value>` after a warm-up.
const PYTORCH: &str = r#"
import struct, sys, time
import torch
sys.path.insert(0, sys.argv[1])
from zoo_reference import ResNet9
data, steps, threads, width, batch = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(threads)
torch.manual_seed(42)
def idx(path, dtype):
    raw = open(path, "rb").read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    body = torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8)
    width = torch.tensor([], dtype=dtype).element_size()
    # IDX is big-endian: reverse each value's bytes (on this little-endian machine).
    return body.view(-1, width).flip(1).contiguous().view(dtype).reshape(dims)
"#;

/// Writes the preprocessed data as IDX files (float32 images `[N, 3, 32, 32]`, uint8 labels).
fn write_dataset(dir: &Path) {
    let arrays = fe_host::datagen::cifar::split(7, 0, SAMPLES);
    let images = Tensor::from_slice(&arrays[0].bytes)
        .reshape([SAMPLES as i64, 32, 32, 3])
        .to_kind(Kind::Float)
        / 255.0;
    let mean = Tensor::from_slice(&MEAN);
    let std = Tensor::from_slice(&STD);
    let images = ((images - mean) / std).permute([0, 3, 1, 2]).contiguous();
    let values = Vec::<f32>::try_from(images.flatten(0, -1)).unwrap();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    std::fs::create_dir_all(dir).unwrap();
    let n = SAMPLES as u32;
    fe_host::pipeline::idx::write(&dir.join("x.idx"), Kind::Float, &[n, 3, 32, 32], &bytes)
        .unwrap();
    fe_host::pipeline::idx::write(&dir.join("y.idx"), Kind::Uint8, &[n], &arrays[1].bytes).unwrap();
}

fn pytorch_samples_per_second(script: &Path, data: &Path, steps: usize, width: usize) -> f64 {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(root.join(".venv/bin/python"))
        .arg(script)
        .arg(root.join("tests/fixtures"))
        .arg(data)
        .arg(steps.to_string())
        .arg(tch::get_num_threads().to_string())
        .arg(width.to_string())
        .arg(BATCH.to_string())
        .output()
        .expect("run .venv/bin/python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "PyTorch side failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("samples/s "))
        .and_then(|v| v.trim().parse().ok())
        .expect("samples/s line")
}

fn main() {
    let steps = env_or("FE_BENCH_STEPS", 10);
    let rounds = env_or("FE_BENCH_ROUNDS", 3);
    let width = env_or("FE_BENCH_WIDTH", 64);
    let plugin_dir = prepare();
    let dir = std::env::temp_dir().join(format!("fe-bench-resnet9-{}", std::process::id()));
    write_dataset(&dir);
    let manifest_path = dir.join("resnet9.toml");
    std::fs::write(&manifest_path, manifest(width)).unwrap();
    let script = dir.join("pytorch_resnet9.py");
    std::fs::write(&script, format!("{PYTORCH}{PYTORCH_LOOP}")).unwrap();

    println!(
        "ResNet9 (width {width}), batch {BATCH}, {steps} steps per round, {rounds} rounds, {} libtorch threads",
        tch::get_num_threads()
    );
    // Warm the allocator and the plugin loader.
    fe_host_steps_per_second(&manifest_path, &plugin_dir, 2);
    let (mut host, mut torch, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternating order, so drifts in machine speed hit both alike.
        let (f, p) = if round % 2 == 0 {
            let f = fe_host_steps_per_second(&manifest_path, &plugin_dir, steps) * BATCH as f64;
            (f, pytorch_samples_per_second(&script, &dir, steps, width))
        } else {
            let p = pytorch_samples_per_second(&script, &dir, steps, width);
            (
                fe_host_steps_per_second(&manifest_path, &plugin_dir, steps) * BATCH as f64,
                p,
            )
        };
        println!(
            "round {:2}: fe-host {f:7.1} samples/s   PyTorch eager {p:7.1} samples/s   ratio {:.3}",
            round + 1,
            f / p
        );
        host.push(f);
        torch.push(p);
        ratios.push(f / p);
    }
    println!(
        "median: fe-host {:.1} samples/s, PyTorch eager {:.1} samples/s; fe-host / PyTorch = {:.3} (median of {rounds} paired rounds)",
        median(host),
        median(torch),
        median(ratios)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The timed loop of the PyTorch side (after `PYTORCH`'s set-up).
const PYTORCH_LOOP: &str = r#"
x = idx(f"{data}/x.idx", torch.float32)
y = idx(f"{data}/y.idx", torch.uint8).long()
model = ResNet9(width=width)
model.train()
optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
def step(indices):
    optimizer.zero_grad()
    p = model(x[indices]).clamp_min(torch.finfo(torch.float32).tiny)
    loss = torch.nn.functional.nll_loss(p.log(), y[indices])
    loss.backward()
    optimizer.step()
    return loss
def run(count):
    order = torch.randperm(x.shape[0])
    for i in range(count):
        start = (i * batch) % (x.shape[0] - batch + 1)
        step(order[start:start + batch])
run(2)
start = time.perf_counter()
run(steps)
print(f"samples/s {steps * batch / (time.perf_counter() - start)}")
"#;
