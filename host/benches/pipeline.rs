//! Does the pipeline keep up with training? LeNet-shaped samples (28x28 uint8 digits and a
//! label, from IDX files) go through Minmax + ExpandDims + Onehot on all pipeline workers, and
//! the samples/s they come out at is set next to the samples/s a hand-written tch loop
//! consumes training LeNet at the same batch size. The pipeline must deliver at least 5× what
//! training consumes; the benchmark exits with status 1 when it does not.
//!
//! Run it on the one profile everything else uses (a second profile recompiles libtorch's C++
//! wrapper): `cargo build --workspace && cargo bench -p fe-host --bench pipeline --profile dev`.
//! Options (environment): FE_BENCH_ROUNDS (default 6), FE_BENCH_STEPS (training steps per
//! round, default 100), FE_BENCH_WORKERS (pipeline workers; default one per core),
//! FE_BENCH_THREADS (libtorch threads; default one per core), FE_BENCH_VARIANT=per-sample (the
//! ops wrapped in a `Fuse`, so none runs once per batch: the pipeline's slowest path).

// A benchmark binary: any failure should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use fe_host::components::load_registry;
use fe_host::manifest::Manifest;
use fe_host::network::{KeyId, Keys};
use fe_host::pipeline::Pipeline;
use fe_host::plugins::search_path;
use fe_plugin_api::Mode;

mod common;
use common::{
    env_or, hand_written_steps_per_second, median, prepare, write_dataset, MANIFEST, SAMPLES,
};

const BATCH: i64 = 32;
/// The pipeline must deliver this many times what training consumes.
const REQUIRED: f64 = 5.0;

/// The pipeline and what it needs to start epochs.
struct Loader {
    pipeline: Pipeline,
    keys: Arc<Keys>,
    wanted: BTreeSet<KeyId>,
}

impl Loader {
    /// Samples/s of one epoch (a full pass over the data), consumed as fast as it comes.
    fn samples_per_second(&self, epoch: u32) -> f64 {
        let start = Instant::now();
        let mut samples = 0;
        for batch in self
            .pipeline
            .epoch(Mode::Train, epoch, "", &self.wanted, None, &self.keys)
            .unwrap()
        {
            samples += batch.unwrap().size;
        }
        assert_eq!(samples, SAMPLES as i64);
        samples as f64 / start.elapsed().as_secs_f64()
    }
}

fn main() {
    let rounds = env_or("FE_BENCH_ROUNDS", 6);
    let steps = env_or("FE_BENCH_STEPS", 100);
    let plugin_dir = prepare();
    let dir = std::env::temp_dir().join(format!("fe-bench-pipeline-{}", std::process::id()));
    let (images, labels) = write_dataset(&dir);

    // examples/lenet.toml's pipeline plus Onehot on the label, as the issue asks.
    let onehot = "[[pipeline.ops]]\nop = \"Onehot\"\ninputs = \"y\"\noutputs = \"y\"\nnum_classes = 10\n\n[[models]]";
    let mut text = MANIFEST.replacen("[[models]]", onehot, 1);
    if std::env::var("FE_BENCH_VARIANT").as_deref() == Ok("per-sample") {
        // The same ops inside a Fuse, which is not batchable: every op runs once per sample,
        // the slowest way the pipeline can run them.
        let ops = text.find("[[pipeline.ops]]").unwrap();
        let models = text.find("[[models]]").unwrap();
        let fused = r#"[[pipeline.ops]]
op = "Fuse"
ops = [
    { op = "Minmax", inputs = "x", outputs = "x" },
    { op = "ExpandDims", inputs = "x", outputs = "x", axis = 0 },
    { op = "Onehot", inputs = "y", outputs = "y", num_classes = 10 },
]

"#;
        text.replace_range(ops..models, fused);
    }
    if let Ok(workers) = std::env::var("FE_BENCH_WORKERS") {
        text = text.replace(
            "batch_size = 32",
            &format!("batch_size = 32\nworkers = {workers}"),
        );
    }
    let manifest_path = dir.join("pipeline.toml");
    std::fs::write(&manifest_path, text).expect("manifest");
    let manifest = Manifest::load(&manifest_path).expect("manifest");
    let search = search_path(&[], &[plugin_dir], None, None);
    let registry = load_registry(&search, &Default::default()).expect("plugins");
    let mut keys = Keys::default();
    let pipeline = Pipeline::build(&manifest, &registry, &mut keys).expect("pipeline");
    let loader = Loader {
        wanted: pipeline.available_keys(Mode::Train, 1, ""),
        pipeline,
        keys: Arc::new(keys),
    };

    println!(
        "LeNet-shaped samples ({SAMPLES} of 28x28 uint8 + label), Minmax + ExpandDims + Onehot, batch {BATCH}; {} pipeline workers, {} libtorch threads; {rounds} rounds",
        loader.pipeline.workers,
        tch::get_num_threads()
    );
    // Warm caches, the allocator and both code paths.
    loader.samples_per_second(1);
    hand_written_steps_per_second(&images, &labels, steps / 4, BATCH);
    // Alternating order (ABBA...), so drifts in machine speed hit both alike.
    let (mut fed, mut eaten, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let epoch = round as u32 + 2;
        let train = || hand_written_steps_per_second(&images, &labels, steps, BATCH) * BATCH as f64;
        let (p, t) = if round % 2 == 0 {
            let p = loader.samples_per_second(epoch);
            (p, train())
        } else {
            let t = train();
            (loader.samples_per_second(epoch), t)
        };
        println!(
            "round {:2}: pipeline {p:9.0} samples/s   training {t:7.0} samples/s   ratio {:6.1}",
            round + 1,
            p / t
        );
        fed.push(p);
        eaten.push(t);
        ratios.push(p / t);
    }
    let ratio = median(ratios);
    println!(
        "median: pipeline {:.0} samples/s, training {:.0} samples/s; pipeline / training = {ratio:.1} (required: at least {REQUIRED})",
        median(fed),
        median(eaten),
    );
    let _ = std::fs::remove_dir_all(&dir);
    if ratio < REQUIRED {
        eprintln!("the pipeline delivers less than {REQUIRED}x what training consumes");
        std::process::exit(1);
    }
}
