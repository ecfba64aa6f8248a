//! FastEstimator's ResNet9 on CIFAR-shaped data, batch 128, in one run: fe-host with the zoo's
//! ResNet9 (plugin model), fe-host with the same network as a TorchScript architecture (the
//! reference definition scripted by `.venv`'s python), and the reference trained in PyTorch
//! eager by `.venv`'s python. Each round measures all three (manifest, pipeline, Adam on the
//! fe-host side); prints samples/s and the median over rounds of zoo / eager and
//! TorchScript / eager.
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

/// The PyTorch side, run in the data directory. `script WIDTH OUT`: saves the reference ResNet9
/// scripted by `torch.jit.script` (the TorchScript architecture fe-host trains). `eager WIDTH
/// STEPS THREADS BATCH`: FastEstimator's training step (softmax output, cross-entropy on the
/// probabilities, Adam) over shuffled batches; prints `samples/s <value>` after a warm-up.
const PYTORCH: &str = r#"
import struct, sys, time
import torch
sys.path.insert(0, sys.argv[1])
from zoo_reference import ResNet9
mode, width = sys.argv[2], int(sys.argv[3])
torch.manual_seed(42)
if mode == "script":
    torch.jit.script(ResNet9(width=width)).save(sys.argv[4])
    sys.exit(0)
steps, threads, batch = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(threads)
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

/// Runs the PyTorch script with `args` (after the fixtures' directory) in `data`; its stdout.
fn python(script: &Path, data: &Path, args: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(root.join(".venv/bin/python"))
        .arg(script)
        .arg(root.join("tests/fixtures"))
        .args(args)
        .current_dir(data)
        .output()
        .expect("run .venv/bin/python");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "PyTorch side failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn pytorch_samples_per_second(script: &Path, data: &Path, steps: usize, width: usize) -> f64 {
    let threads = tch::get_num_threads().to_string();
    let (steps, width, batch) = (steps.to_string(), width.to_string(), BATCH.to_string());
    python(script, data, &["eager", &width, &steps, &threads, &batch])
        .lines()
        .find_map(|l| l.strip_prefix("samples/s "))
        .and_then(|v| v.trim().parse().ok())
        .expect("samples/s line")
}

/// What one round measures.
#[derive(Clone, Copy)]
enum Side {
    Zoo,
    TorchScript,
    Eager,
}

fn main() {
    let steps = env_or("FE_BENCH_STEPS", 10);
    let rounds = env_or("FE_BENCH_ROUNDS", 3);
    let width = env_or("FE_BENCH_WIDTH", 64);
    let plugin_dir = prepare();
    let dir = std::env::temp_dir().join(format!("fe-bench-resnet9-{}", std::process::id()));
    write_dataset(&dir);
    let zoo_manifest = dir.join("resnet9.toml");
    std::fs::write(&zoo_manifest, manifest(width)).unwrap();
    let script = dir.join("pytorch_resnet9.py");
    std::fs::write(&script, format!("{PYTORCH}{PYTORCH_LOOP}")).unwrap();
    python(&script, &dir, &["script", &width.to_string(), "resnet9.pt"]);
    let ts_manifest = dir.join("resnet9_torchscript.toml");
    let ts_text = manifest(width).replace(
        &format!("architecture = \"ResNet9\"\nwidth = {width}"),
        "architecture = \"TorchScript\"\nfile = \"resnet9.pt\"",
    );
    assert!(ts_text.contains("TorchScript"));
    std::fs::write(&ts_manifest, ts_text).unwrap();

    println!(
        "ResNet9 (width {width}), batch {BATCH}, {steps} steps per round, {rounds} rounds, {} libtorch threads",
        tch::get_num_threads()
    );
    // Warm the allocator, the plugin loader and the TorchScript executor's first runs.
    fe_host_steps_per_second(&zoo_manifest, &plugin_dir, 2);
    fe_host_steps_per_second(&ts_manifest, &plugin_dir, 2);
    let measure = |side: Side| match side {
        Side::Zoo => fe_host_steps_per_second(&zoo_manifest, &plugin_dir, steps) * BATCH as f64,
        Side::TorchScript => {
            fe_host_steps_per_second(&ts_manifest, &plugin_dir, steps) * BATCH as f64
        }
        Side::Eager => pytorch_samples_per_second(&script, &dir, steps, width),
    };
    let (mut zoo, mut ts, mut torch) = (Vec::new(), Vec::new(), Vec::new());
    let (mut zoo_ratios, mut ts_ratios) = (Vec::new(), Vec::new());
    let order = [Side::Zoo, Side::TorchScript, Side::Eager];
    for round in 0..rounds {
        // A different side goes first each round, so drifts in machine speed hit all alike.
        let mut rates = [0.0; 3];
        for i in 0..order.len() {
            let side = order[(round + i) % order.len()];
            rates[side as usize] = measure(side);
        }
        let [z, t, p] = rates;
        println!(
            "round {:2}: fe-host zoo {z:7.1}   fe-host TorchScript {t:7.1}   PyTorch eager {p:7.1} samples/s   zoo/eager {:.3}   TorchScript/eager {:.3}",
            round + 1,
            z / p,
            t / p
        );
        zoo.push(z);
        ts.push(t);
        torch.push(p);
        zoo_ratios.push(z / p);
        ts_ratios.push(t / p);
    }
    println!(
        "median: fe-host zoo {:.1}, fe-host TorchScript {:.1}, PyTorch eager {:.1} samples/s",
        median(zoo),
        median(ts),
        median(torch)
    );
    println!(
        "median of {rounds} paired rounds: fe-host zoo / PyTorch eager = {:.3}, fe-host TorchScript / PyTorch eager = {:.3}",
        median(zoo_ratios),
        median(ts_ratios)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The timed loop of the PyTorch side (after `PYTORCH`'s set-up).
const PYTORCH_LOOP: &str = r#"
x = idx("x.idx", torch.float32)
y = idx("y.idx", torch.uint8).long()
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
