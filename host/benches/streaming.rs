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

mod common;
use common::env_or;
use common::memory::{
    fe_host_epoch, pipeline_manifest as manifest, python_epoch, run_child_if_asked, BATCH,
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
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

/// The arguments of streaming_ref.py.
fn reference_args(kind: &str, workers: usize, paths: &[PathBuf]) -> Vec<String> {
    let mut args = vec![kind.to_owned(), workers.to_string(), BATCH.to_string()];
    args.extend(paths.iter().map(|p| p.display().to_string()));
    args
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
    if run_child_if_asked() {
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
        fe_host_epoch(&work, "wds", &webdataset(samples), samples),
    );
    let theirs = show(
        "webdataset: webdataset + DataLoader",
        python_epoch(
            &work,
            "streaming_ref.py",
            &reference_args("webdataset", workers, &shards(samples)),
            samples,
        ),
    );
    show(
        "webdataset: fe-host, data doubled",
        fe_host_epoch(&work, "wds2", &webdataset(2 * samples), 2 * samples),
    );
    let ours_table = show(
        "parquet: fe-host",
        fe_host_epoch(&work, "pq", &table(samples), samples),
    );
    let theirs_table = show(
        "parquet: pyarrow + DataLoader",
        python_epoch(
            &work,
            "streaming_ref.py",
            &reference_args("parquet", workers, &parquet(samples)),
            samples,
        ),
    );
    show(
        "parquet: fe-host, data doubled",
        fe_host_epoch(&work, "pq2", &table(2 * samples), 2 * samples),
    );
    println!("webdataset fe-host / python = {:.2}x", ours / theirs);
    println!(
        "parquet    fe-host / python = {:.2}x",
        ours_table / theirs_table
    );
    let _ = std::fs::remove_dir_all(&work);
}
