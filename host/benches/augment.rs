//! Augmentation throughput against torchvision. Two chains, each through fe-host's pipeline
//! and through torchvision `transforms.v2` in a PyTorch DataLoader with the same workers and
//! batch, each side in its own process (timed from building the dataset to the last batch of
//! one epoch):
//! - cifar10_fast's (examples/cifar10_fast.toml): 32×32 uint8 images from NPY, Normalize,
//!   PadIfNeeded 40 (reflect-101), RandomCrop 32, HorizontalFlip, an 8×8 CoarseDropout;
//! - ImageNet-style: JPEG files decoded, RandomResizedCrop 224, HorizontalFlip, ColorJitter
//!   (0.4, 0.4, 0.4, 0.1), Normalize.
//!
//! Both end with channel-first float32 batches. Prints samples/s, samples/s per worker, and
//! the ratio.
//!
//! `cargo build --workspace && cargo bench -p fe-host --bench augment --profile dev`. Needs
//! `.venv` as `scripts/test.sh` leaves it (torchvision). Options (environment):
//! FE_BENCH_CIFAR (images, default 50000), FE_BENCH_JPEGS (default 2000), FE_BENCH_WORKERS
//! (default 2).

// A benchmark binary: any failure should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

mod common;
use common::memory::{
    fe_host_epoch, pipeline_manifest as manifest, python_epoch, run_child_if_asked, BATCH,
};
use common::{env_or, write_jpegs};

const CIFAR_OPS: &str = r#"
[[pipeline.ops]]
op = "Normalize"
inputs = "x"
outputs = "x"
mean = [0.4914, 0.4822, 0.4465]
std = [0.2471, 0.2435, 0.2616]

[[pipeline.ops]]
op = "PadIfNeeded"
inputs = "x"
outputs = "x"
min_height = 40
min_width = 40

[[pipeline.ops]]
op = "RandomCrop"
inputs = "x"
outputs = "x"
height = 32
width = 32

[[pipeline.ops]]
op = "HorizontalFlip"
inputs = "x"
outputs = "x"

[[pipeline.ops]]
op = "CoarseDropout"
inputs = "x"
outputs = "x"
max_holes = 1
p = 1.0

[[pipeline.ops]]
op = "ChannelTranspose"
inputs = "x"
outputs = "x"
"#;

const IMAGENET_OPS: &str = r#"
[[pipeline.ops]]
op = "ReadImage"
inputs = "x"
outputs = "x"

[[pipeline.ops]]
op = "RandomResizedCrop"
inputs = "x"
outputs = "x"
height = 224
width = 224

[[pipeline.ops]]
op = "HorizontalFlip"
inputs = "x"
outputs = "x"

[[pipeline.ops]]
op = "ColorJitter"
inputs = "x"
outputs = "x"
brightness = 0.4
contrast = 0.4
saturation = 0.4
hue = 0.1

[[pipeline.ops]]
op = "Normalize"
inputs = "x"
outputs = "x"

[[pipeline.ops]]
op = "ChannelTranspose"
inputs = "x"
outputs = "x"
"#;

/// `images` uint8 32×32×3 images (smooth colour fields with noise) and their labels as NPY.
fn write_cifar(dir: &Path, images: usize) {
    let x = tch::Tensor::randint(
        256,
        [images as i64, 32, 32, 3],
        (tch::Kind::Uint8, tch::Device::Cpu),
    );
    x.write_npy(dir.join("x.npy")).unwrap();
    let y = tch::Tensor::arange(images as i64, (tch::Kind::Int64, tch::Device::Cpu)).remainder(10);
    y.write_npy(dir.join("y.npy")).unwrap();
}

fn main() {
    if run_child_if_asked() {
        return;
    }
    let cifar = env_or("FE_BENCH_CIFAR", 50_000);
    let jpegs = env_or("FE_BENCH_JPEGS", 2000);
    let workers = env_or("FE_BENCH_WORKERS", 2);
    let dir = std::env::temp_dir().join(format!("fe-bench-augment-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("images")).unwrap();
    write_cifar(&dir, cifar);
    // ImageNet's typical size.
    write_jpegs(&dir.join("images"), jpegs, 320, 288);

    let args = |kind: &str, path: &str| {
        vec![
            kind.to_owned(),
            workers.to_string(),
            BATCH.to_string(),
            dir.join(path).display().to_string(),
        ]
    };
    let cifar_manifest = manifest(
        "type = \"npy\"\nfiles = { x = \"x.npy\", y = \"y.npy\" }",
        CIFAR_OPS,
        workers,
    );
    let imagenet_manifest = manifest(
        "type = \"image_folder\"\ndir = \"images\"",
        IMAGENET_OPS,
        workers,
    );
    println!("{workers} workers, batch {BATCH}");
    println!("{:<40} {:>12} {:>18}", "", "samples/s", "per worker");
    let show = |what: &str, rate: f64| {
        println!("{what:<40} {rate:>12.0} {:>18.0}", rate / workers as f64);
        rate
    };
    let ours = show(
        &format!("cifar10_fast chain ({cifar} images): fe-host"),
        fe_host_epoch(&dir, "cifar", &cifar_manifest, cifar).0,
    );
    let theirs = show(
        "    torchvision v2 + DataLoader",
        python_epoch(&dir, "augment_ref.py", &args("cifar", "x.npy"), cifar).0,
    );
    let ours_jpeg = show(
        &format!("ImageNet chain ({jpegs} JPEGs): fe-host"),
        fe_host_epoch(&dir, "imagenet", &imagenet_manifest, jpegs).0,
    );
    let theirs_jpeg = show(
        "    torchvision v2 + DataLoader",
        python_epoch(&dir, "augment_ref.py", &args("imagenet", "images"), jpegs).0,
    );
    println!(
        "cifar10_fast chain fe-host / torchvision = {:.2}x",
        ours / theirs
    );
    println!(
        "ImageNet chain     fe-host / torchvision = {:.2}x",
        ours_jpeg / theirs_jpeg
    );
    let _ = std::fs::remove_dir_all(&dir);
}
