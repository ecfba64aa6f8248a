//! fe-host against a hand-written tch loop: the same LeNet, the same data, batch size 32, the
//! same thread count, in one process. Prints steps/s of each and the ratio.
//!
//! Run it on the one profile everything else uses (a second profile recompiles libtorch's C++
//! wrapper): `cargo build --workspace && cargo bench -p fe-host --bench lenet --profile dev`.
//! Options (environment): FE_BENCH_STEPS (default 200 per round), FE_BENCH_ROUNDS (8),
//! FE_BENCH_THREADS (libtorch threads; default one per core).

// A benchmark binary: any failure should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use fe_host::estimator::{Estimator, RunOptions};
use fe_host::manifest::Manifest;
use fe_host::plugins::{load_registry, search_path};
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};

const BATCH: i64 = 32;

mod common;
use common::{env_or, median, write_dataset, MANIFEST, SAMPLES};

/// FastEstimator's LeNet written directly against tch.
#[derive(Debug)]
struct LeNet {
    conv1: nn::Conv2D,
    conv2: nn::Conv2D,
    conv3: nn::Conv2D,
    fc1: nn::Linear,
    fc2: nn::Linear,
}

impl LeNet {
    fn new(vs: &nn::Path<'_>) -> Self {
        Self {
            conv1: nn::conv2d(vs / "conv1", 1, 32, 3, Default::default()),
            conv2: nn::conv2d(vs / "conv2", 32, 64, 3, Default::default()),
            conv3: nn::conv2d(vs / "conv3", 64, 64, 3, Default::default()),
            fc1: nn::linear(vs / "fc1", 576, 64, Default::default()),
            fc2: nn::linear(vs / "fc2", 64, 10, Default::default()),
        }
    }
}

impl Module for LeNet {
    fn forward(&self, x: &Tensor) -> Tensor {
        let x = x.apply(&self.conv1).relu().max_pool2d_default(2);
        let x = x.apply(&self.conv2).relu().max_pool2d_default(2);
        let x = x.apply(&self.conv3).flatten(1, -1);
        x.apply(&self.fc1)
            .relu()
            .apply(&self.fc2)
            .softmax(-1, Kind::Float)
    }
}

/// The hand-written loop: data preprocessed once into tensors, shuffled per pass, Adam.
fn hand_written(images: &Tensor, labels: &Tensor, steps: usize) -> f64 {
    tch::manual_seed(42);
    let vs = nn::VarStore::new(Device::Cpu);
    let net = LeNet::new(&vs.root());
    let mut opt = nn::Adam::default().build(&vs, 1e-3).expect("adam");
    let n = images.size()[0];
    let start = Instant::now();
    let mut step = 0;
    while step < steps {
        let order = Tensor::randperm(n, (Kind::Int64, Device::Cpu));
        for batch in 0..n / BATCH {
            if step == steps {
                break;
            }
            let index = order.narrow(0, batch * BATCH, BATCH);
            let (x, y) = (
                images.index_select(0, &index),
                labels.index_select(0, &index),
            );
            let probs = net.forward(&x);
            let loss = probs.clamp(1e-7, 1.0 - 1e-7).log().nll_loss(&y);
            opt.backward_step(&loss);
            step += 1;
        }
    }
    steps as f64 / start.elapsed().as_secs_f64()
}

fn fe_host_run(manifest_path: &Path, plugin_dir: &Path, steps: usize) -> f64 {
    let mut manifest = Manifest::load(manifest_path).expect("manifest");
    manifest.run.train_steps_per_epoch = Some(steps as u64);
    let search = search_path(&[], &[plugin_dir.to_path_buf()], None, None);
    let registry = load_registry(&search, &Default::default()).expect("plugins");
    let options = RunOptions {
        quiet: true,
        out: Box::new(std::io::sink()),
        progress: false,
    };
    let mut estimator =
        Estimator::build(&manifest, &registry, Device::Cpu, options).expect("build");
    estimator.fit().expect("fit");
    estimator.train_steps_per_second().expect("rate")
}

fn main() {
    let steps = env_or("FE_BENCH_STEPS", 200);
    let rounds = env_or("FE_BENCH_ROUNDS", 8);
    if let Some(threads) = std::env::var("FE_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        tch::set_num_threads(threads);
    }
    fe_host::runtime::tune_malloc();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let plugin_dir = root.join("target/debug");
    let dir = std::env::temp_dir().join(format!("fe-bench-{}", std::process::id()));
    let (images, labels) = write_dataset(&dir);
    let manifest_path = dir.join("lenet.toml");
    let mut text = MANIFEST.to_owned();
    if std::env::var("FE_BENCH_VARIANT").as_deref() == Ok("noops") {
        let flat: Vec<u8> = Vec::<f32>::try_from(images.flatten(0, -1))
            .unwrap()
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        fe_host::pipeline::idx::write(
            &dir.join("xf.idx"),
            Kind::Float,
            &[SAMPLES as u32, 1, 28, 28],
            &flat,
        )
        .unwrap();
        text = text.replace("x = \"x.idx\"", "x = \"xf.idx\"");
        text = text.split("[[pipeline.ops]]").next().unwrap().to_owned()
            + &text[text.find("[[models]]").unwrap()..];
    }
    if let Ok(w) = std::env::var("FE_BENCH_WORKERS") {
        text = text.replace(
            "batch_size = 32",
            &format!("batch_size = 32\nworkers = {w}"),
        );
    }
    std::fs::write(&manifest_path, text).expect("manifest");

    println!(
        "LeNet, batch {BATCH}, {steps} steps per round, {rounds} rounds, {} libtorch threads",
        tch::get_num_threads()
    );
    // Warm caches, the allocator and the plugin loader.
    hand_written(&images, &labels, steps / 4);
    fe_host_run(&manifest_path, &plugin_dir, steps / 4);
    // Short rounds in alternating order (ABBA...), so drifts in machine speed hit both alike;
    // the figure is the median of the per-round ratios.
    let mut ratios = Vec::new();
    let (mut hand, mut host) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let (h, f) = if round % 2 == 0 {
            let h = hand_written(&images, &labels, steps);
            (h, fe_host_run(&manifest_path, &plugin_dir, steps))
        } else {
            let f = fe_host_run(&manifest_path, &plugin_dir, steps);
            (hand_written(&images, &labels, steps), f)
        };
        println!(
            "round {:2}: hand-written {h:7.1} steps/s   fe-host {f:7.1} steps/s   ratio {:.3}",
            round + 1,
            f / h
        );
        ratios.push(f / h);
        hand.push(h);
        host.push(f);
    }
    println!(
        "median: hand-written {:.1} steps/s, fe-host {:.1} steps/s; fe-host / hand-written = {:.3} (median of {rounds} paired rounds)",
        median(hand),
        median(host),
        median(ratios)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
