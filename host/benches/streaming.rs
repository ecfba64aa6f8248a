//! Streaming data, against what a PyTorch user would run. Generated JPEGs in WebDataset shards
//! go through decode + RandomCrop + HorizontalFlip + Normalize, and a Parquet table of float
//! rows is read as it is, each by fe-host's pipeline and by a PyTorch DataLoader with the same
//! workers and batch (the `webdataset` package with torchvision `transforms.v2`; pyarrow row
//! groups in an IterableDataset). Each side runs in its own process and reports samples/s over
//! one epoch, from building the dataset to its last batch; the process tree's peak memory
//! (PSS, so forked workers' shared pages count once) is sampled from outside. The data is then
//! doubled and fe-host run again, to show its memory does not grow with the dataset.
//!
//! `cargo build --workspace && cargo bench -p fe-host --bench streaming --profile dev`.
//! Needs `.venv` as `scripts/test.sh` leaves it (torchvision, pyarrow, webdataset, pillow).
//! Options (environment): FE_BENCH_SAMPLES (default 200000, a multiple of 10000; 2× that is
//! generated), FE_BENCH_SIZE (JPEG side, default 128), FE_BENCH_WORKERS (default 2),
//! FE_BENCH_DATA (where the generated data is kept between runs; default
//! target/bench-data/streaming-SAMPLES-SIZE).

// A benchmark binary: any failure should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use fe_host::components::load_registry;
use fe_host::manifest::Manifest;
use fe_host::network::Keys;
use fe_host::pipeline::Pipeline;
use fe_host::plugins::search_path;
use fe_plugin_api::Mode;

mod common;
use common::env_or;
use common::memory::{run_measured, Measured};

const BATCH: usize = 32;
/// Set in the child process this binary starts for each fe-host measurement: the manifest.
const CHILD: &str = "FE_BENCH_STREAMING_MANIFEST";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn manifest(data: &str, ops: &str, workers: usize) -> String {
    format!(
        r#"[run]
epochs = 1

[pipeline]
batch_size = {BATCH}
shuffle = true
workers = {workers}

[pipeline.data.train]
{data}
{ops}
[[models]]
name = "lenet"
architecture = "LeNet"
optimizer = "adam"

[[network.ops]]
op = "ModelOp"
model = "lenet"
inputs = "x"
outputs = "y_pred"
"#
    )
}

const IMAGE_OPS: &str = r#"
[[pipeline.ops]]
op = "ReadImage"
inputs = "x"
outputs = "x"

[[pipeline.ops]]
op = "RandomCrop"
inputs = "x"
outputs = "x"
height = 112
width = 112

[[pipeline.ops]]
op = "HorizontalFlip"
inputs = "x"
outputs = "x"

[[pipeline.ops]]
op = "Normalize"
inputs = "x"
outputs = "x"
mean = [0.5, 0.5, 0.5]
std = [0.25, 0.25, 0.25]

[[pipeline.ops]]
op = "ChannelTranspose"
inputs = "x"
outputs = "x"
"#;

/// The child's work: one epoch of the manifest's pipeline; prints `samples seconds`.
fn child(manifest_path: &Path) {
    let start = Instant::now();
    let manifest = Manifest::load(manifest_path).expect("manifest");
    let search = search_path(&[], &[root().join("target/debug")], None, None);
    let registry = load_registry(&search, &Default::default()).expect("plugins");
    let mut keys = Keys::default();
    let pipeline = Pipeline::build(&manifest, &registry, &mut keys).expect("pipeline");
    let wanted = pipeline.available_keys(Mode::Train, 1, "");
    let keys = Arc::new(keys);
    let mut samples = 0;
    for batch in pipeline
        .epoch(Mode::Train, 1, "", &wanted, None, &keys)
        .unwrap()
    {
        samples += batch.unwrap().size;
    }
    println!("{samples} {}", start.elapsed().as_secs_f64());
}

/// Samples/s and peak memory from a measured process's `samples seconds` line.
fn rate(measured: &Measured, expected: usize) -> (f64, f64) {
    let mut words = measured.stdout.split_whitespace();
    let samples: usize = words.next().unwrap().parse().unwrap();
    let seconds: f64 = words.next().unwrap().parse().unwrap();
    assert_eq!(samples, expected, "an epoch is every sample once");
    (
        samples as f64 / seconds,
        measured.peak_bytes as f64 / (1 << 20) as f64,
    )
}

fn fe_host(dir: &Path, name: &str, text: &str, expected: usize) -> (f64, f64) {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.env(CHILD, &path);
    rate(&run_measured(command), expected)
}

