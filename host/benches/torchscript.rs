//! A TorchScript architecture in fe-host against the same network in PyTorch eager, both
//! training on the same data at batch 128 with Adam. `.venv`'s python scripts the network
//! (`net.pt`) and runs the eager loop; prints samples/s of each and the ratio. The net is small
//! (~50 steps/s on 2 cores), so what fe-host adds per step shows here; `--bench resnet9` trains
//! the scripted ResNet9, whose seconds-long steps hide it.
//!
//! `cargo build --workspace && cargo bench -p fe-host --bench torchscript --profile dev`.
//! Options (environment): FE_BENCH_STEPS (default 60 per round), FE_BENCH_ROUNDS (4),
//! FE_BENCH_THREADS (libtorch threads for both; default one per core).

// A benchmark binary: any failure should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

mod common;
use common::{env_or, fe_host_steps_per_second, median, prepare, write_dataset, MANIFEST};

const BATCH: usize = 128;

/// `script OUT`: saves the scripted network. `eager STEPS THREADS`: trains it eagerly on
/// x.idx/y.idx (min-max scaled, reshuffled each pass) and prints `samples/s <value>`.
const PYTHON: &str = r#"
import struct, sys, time, torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(64 * 5 * 5, 128)
        self.fc2 = nn.Linear(128, 10)
    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.fc1(x.flatten(1)))
        return torch.softmax(self.fc2(x), -1)

def idx(path):
    raw = open(path, 'rb').read()
    dims = raw[3]
    shape = struct.unpack('>' + 'I' * dims, raw[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(raw[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)

torch.manual_seed(0)
if sys.argv[1] == 'script':
    torch.jit.script(Net()).save(sys.argv[2])
else:
    steps, threads, batch = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    x = idx('x.idx').float().unsqueeze(1)
    low, high = x.amin(dim=(1, 2, 3), keepdim=True), x.amax(dim=(1, 2, 3), keepdim=True)
    x = (x - low) / (high - low).clamp_min(1e-7)
    y = idx('y.idx').long()
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=0.001)
    def run(n):
        order, at = torch.randperm(len(x)), 0
        for _ in range(n):
            if at + batch > len(x):
                order, at = torch.randperm(len(x)), 0
            i = order[at:at + batch]
            at += batch
            p = net(x[i])
            loss = -torch.log(p.gather(1, y[i][:, None]).clamp_min(1e-7)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    run(max(steps // 4, 1))
    start = time.perf_counter()
    run(steps)
    print('samples/s', steps * batch / (time.perf_counter() - start))
"#;

fn python(dir: &Path, args: &[&str]) -> String {
    common::run_python(dir, PYTHON, args)
}

fn eager(dir: &Path, steps: usize) -> f64 {
    let threads = tch::get_num_threads().to_string();
    let out = python(
        dir,
        &["eager", &steps.to_string(), &threads, &BATCH.to_string()],
    );
    out.lines()
        .find_map(|l| l.strip_prefix("samples/s "))
        .and_then(|v| v.trim().parse().ok())
        .expect("samples/s from python")
}

fn main() {
    let steps = env_or("FE_BENCH_STEPS", 60);
    let rounds = env_or("FE_BENCH_ROUNDS", 4);
    let plugin_dir = prepare();
    let dir = std::env::temp_dir().join(format!("fe-bench-ts-{}", std::process::id()));
    let _ = write_dataset(&dir);
    python(&dir, &["script", "net.pt"]);
    let manifest_path = dir.join("net.toml");
    let text = MANIFEST
        .replace("batch_size = 32", &format!("batch_size = {BATCH}"))
        .replace(
            "architecture = \"LeNet\"",
            "architecture = \"TorchScript\"\nfile = \"net.pt\"",
        );
    std::fs::write(&manifest_path, text).expect("manifest");

    println!(
        "TorchScript conv net, batch {BATCH}, {steps} steps per round, {rounds} rounds, {} libtorch threads",
        tch::get_num_threads()
    );
    fe_host_steps_per_second(&manifest_path, &plugin_dir, steps / 4);
    // Alternating order, so drifts in machine speed hit both alike; the figure is the median
    // of the per-round ratios.
    let (mut ratios, mut torch, mut host) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (e, f) = if round % 2 == 0 {
            let e = eager(&dir, steps);
            (
                e,
                fe_host_steps_per_second(&manifest_path, &plugin_dir, steps) * BATCH as f64,
            )
        } else {
            let f = fe_host_steps_per_second(&manifest_path, &plugin_dir, steps) * BATCH as f64;
            (eager(&dir, steps), f)
        };
        println!(
            "round {:2}: PyTorch eager {e:8.1} samples/s   fe-host TorchScript {f:8.1} samples/s   ratio {:.3}",
            round + 1,
            f / e
        );
        ratios.push(f / e);
        torch.push(e);
        host.push(f);
    }
    println!(
        "median: PyTorch eager {:.1} samples/s, fe-host TorchScript {:.1} samples/s; fe-host / eager = {:.3} (median of {rounds} paired rounds)",
        median(torch),
        median(host),
        median(ratios)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
