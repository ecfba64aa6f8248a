//! Data-parallel LeNet, global batch 32, on the generated digits the other benches use:
//!
//! * (a) fe-host, 2 ranks × 1 libtorch thread (`run --nproc 2 --threads 1`);
//! * (b) PyTorch DDP over Gloo, the same model, 2 ranks × 1 thread, through `.venv`'s torchrun
//!   (host/benches/ddp.py);
//! * (c) fe-host, 1 process × 2 threads;
//! * (d) one all-reduce of LeNet's gradients over Gloo between 2 ranks (torch.distributed).
//!
//! It also prints how long (a)'s rank 0 waited for its averaged gradients once backward was
//! done (from its `--summary`): the cost that separates (a) from (c).
//!
//! Every configuration is timed as whole processes, wall clock, at two step counts; samples/s
//! is the difference in samples over the difference in time, so start-up (python's imports,
//! plugin loading, rendezvous, warm-up) cancels out and only training steps are compared.
//! Prints samples/s of each, a/b (target ≥ 1.3) and a/c (target ≥ 0.9), medians of paired
//! rounds.
//!
//! `cargo build --workspace && cargo bench -p fe-host --bench ddp --profile dev`.
//! Options (environment): FE_BENCH_STEPS (long run, default 300 steps; the short one is a
//! fifth of it), FE_BENCH_ROUNDS (5: single rounds swing by ±15% on a 2-core machine).

// A benchmark binary: any failure should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

mod common;
use common::{env_or, median, write_dataset, MANIFEST};

const BATCH: usize = 32;
/// Where (a) leaves rank 0's `--summary`, in the bench directory: how long it waited for its
/// gradients after backward.
const SUMMARY: &str = "summary-a.json";

/// (a)'s waits for averaged gradients after backward in its latest run: median and p95 in
/// milliseconds, and their share of the training time.
fn host_waits(dir: &Path, samples_per_second: f64, steps: usize) -> Option<(f64, f64, f64)> {
    let text = std::fs::read_to_string(dir.join(SUMMARY)).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    let waits = &json["data_parallel"]["gradient_waits"];
    let train_seconds = (steps * BATCH) as f64 / samples_per_second;
    Some((
        waits["median_ms"].as_f64()?,
        waits["p95_ms"].as_f64()?,
        waits["total_seconds"].as_f64()? / train_seconds,
    ))
}

/// One way of training LeNet on the dataset in the bench directory.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// (a) `fe-host run --nproc 2 --threads 1`.
    HostRanks,
    /// (b) torchrun + ddp.py, 2 ranks × 1 thread.
    TorchDdp,
    /// (c) `fe-host run --threads 2`.
    HostThreads,
}

impl Setup {
    fn command(self, dir: &Path, steps: usize) -> Command {
        let root = workspace();
        let steps_set = format!("run.train_steps_per_epoch={steps}");
        let mut command = match self {
            Setup::HostRanks | Setup::HostThreads => {
                let mut c = Command::new(env!("CARGO_BIN_EXE_fe-host"));
                c.args(["run", "lenet.toml", "-q", "--set", &steps_set]);
                if self == Setup::HostRanks {
                    c.args(["--nproc", "2", "--threads", "1", "--summary", SUMMARY]);
                } else {
                    c.args(["--threads", "2"]);
                }
                c
            }
            Setup::TorchDdp => {
                let mut c = Command::new(root.join(".venv/bin/torchrun"));
                c.args(["--standalone", "--nproc-per-node", "2"])
                    .arg(root.join("host/benches/ddp.py"))
                    .args(["train", &steps.to_string(), &BATCH.to_string()]);
                c
            }
        };
        command
            .current_dir(dir)
            .env("OMP_NUM_THREADS", "1")
            .env_remove("FE_PLUGIN_PATH");
        command
    }