fn python(
    dir: &Path,
    kind: &str,
    workers: usize,
    paths: &[PathBuf],
    expected: usize,
) -> (f64, f64) {
    let mut command = Command::new(root().join(".venv/bin/python"));
    command
        .arg(root().join("host/benches/streaming_ref.py"))
        .args([kind, &workers.to_string(), &BATCH.to_string()])
        .args(paths)
        .current_dir(dir);
    rate(&run_measured(command), expected)
}

/// Generates `samples` samples (shards and Parquet files) into `dir` unless a previous run did.
fn generate(dir: &Path, samples: usize, size: usize) {
    let done = dir.join("complete");
    if done.exists() {
        return;
    }
    println!("generating {samples} samples into {} ...", dir.display());
    let status = Command::new(root().join(".venv/bin/python"))
        .arg(root().join("host/benches/streaming_data.py"))
        .arg(dir)
        .args([samples.to_string(), size.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "streaming_data.py failed");
    std::fs::write(done, "").unwrap();
}

fn main() {
    if let Some(path) = std::env::var_os(CHILD) {
        child(Path::new(&path));
        return;
    }
    let samples = env_or("FE_BENCH_SAMPLES", 200_000);
    assert_eq!(samples % 10_000, 0, "FE_BENCH_SAMPLES: a multiple of 10000");
    let size = env_or("FE_BENCH_SIZE", 128);
    let workers = env_or("FE_BENCH_WORKERS", 2);
    let data = std::env::var_os("FE_BENCH_DATA").map_or_else(
        || root().join(format!("target/bench-data/streaming-{samples}-{size}")),
        PathBuf::from,
    );
    generate(&data, 2 * samples, size);
    let work = std::env::temp_dir().join(format!("fe-bench-streaming-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();

    let shards = |n: usize| -> Vec<PathBuf> {
        (0..n / 1000)
            .map(|s| data.join(format!("shards/train-{s:06}.tar")))
            .collect()
    };
    let parquet = |n: usize| -> Vec<PathBuf> {
        (0..n / 10_000)
            .map(|f| data.join(format!("parquet/part-{f:05}.parquet")))
            .collect()
    };
    let webdataset = |n: usize| {
        let urls = format!(
            "{}/shards/train-{{000000..{:06}}}.tar",
            data.display(),
            n / 1000 - 1
        );
        manifest(
            &format!("type = \"webdataset\"\nurls = \"{urls}\"\nshuffle_buffer = 1000\nkeys = {{ jpg = \"x\", cls = \"y\" }}"),
            IMAGE_OPS,
            workers,
        )
    };
    let table = |n: usize| {
        let files: Vec<String> = parquet(n)
            .iter()
            .map(|p| format!("{:?}", p.display().to_string()))
            .collect();
        manifest(
            &format!(
                "type = \"parquet\"\npath = [{}]\ncolumns = [\"x\", \"y\"]",
                files.join(", ")
            ),
            "",
            workers,
        )
    };

    let gib = |bytes: usize| bytes as f64 / (1u64 << 30) as f64;
    let shard_bytes: u64 = shards(samples)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    println!(
        "{samples} samples, {size}x{size} JPEGs in {} shards ({:.2} GiB); {workers} workers, batch {BATCH}",
        samples / 1000,
        gib(shard_bytes as usize)
    );
    println!("{:<44} {:>12} {:>14}", "", "samples/s", "peak PSS MiB");
    let show = |what: &str, (rate, peak): (f64, f64)| {
        println!("{what:<44} {rate:>12.0} {peak:>14.0}");
        rate
    };
    let ours = show(
        "webdataset: fe-host",
        fe_host(&work, "wds", &webdataset(samples), samples),
    );
    let theirs = show(
        "webdataset: webdataset + DataLoader",
        python(&work, "webdataset", workers, &shards(samples), samples),
    );
    show(
        "webdataset: fe-host, data doubled",
        fe_host(&work, "wds2", &webdataset(2 * samples), 2 * samples),
    );
    let ours_table = show(
        "parquet: fe-host",
        fe_host(&work, "pq", &table(samples), samples),
    );
    let theirs_table = show(
        "parquet: pyarrow + DataLoader",
        python(&work, "parquet", workers, &parquet(samples), samples),
    );
    show(
        "parquet: fe-host, data doubled",
        fe_host(&work, "pq2", &table(2 * samples), 2 * samples),
    );
    println!("webdataset fe-host / python = {:.2}x", ours / theirs);
    println!(
        "parquet    fe-host / python = {:.2}x",
        ours_table / theirs_table
    );
    let _ = std::fs::remove_dir_all(&work);
}
