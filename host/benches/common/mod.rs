//! What the benchmarks share: the LeNet manifest, a generated dataset, small statistics.

#![allow(dead_code)]

pub mod memory;

use std::path::{Path, PathBuf};

use fe_host::components::load_registry;
use fe_host::estimator::{Estimator, RunOptions};
use fe_host::manifest::Manifest;
use fe_host::plugins::search_path;
use tch::{Device, Kind, Tensor};

/// What every benchmark does first: libtorch threads from FE_BENCH_THREADS (default one per
/// core) and the allocator tuning fe-host applies; returns where the built plugins are.
pub fn prepare() -> PathBuf {
    if let Some(threads) = std::env::var("FE_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        tch::set_num_threads(threads);
    }
    fe_host::runtime::tune_malloc();
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug")
}

/// The device both sides train on: FE_BENCH_DEVICE (`cpu`, `cuda`, `cuda:N`; default `cpu`).
pub fn device() -> Device {
    match std::env::var("FE_BENCH_DEVICE").as_deref() {
        Err(_) | Ok("cpu") => Device::Cpu,
        Ok("cuda") => Device::Cuda(0),
        Ok(other) => match other.strip_prefix("cuda:").map(str::parse) {
            Some(Ok(index)) => Device::Cuda(index),
            _ => panic!("FE_BENCH_DEVICE={other}: expected cpu, cuda or cuda:N"),
        },
    }
}

/// Waits for `device`'s queued work, so a timer read afterwards covers it.
pub fn synchronize(device: Device) {
    if let Device::Cuda(index) = device {
        tch::Cuda::synchronize(index as i64);
    }
}

/// Trains the manifest at `manifest_path` through fe-host for `steps` steps (manifest, plugins,
/// pipeline workers and all) and returns its training steps per second.
pub fn fe_host_steps_per_second(manifest_path: &Path, plugin_dir: &Path, steps: usize) -> f64 {
    let mut manifest = Manifest::load(manifest_path).expect("manifest");
    manifest.run.train_steps_per_epoch = Some(steps as u64);
    let search = search_path(&[], &[plugin_dir.to_path_buf()], None, None);
    let registry = load_registry(&search, &Default::default()).expect("plugins");
    let options = RunOptions {
        quiet: true,
        out: Box::new(std::io::sink()),
        progress: false,
    };
    let mut estimator = Estimator::build(&manifest, &registry, device(), options).expect("build");
    estimator.fit().expect("fit");
    estimator.train_steps_per_second().expect("rate")
}

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

/// FastEstimator's LeNet written directly against tch (the model of `examples/lenet.toml`).
#[derive(Debug)]
pub struct LeNet {
    conv1: tch::nn::Conv2D,
    conv2: tch::nn::Conv2D,
    conv3: tch::nn::Conv2D,
    fc1: tch::nn::Linear,
    fc2: tch::nn::Linear,
}

impl LeNet {
    pub fn new(vs: &tch::nn::Path<'_>) -> Self {
        use tch::nn;
        Self {
            conv1: nn::conv2d(vs / "conv1", 1, 32, 3, Default::default()),
            conv2: nn::conv2d(vs / "conv2", 32, 64, 3, Default::default()),
            conv3: nn::conv2d(vs / "conv3", 64, 64, 3, Default::default()),
            fc1: nn::linear(vs / "fc1", 576, 64, Default::default()),
            fc2: nn::linear(vs / "fc2", 64, 10, Default::default()),
        }
    }
}

impl tch::nn::Module for LeNet {
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

/// Trains LeNet with Adam for `steps` batches of `batch` from preprocessed tensors (shuffled
/// per pass) and returns steps/s: what training alone consumes, with no data loading at all.
/// On a GPU each batch is gathered on the CPU and copied over, as a hand-written loop over a
/// host-side dataset does.
pub fn hand_written_steps_per_second(
    images: &Tensor,
    labels: &Tensor,
    steps: usize,
    batch: i64,
) -> f64 {
    use tch::nn::{Module, OptimizerConfig};
    tch::manual_seed(42);
    let device = device();
    let vs = tch::nn::VarStore::new(device);
    let net = LeNet::new(&vs.root());
    let mut opt = tch::nn::Adam::default().build(&vs, 1e-3).expect("adam");
    let n = images.size()[0];
    let start = std::time::Instant::now();
    let mut step = 0;
    while step < steps {
        let order = Tensor::randperm(n, (Kind::Int64, tch::Device::Cpu));
        for b in 0..n / batch {
            if step == steps {
                break;
            }
            let index = order.narrow(0, b * batch, batch);
            let (x, y) = (
                images.index_select(0, &index).to_device(device),
                labels.index_select(0, &index).to_device(device),
            );
            let probs = net.forward(&x);
            let loss = probs.clamp(1e-7, 1.0 - 1e-7).log().nll_loss(&y);
            opt.backward_step(&loss);
            step += 1;
        }
    }
    synchronize(device);
    steps as f64 / start.elapsed().as_secs_f64()
}

/// Writes `script` into `dir` as `bench.py` and runs it there with `.venv`'s python and `args`;
/// its stdout.
pub fn run_python(dir: &Path, script: &str, args: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::write(dir.join("bench.py"), script).unwrap();
    let out = std::process::Command::new(root.join(".venv/bin/python"))
        .arg("bench.py")
        .args(args)
        .current_dir(dir)
        .output()
        .expect(".venv/bin/python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `images` JPEGs of `width × height` pixels in two class folders (`c0`, `c1`): smooth
/// gradients with a little noise, so they compress like photographs rather than like flat
/// colour.
pub fn write_jpegs(dir: &Path, images: usize, width: u32, height: u32) {
    for i in 0..images {
        let class = dir.join(format!("c{}", i % 2));
        std::fs::create_dir_all(&class).unwrap();
        let mut state = (i as u32).wrapping_mul(2_654_435_761) | 1;
        let picture = image::RgbImage::from_fn(width, height, |x, y| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let noise = state % 24;
            image::Rgb([
                ((x * 255 / width + noise) % 256) as u8,
                ((y * 255 / height + noise + i as u32) % 256) as u8,
                (((x + y) * 127 / width + noise) % 256) as u8,
            ])
        });
        picture.save(class.join(format!("{i:05}.jpg"))).unwrap();
    }
}
