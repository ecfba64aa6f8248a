//! torchvision's resnet18 (num_classes 10) at 32×32, batch 32, SGD with momentum, in one run:
//! fe-host training the `torch.jit.script`ed module as a TorchScript architecture, PyTorch
//! eager training torchvision's module (`.venv`'s python), and — to split the difference
//! between fe-host and TorchScript itself — the same scripted file trained by python's
//! `torch.jit.load` the way fe-host runs it (graph executor optimisation off). Same data
//! (random images in memory / NPY), same threads, and the same allocator settings on every
//! side: fe-host's `runtime::tune_malloc` mallopt calls are made in python too through ctypes
//! (with `FE_MALLOC_TUNING=0`, neither side makes them). Prints samples/s per round and the
//! medians of the paired ratios.
//!
//! `cargo build --workspace && cargo bench -p fe-host --bench resnet18 --profile dev`.
//! Needs torchvision in `.venv` (scripts/test.sh installs it). Options (environment):
//! FE_BENCH_STEPS (steps per round, default 60: fe-host counts
//! its pipeline start and first steps, which shorter rounds let show), FE_BENCH_ROUNDS (4), FE_BENCH_THREADS
//! (libtorch threads on every side; default one per core), FE_BENCH_PROFILE=1 (also print
//! torch.autograd.profiler's top ops of the eager and scripted python loops).

// A benchmark binary: any failure should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

mod common;
use common::{env_or, fe_host_steps_per_second, median, prepare};

const BATCH: usize = 32;
const SAMPLES: usize = 1024;

/// `make N`: net.pt (scripted resnet18, seed 0), x.npy/y.npy (N random samples).
/// `eager|scripted STEPS THREADS TUNE PROFILE`: trains and prints `samples/s <value>`.
const PYTHON: &str = r#"
import ctypes, sys, time
import numpy as np, torch, torchvision
import torch.nn.functional as F

if sys.argv[1] == 'make':
    torch.manual_seed(0)
    torch.jit.script(torchvision.models.resnet18(num_classes=10)).save('net.pt')
    rng = np.random.default_rng(0)
    n = int(sys.argv[2])
    np.save('x.npy', rng.standard_normal((n, 3, 32, 32), dtype=np.float32))
    np.save('y.npy', rng.integers(0, 10, n, dtype=np.int64))
    sys.exit(0)

kind, steps, threads, tune, profile = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == '1', sys.argv[5] == '1'
if tune:
    # fe-host's runtime::tune_malloc, call for call: M_MMAP_THRESHOLD (-3), M_TRIM_THRESHOLD (-1).
    libc = ctypes.CDLL('libc.so.6')
    libc.mallopt(-3, 256 << 20)
    libc.mallopt(-1, 512 << 20)
torch.set_num_threads(threads)
torch.manual_seed(0)
if kind == 'eager':
    net = torchvision.models.resnet18(num_classes=10)
else:
    torch._C._set_graph_executor_optimize(False)
    net = torch.jit.load('net.pt')
