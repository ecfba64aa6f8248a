//! What the benchmarks share: the LeNet manifest, a generated dataset, small statistics.

#![allow(dead_code)]

use std::path::Path;

use tch::{Kind, Tensor};

/// examples/lenet.toml, training only.
pub const MANIFEST: &str = r#"
[run]
epochs = 1
seed = 42
log_steps = 0

[pipeline]
batch_size = 32

[pipeline.data.train]
type = "idx"
files = { x = "x.idx", y = "y.idx" }

[[pipeline.ops]]
op = "Minmax"
inputs = "x"
outputs = "x"

[[pipeline.ops]]
op = "ExpandDims"
inputs = "x"
outputs = "x"
axis = 0

[[models]]
name = "lenet"
architecture = "LeNet"
optimizer = { type = "adam", lr = 0.001 }

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
"#;
pub const SAMPLES: usize = 8192;

pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn write_dataset(dir: &Path) -> (Tensor, Tensor) {
    let (images, labels) = fe_host::datagen::digits::split(7, 0, SAMPLES);
    std::fs::create_dir_all(dir).expect("bench dir");
    fe_host::pipeline::idx::write(
        &dir.join("x.idx"),
        Kind::Uint8,
        &[SAMPLES as u32, 28, 28],
        &images,
    )
    .expect("x");
    fe_host::pipeline::idx::write(&dir.join("y.idx"), Kind::Uint8, &[SAMPLES as u32], &labels)
        .expect("y");
    let x = Tensor::from_slice(&images)
        .reshape([SAMPLES as i64, 1, 28, 28])
        .to_kind(Kind::Float);
    // Per-sample min-max, as the Minmax op in the fe-host pipeline does.
    let flat = x.flatten(1, -1);
    let min = flat.amin(1, true);
    let range = (flat.amax(1, true) - &min).clamp_min(1e-7);
    let x = ((flat - min) / range).reshape([SAMPLES as i64, 1, 28, 28]);
    let y = Tensor::from_slice(&labels).to_kind(Kind::Int64);
    (x, y)
}

pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
