//! fe-host against a hand-written tch loop: the same LeNet, the same data, batch size 32, the
//! same thread count, in one process. Prints steps/s of each and the ratio.
//!
//! Run it on the one profile everything else uses (a second profile recompiles libtorch's C++
//! wrapper): `cargo build --workspace && cargo bench -p fe-host --bench lenet --profile dev`.
//! Options (environment): FE_BENCH_STEPS (default 200 per round), FE_BENCH_ROUNDS (8),
//! FE_BENCH_THREADS (libtorch threads; default one per core), FE_BENCH_DEVICE (`cpu`, the
//! default, or `cuda[:N]`: both sides then train there).

// A benchmark binary: any failure should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tch::{Kind, Tensor};

const BATCH: i64 = 32;

mod common;
use common::{
    env_or, fe_host_steps_per_second, hand_written_steps_per_second, median, prepare,
    write_dataset, MANIFEST, SAMPLES,
};

/// The hand-written loop (`common::hand_written_steps_per_second`): data preprocessed once into
/// tensors, shuffled per pass, Adam.
fn hand_written(images: &Tensor, labels: &Tensor, steps: usize) -> f64 {
    hand_written_steps_per_second(images, labels, steps, BATCH)
}

fn main() {
    let steps = env_or("FE_BENCH_STEPS", 200);
    let rounds = env_or("FE_BENCH_ROUNDS", 8);
    let plugin_dir = prepare();
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
        "LeNet on {:?}, batch {BATCH}, {steps} steps per round, {rounds} rounds, {} libtorch threads",
        common::device(),
        tch::get_num_threads()
    );
    // Warm caches, the allocator and the plugin loader.
    hand_written(&images, &labels, steps / 4);
    fe_host_steps_per_second(&manifest_path, &plugin_dir, steps / 4);
    // Short rounds in alternating order (ABBA...), so drifts in machine speed hit both alike;
    // the figure is the median of the per-round ratios.
    let mut ratios = Vec::new();
    let (mut hand, mut host) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let (h, f) = if round % 2 == 0 {
            let h = hand_written(&images, &labels, steps);
            (
                h,
                fe_host_steps_per_second(&manifest_path, &plugin_dir, steps),
            )
        } else {
            let f = fe_host_steps_per_second(&manifest_path, &plugin_dir, steps);
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