    fn name(self) -> &'static str {
        match self {
            Setup::HostRanks => "(a) fe-host 2 ranks x 1 thread",
            Setup::TorchDdp => "(b) PyTorch DDP 2 ranks x 1 thread",
            Setup::HostThreads => "(c) fe-host 1 process x 2 threads",
        }
    }

    /// Wall-clock seconds of a run of `steps` steps, or why it failed.
    fn seconds(self, dir: &Path, steps: usize) -> Result<f64, String> {
        let start = Instant::now();
        let out = self
            .command(dir, steps)
            .output()
            .map_err(|e| format!("cannot start: {e}"))?;
        let elapsed = start.elapsed().as_secs_f64();
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            return Err(last.unwrap_or("(no output)").to_owned());
        }
        Ok(elapsed)
    }

    /// Global samples per second of training steps alone: runs of `short` and `long` steps,
    /// and the difference. `None` when the long run was not clearly the longer (a stall of
    /// the machine during the short one): that round says nothing about training speed.
    fn samples_per_second(
        self,
        dir: &Path,
        short: usize,
        long: usize,
    ) -> Result<Option<f64>, String> {
        let a = self.seconds(dir, short)?;
        let b = self.seconds(dir, long)?;
        // The long run trains 4x the short run's steps more: under a tenth of the short run's
        // time for them is a measurement gone wrong, not a speed.
        if b - a < a / 10.0 {
            return Ok(None);
        }
        Ok(Some(((long - short) * BATCH) as f64 / (b - a)))
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// (d): rank 0's line from ddp.py's all-reduce timing.
fn all_reduce(dir: &Path) -> String {
    let out = Command::new(workspace().join(".venv/bin/torchrun"))
        .args(["--standalone", "--nproc-per-node", "2"])
        .arg(workspace().join("host/benches/ddp.py"))
        .args(["allreduce", "200"])
        .current_dir(dir)
        .env("OMP_NUM_THREADS", "1")
        .output()
        .expect(".venv/bin/torchrun");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    stdout
        .lines()
        .find(|l| l.starts_with("allreduce "))
        .expect("the all-reduce timing from ddp.py")
        .to_owned()
}

fn main() {
    let long = env_or("FE_BENCH_STEPS", 300);
    let short = (long / 5).max(1);
    let rounds = env_or("FE_BENCH_ROUNDS", 5);
    let dir = std::env::temp_dir().join(format!("fe-bench-ddp-{}", std::process::id()));
    let _ = write_dataset(&dir);
    std::fs::write(dir.join("lenet.toml"), MANIFEST).expect("manifest");
    println!(
        "LeNet, global batch {BATCH}, {short} and {long} steps per timing, {rounds} rounds; cores: {}",
        std::thread::available_parallelism().map_or(1, usize::from)
    );

    let setups = [Setup::HostRanks, Setup::TorchDdp, Setup::HostThreads];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
    let mut failed: Vec<Option<String>> = vec![None; setups.len()];
    let (mut over_ddp, mut over_threads) = (Vec::new(), Vec::new());
    let mut waits: Vec<(f64, f64, f64)> = Vec::new();
    // One untimed run of each first: the first start of a setup reads libtorch and python
    // from disk, which made a first round's short run as slow as its long one.
    for (i, setup) in setups.iter().enumerate() {
        if let Err(why) = setup.seconds(&dir, short) {
            failed[i] = Some(why);
        }
    }
    for round in 0..rounds {
        // A different order each round, so drifts in machine speed hit every setup alike.
        let mut order: Vec<usize> = (0..setups.len()).collect();
        order.rotate_left(round % setups.len());
        let mut this_round = [None; 3];
        for i in order {
            if failed[i].is_some() {
                continue;
            }
            match setups[i].samples_per_second(&dir, short, long) {
                Ok(Some(rate)) => {
                    rates[i].push(rate);
                    this_round[i] = Some(rate);
                    if setups[i] == Setup::HostRanks {
                        waits.extend(host_waits(&dir, rate, long));
                    }
                }
                Ok(None) => {}
                Err(why) => failed[i] = Some(why),
            }
        }
        let show = |r: Option<f64>| r.map_or("     n/a".to_owned(), |r| format!("{r:8.1}"));
        println!(
            "round {:2}: samples/s (a) {}  (b) {}  (c) {}",
            round + 1,
            show(this_round[0]),
            show(this_round[1]),
            show(this_round[2])
        );
        if let [Some(a), Some(b), Some(c)] = this_round {
            over_ddp.push(a / b);
            over_threads.push(a / c);
        }
    }
    for (i, setup) in setups.iter().enumerate() {
        match &failed[i] {
            Some(why) => println!("{}: did not run: {why}", setup.name()),
            None => println!(
                "{}: {:.1} samples/s (median)",
                setup.name(),
                median(rates[i].clone())
            ),
        }
    }
    if over_ddp.is_empty() {
        println!("a/b and a/c: n/a (a setup did not run)");
    } else {
        println!(
            "a/b = {:.3} (target >= 1.3), a/c = {:.3} (target >= 0.9): medians of {} paired rounds",
            median(over_ddp.clone()),
            median(over_threads),
            over_ddp.len()
        );
    }
    if !rates[1].is_empty() && !rates[2].is_empty() {
        println!(
            "c/b = {:.3} (fe-host threads over PyTorch DDP ranks)",
            median(rates[2].clone()) / median(rates[1].clone())
        );
    }
    if !waits.is_empty() {
        println!(
            "(a) rank 0 waited for gradients after backward: median {:.3} ms, p95 {:.3} ms, {:.1}% of training (medians over rounds)",
            median(waits.iter().map(|w| w.0).collect()),
            median(waits.iter().map(|w| w.1).collect()),
            100.0 * median(waits.iter().map(|w| w.2).collect())
        );
    }
    println!("(d) {} (Gloo, 2 ranks, median)", all_reduce(&dir));
    let _ = std::fs::remove_dir_all(&dir);
}
