//! Checkpoint cost for LeNet + Adam: a full fe-host checkpoint (every file fsynced, hashed,
//! renamed into place, `latest` replaced) against a raw safetensors write of the same tensors,
//! with and without fsync, and the time to resume from it.
//!
//! `cargo build --workspace && cargo bench -p fe-host --bench checkpoint --profile dev`.
//! FE_BENCH_ROUNDS (default 10) sets the number of saves timed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use fe_host::checkpoint::{store, Cursor};
use fe_host::estimator::checkpointing::ResumeOptions;
use fe_host::estimator::{Estimator, RunOptions};
use fe_host::manifest::{CheckpointConfig, Manifest};
use fe_host::plugins::{load_registry, search_path, Registry};
use tch::{Device, Tensor};

mod common;
use common::{env_or, median, write_dataset, MANIFEST};

fn estimator(manifest: &Manifest, registry: &Registry) -> Estimator {
    let options = RunOptions {
        quiet: true,
        out: Box::new(std::io::sink()),
        progress: false,
    };
    Estimator::build(manifest, registry, Device::Cpu, options).expect("build")
}

fn raw_write(path: &Path, tensors: &[(String, Tensor)], sync: bool) {
    let bytes = fe_host::system::tensors::serialize(tensors).unwrap();
    let mut file = std::fs::File::create(path).unwrap();
    file.write_all(&bytes).unwrap();
    if sync {
        file.sync_all().unwrap();
    }
}

/// Trains `text` for a few steps, then times checkpoints of it against raw writes of the same
/// tensors, and resuming from it.
fn measure(label: &str, dir: &Path, text: &str, registry: &Registry, rounds: usize) {
    let manifest_path = dir.join(format!("{label}.toml"));
    std::fs::write(&manifest_path, text).unwrap();
    let mut manifest = Manifest::load(&manifest_path).unwrap();
    manifest.run.train_steps_per_epoch = Some(3);
    manifest.run.warmup = false;
    let checkpoints = dir.join(format!("checkpoints-{label}"));
    manifest.checkpoint = Some(CheckpointConfig {
        dir: checkpoints.clone(),
        every_epochs: Some(1),
        every_steps: None,
        keep_last: None,
        keep_best: None,
        monitor: None,
        maximize: false,
    });
    let mut trained = estimator(&manifest, registry);
    trained.fit().expect("fit");

    // The same tensors a checkpoint holds: weights, buffers and Adam's moments.
    let model = &trained.network.models[0];
    let mut tensors: Vec<(String, Tensor)> = model
        .named_variables()
        .map(|(n, t)| (n.to_owned(), t.detach()))
        .collect();
    for (name, t) in model.optimizers[0].optimizer.tensor_state() {
        tensors.push((format!("optim/{name}"), t));
    }
    let bytes: i64 = tensors.iter().map(|(_, t)| t.numel() as i64 * 4).sum();

    let (mut full, mut raw_sync, mut raw) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let started = Instant::now();
        let files = trained
            .capture(Cursor::EpochEnd { epoch: 1 }, 100 + round as u64)
            .unwrap();
        store::write(&checkpoints, &format!("bench-{round}"), &files).unwrap();
        full.push(started.elapsed().as_secs_f64());
        if round + 1 < rounds {
            store::delete(&checkpoints, &format!("bench-{round}")).unwrap();
        }

        let path = dir.join(format!("raw-{label}.safetensors"));
        let started = Instant::now();
        raw_write(&path, &tensors, true);
        raw_sync.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        raw_write(&path, &tensors, false);
        raw.push(started.elapsed().as_secs_f64());
        let _ = std::fs::remove_file(&path);
    }
    let (full, raw_sync, raw) = (median(full), median(raw_sync), median(raw));
    println!(
        "{label} + Adam checkpoint ({:.1} MB of tensors), median of {rounds}:",
        bytes as f64 / 1e6
    );
    println!(
        "  fe-host checkpoint (fsync, sha256, atomic rename): {:8.2} ms",
        full * 1e3
    );
    println!(
        "  raw safetensors write + fsync:                     {:8.2} ms  (fe-host / raw = {:.2})",
        raw_sync * 1e3,
        full / raw_sync
    );
    println!(
        "  raw safetensors write, no fsync:                   {:8.2} ms  (fe-host / raw = {:.2})",
        raw * 1e3,
        full / raw
    );
    let mut resume = Vec::new();
    for _ in 0..rounds.min(5) {
        let mut fresh = estimator(&manifest, registry);
        let started = Instant::now();
        fresh
            .resume(&checkpoints, ResumeOptions::default())
            .unwrap();
        resume.push(started.elapsed().as_secs_f64());
    }
    println!(
        "  resume (verify hashes, restore everything):        {:8.2} ms",
        median(resume) * 1e3
    );
}

fn main() {
    let rounds = env_or("FE_BENCH_ROUNDS", 10);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = std::env::temp_dir().join(format!("fe-bench-ckpt-{}", std::process::id()));
    let _ = write_dataset(&dir);
    let search = search_path(&[], &[root.join("target/debug")], None, None);
    let registry = load_registry(&search, &Default::default()).expect("plugins");
    measure("LeNet", &dir, MANIFEST, &registry, rounds);
    // A larger model, where the bytes rather than the number of files set the cost.
    let large = MANIFEST.replace(
        "architecture = \"LeNet\"",
        "architecture = \"MLP\"\ninputs = 784\nhidden = [4096, 4096]\nsoftmax = true",
    );
    measure("MLP-4096x2", &dir, &large, &registry, rounds.min(3));
    let _ = std::fs::remove_dir_all(&dir);
}