net.train()
x, y = torch.from_numpy(np.load('x.npy')), torch.from_numpy(np.load('y.npy'))
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
batch = 32
def run(n):
    order, at = torch.randperm(len(x)), 0
    for _ in range(n):
        if at + batch > len(x):
            order, at = torch.randperm(len(x)), 0
        i = order[at:at + batch]
        at += batch
        loss = F.cross_entropy(net(x[i]), y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
run(max(steps // 4, 2))
start = time.perf_counter()
run(steps)
print('samples/s', steps * batch / (time.perf_counter() - start))
if profile:
    with torch.autograd.profiler.profile() as prof:
        run(3)
    print(prof.key_averages().table(sort_by='self_cpu_time_total', row_limit=12))
"#;

const MANIFEST: &str = r#"
[run]
epochs = 1
seed = 0
log_steps = 0

[pipeline]
batch_size = 32

[pipeline.data.train]
type = "npy"
files = { x = "x.npy", y = "y.npy" }

[[models]]
name = "resnet18"
architecture = "TorchScript"
file = "net.pt"
optimizer = { type = "sgd", lr = 0.01, momentum = 0.9, weight_decay = 5e-4 }

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
"#;

fn python(dir: &Path, args: &[&str]) -> String {
    common::run_python(dir, PYTHON, args)
}

/// samples/s of python's `kind` loop (`eager` or `scripted`).
fn python_rate(dir: &Path, kind: &str, steps: usize, tuned: bool, profile: bool) -> f64 {
    let threads = tch::get_num_threads().to_string();
    let flag = |on: bool| if on { "1" } else { "0" };
    let out = python(
        dir,
        &[
            kind,
            &steps.to_string(),
            &threads,
            flag(tuned),
            flag(profile),
        ],
    );
    if profile {
        println!("--- {kind} python, autograd profiler over 3 steps ---\n{out}");
    }
    out.lines()
        .find_map(|l| l.strip_prefix("samples/s "))
        .and_then(|v| v.trim().parse().ok())
        .expect("samples/s from python")
}

fn main() {
    let steps = env_or("FE_BENCH_STEPS", 60);
    let rounds = env_or("FE_BENCH_ROUNDS", 4);
    let profile = std::env::var("FE_BENCH_PROFILE").is_ok_and(|v| v == "1");
    let plugin_dir = prepare();
    // prepare() tuned the allocator unless FE_MALLOC_TUNING=0 (again here, to learn whether it
    // did: the same calls, idempotent); python makes the calls fe-host made.
    let tuned = fe_host::runtime::tune_malloc();
    let dir = std::env::temp_dir().join(format!("fe-bench-resnet18-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    python(&dir, &["make", &SAMPLES.to_string()]);
    let manifest_path = dir.join("resnet18.toml");
    std::fs::write(&manifest_path, MANIFEST).unwrap();
    println!(
        "torchvision resnet18, 32x32, batch {BATCH}, {steps} steps per round, {rounds} rounds, {} libtorch threads, allocator tuning {}",
        tch::get_num_threads(),
        if tuned { "on both sides" } else { "off on both sides" }
    );
    // Warm-up: the first TorchScript runs and the page cache.
    fe_host_steps_per_second(&manifest_path, &plugin_dir, 3);
    let fe_host = || fe_host_steps_per_second(&manifest_path, &plugin_dir, steps) * BATCH as f64;
    let (mut host, mut eager, mut scripted) = (Vec::new(), Vec::new(), Vec::new());
    let (mut vs_eager, mut vs_scripted) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Rotating order, so drifts in machine speed hit all three alike.
        let mut measured = [0.0; 3];
        for slot in 0..3 {
            let which = (slot + round) % 3;
            measured[which] = match which {
                0 => fe_host(),
                1 => python_rate(&dir, "eager", steps, tuned, profile && round == 0),
                _ => python_rate(&dir, "scripted", steps, tuned, profile && round == 0),
            };
        }
        let [f, e, s] = measured;
        println!(
            "round {:2}: fe-host {f:6.1}  PyTorch eager {e:6.1}  PyTorch scripted {s:6.1} samples/s   fe-host/eager {:.3}  fe-host/scripted {:.3}",
            round + 1,
            f / e,
            f / s
        );
        host.push(f);
        eager.push(e);
        scripted.push(s);
        vs_eager.push(f / e);
        vs_scripted.push(f / s);
    }
    let spread = |v: &[f64]| {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(0.0, f64::max);
        format!("{min:.3}-{max:.3}")
    };
    println!(
        "median: fe-host {:.1}, PyTorch eager {:.1}, PyTorch scripted {:.1} samples/s; fe-host / eager = {:.3} ({}), fe-host / scripted = {:.3} ({}) over {rounds} rounds",
        median(host),
        median(eager),
        median(scripted),
        median(vs_eager.clone()),
        spread(&vs_eager),
        median(vs_scripted.clone()),
        spread(&vs_scripted)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
