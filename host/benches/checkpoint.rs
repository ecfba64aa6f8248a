//! Checkpoint cost for LeNet + Adam: how long training waits for a checkpoint (the snapshot;
//! the background writer does the rest), how long until it is durable (every file hashed and
//! flushed, renamed into place, `latest` replaced), the same written in the foreground, against
//! a raw safetensors write of the same tensors with and without fsync; and the time to resume.
//!
//! `cargo build --workspace && cargo bench -p fe-host --bench checkpoint --profile dev`.
//! FE_BENCH_ROUNDS (default 10) sets the number of saves timed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use fe_host::checkpoint::{store, Cursor};
use fe_host::components::load_registry;
use fe_host::estimator::checkpointing::ResumeOptions;
use fe_host::estimator::{Estimator, RunOptions};
use fe_host::manifest::{CheckpointConfig, Manifest};
use fe_host::plugins::{search_path, Registry};
use tch::{Device, Tensor};

mod common;
use common::{env_or, median, prepare, write_dataset, MANIFEST};

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

/// The least a crash-safe single file costs: a temporary file, fsynced, renamed over the
/// target, the directory fsynced (the second ordered flush every atomic replace needs).
fn raw_atomic_write(path: &Path, tensors: &[(String, Tensor)]) {
    let temp = path.with_extension("tmp");
    raw_write(&temp, tensors, true);
    std::fs::rename(&temp, path).unwrap();
    let parent = path.parent().unwrap();
    std::fs::File::open(parent).unwrap().sync_all().unwrap();
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
        dir_named: true,
        every_epochs: Some(1),
        every_steps: None,
        keep_last: None,
        keep_best: None,
        monitor: None,
        maximize: false,
        background: true,
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

    let cursor = Cursor::EpochEnd { epoch: 1 };
    let set_background = |trained: &mut Estimator, on: bool| {
        if let Some(config) = trained.checkpointing.config.as_mut() {
            config.background = on;
        }
    };
    let clear = || {
        for name in store::list(&checkpoints).unwrap() {
            store::delete(&checkpoints, &name).unwrap();
        }
    };
    let (mut waits, mut durable, mut foreground) = (Vec::new(), Vec::new(), Vec::new());
    let (mut raw_sync, mut raw, mut raw_atomic) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        set_background(&mut trained, true);
        let started = Instant::now();
        trained.save_checkpoint(cursor).unwrap();
        waits.push(started.elapsed().as_secs_f64());
        trained
            .finish_checkpoint()
            .unwrap()
            .expect("a checkpoint was written");
        durable.push(started.elapsed().as_secs_f64());
        clear();

        set_background(&mut trained, false);
        let started = Instant::now();
        trained.save_checkpoint(cursor).unwrap();
        foreground.push(started.elapsed().as_secs_f64());
        clear();

        let path = dir.join(format!("raw-{label}.safetensors"));
        let started = Instant::now();
        raw_write(&path, &tensors, true);
        raw_sync.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        raw_write(&path, &tensors, false);
        raw.push(started.elapsed().as_secs_f64());
        let _ = std::fs::remove_file(&path);
        let started = Instant::now();
        raw_atomic_write(&path, &tensors);
        raw_atomic.push(started.elapsed().as_secs_f64());
        let _ = std::fs::remove_file(&path);
    }
    trained.save_checkpoint(cursor).unwrap();
    trained.finish_checkpoint().unwrap();
    let [waits, durable, foreground, raw_sync, raw, raw_atomic] =
        [waits, durable, foreground, raw_sync, raw, raw_atomic].map(median);
    println!(
        "{label} + Adam checkpoint ({:.1} MB of tensors), median of {rounds}:",
        bytes as f64 / 1e6
    );
    let line = |what: &str, seconds: f64| {
        println!(
            "  {what:<52} {:8.2} ms  (/ raw + fsync = {:.2})",
            seconds * 1e3,
            seconds / raw_sync
        )
    };
    line("training waits (snapshot; written in background):", waits);
    line("... until written, durable, `latest` replaced:", durable);
    line(
        "written in the foreground (background = false):",
        foreground,
    );
    line("raw safetensors write + fsync:", raw_sync);
    line("raw safetensors write, no fsync:", raw);
    line(
        "raw write, atomic (temp, fsync, rename, fsync dir):",
        raw_atomic,
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
    let plugin_dir = prepare();
    let dir = std::env::temp_dir().join(format!("fe-bench-ckpt-{}", std::process::id()));
    let _ = write_dataset(&dir);
    let search = search_path(&[], &[plugin_dir], None, None);
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
