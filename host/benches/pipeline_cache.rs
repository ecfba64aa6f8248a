//! What the pipeline cache buys: a folder of generated JPEGs goes through ReadImage (decode)
//! and Resize, and the samples/s of epoch 2 without the cache are set next to epoch 2 with it
//! (epoch 1 filled the cache). Prints both and their ratio.
//!
//! `cargo build --workspace && cargo bench -p fe-host --bench pipeline_cache --profile dev`.
//! Options (environment): FE_BENCH_IMAGES (default 1024), FE_BENCH_SIZE (JPEG side in pixels,
//! default 256), FE_BENCH_WORKERS (pipeline workers; default one per core), FE_BENCH_THREADS.

// A benchmark binary: any failure should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use fe_host::components::load_registry;
use fe_host::manifest::Manifest;
use fe_host::network::Keys;
use fe_host::pipeline::Pipeline;
use fe_host::plugins::search_path;
use fe_plugin_api::Mode;

mod common;
use common::{env_or, prepare, write_jpegs};

fn manifest(cache: &str) -> String {
    format!(
        r#"[run]
epochs = 2

[pipeline]
batch_size = 32
shuffle = true
{cache}

[pipeline.data.train]
type = "image_folder"
dir = "images"

[[pipeline.ops]]
op = "ReadImage"
inputs = "x"
outputs = "x"
cache = true

[[pipeline.ops]]
op = "Resize"
inputs = "x"
outputs = "x"
height = 64
width = 64

[[models]]
name = "lenet"
architecture = "LeNet"
optimizer = "adam"

[[network.ops]]
op = "ModelOp"
model = "lenet"
inputs = "x"
outputs = "y_pred"

[[network.ops]]
op = "CrossEntropy"
inputs = ["y_pred", "y"]
outputs = "ce"

[[network.ops]]
op = "UpdateOp"
model = "lenet"
loss = "ce"
"#
    )
}

/// Samples/s of `epoch` of the pipeline `text` describes (built fresh, so the first epoch
/// run here is its first), read as fast as it comes.
fn epochs(dir: &Path, text: &str, plugin_dir: &Path, wanted_epochs: &[u32]) -> Vec<f64> {
    let path = dir.join("pipeline.toml");
    std::fs::write(&path, text).unwrap();
    let manifest = Manifest::load(&path).expect("manifest");
    let search = search_path(&[], &[plugin_dir.to_path_buf()], None, None);
    let registry = load_registry(&search, &Default::default()).expect("plugins");
    let mut keys = Keys::default();
    let pipeline = Pipeline::build(&manifest, &registry, &mut keys).expect("pipeline");
    let wanted = pipeline.available_keys(Mode::Train, 1, "");
    let keys = Arc::new(keys);
    wanted_epochs
        .iter()
        .map(|&epoch| {
            let start = Instant::now();
            let mut samples = 0;
            for batch in pipeline
                .epoch(Mode::Train, epoch, "", &wanted, None, &keys)
                .unwrap()
            {
                samples += batch.unwrap().size;
            }
            samples as f64 / start.elapsed().as_secs_f64()
        })
        .collect()
}

fn main() {
    let images = env_or("FE_BENCH_IMAGES", 1024);
    let size = env_or("FE_BENCH_SIZE", 256) as u32;
    let plugin_dir = prepare();
    let dir = std::env::temp_dir().join(format!("fe-bench-cache-{}", std::process::id()));
    write_jpegs(&dir.join("images"), images, size, size);
    let workers = std::env::var("FE_BENCH_WORKERS")
        .map(|w| format!("workers = {w}"))
        .unwrap_or_default();

    let plain = epochs(&dir, &manifest(&workers), &plugin_dir, &[1, 2]);
    let cached_text = manifest(&format!("{workers}\ncache = \"cache\""));
    let cached = epochs(&dir, &cached_text, &plugin_dir, &[1, 2]);
    println!(
        "{images} JPEGs of {size}x{size}, ReadImage + Resize to 64x64, batch 32; {} libtorch threads",
        tch::get_num_threads()
    );
    println!(
        "without cache: epoch 1 {:.0} samples/s, epoch 2 {:.0} samples/s",
        plain[0], plain[1]
    );
    println!(
        "with cache:    epoch 1 {:.0} samples/s (fills it), epoch 2 {:.0} samples/s",
        cached[0], cached[1]
    );
    println!(
        "epoch 2 with / without cache = {:.1}x",
        cached[1] / plain[1]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
