//! Real training runs through the binary.

use crate::util::{
    classifier_ops, fe_host, history_without_timings, lenet_manifest, run_with_summary, summary,
    values, TempDir,
};

#[test]
fn lenet_converges_on_generated_digits() {
    let dir = TempDir::new("converges");
    let summary = summary(&dir, &lenet_manifest(2, ""));
    let accuracy = values(&summary, "eval", "accuracy");
    assert_eq!(accuracy.len(), 2, "one accuracy per epoch: {summary}");
    assert!(accuracy[1] >= 0.93, "eval accuracy {accuracy:?}");
    let eval_loss = values(&summary, "eval", "ce");
    assert!(eval_loss[1] < 0.3, "eval loss {eval_loss:?}");
    let train_loss = values(&summary, "train", "ce");
    assert!(
        train_loss.last() < train_loss.first(),
        "train loss {train_loss:?}"
    );
}

#[test]
fn the_same_seed_gives_the_same_history() {
    let dir = TempDir::new("seeded");
    let manifest = lenet_manifest(1, "").replace("[run]\n", "[run]\ntrain_steps_per_epoch = 40\n");
    let a = summary(&dir, &manifest);
    let b = summary(&dir, &manifest);
    assert_eq!(history_without_timings(a), history_without_timings(b));
}

#[test]
fn mlp_with_sgd_learns() {
    let dir = TempDir::new("mlp");
    let manifest = lenet_manifest(1, "")
        .replace(
            "architecture = \"LeNet\"",
            "architecture = \"MLP\"\ninputs = 784\nhidden = [64]\nsoftmax = true",
        )
        .replace(
            "{ type = \"adam\", lr = 0.001 }",
            "{ type = \"sgd\", lr = 0.1, momentum = 0.9 }",
        );
    let summary = summary(&dir, &manifest);
    let accuracy = values(&summary, "eval", "accuracy");
    assert!(accuracy[0] > 0.5, "MLP eval accuracy {accuracy:?}");
}

#[test]
fn run_prints_start_epoch_and_finish_lines() {
    let dir = TempDir::new("lines");
    let path = dir.write(
        "m.toml",
        &lenet_manifest(1, "").replace("[run]\n", "[run]\ntrain_steps_per_epoch = 20\n"),
    );
    let out = fe_host()
        .args(["run", &path.to_string_lossy()])
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert_contains!(stdout, "fe-host start: device: cpu;");
    assert_contains!(stdout, "train: 4000 samples, 20 steps/epoch;");
    assert_contains!(stdout, "fe-host train: step: 1; ce: ");
    assert_contains!(
        stdout,
        "fe-host train: step: 20; epoch: 1; epoch_time(sec): "
    );
    assert_contains!(stdout, "fe-host eval: step: 20; epoch: 1; ce: ");
    assert_contains!(stdout, "accuracy: ");
    assert_contains!(stdout, "fe-host finish: step: 20; lenet_lr: 0.001;");
    assert_contains!(stdout, "train steps/sec: ");
}

/// A small GAN on the digits: a generator and a discriminator updated together, both updates
/// deferred to the end of the step (they are the trailing UpdateOps).
fn gan_manifest() -> String {
    let [x, ..] = crate::util::digits();
    format!(
        r#"[run]
epochs = 1
seed = 3
log_steps = 10
train_steps_per_epoch = 80

[pipeline]
batch_size = 32
[pipeline.data.train]
type = "idx"
files = {{ x = "{x}" }}

[[pipeline.ops]]
op = "Minmax"
inputs = "x"
outputs = "x"

[[pipeline.ops]]
op = "Noise"
outputs = "z"
shape = [16]

[[models]]
name = "gen"
architecture = "MLP"
inputs = 16
hidden = [64]
classes = 784
optimizer = {{ type = "adam", lr = 0.001 }}

[[models]]
name = "disc"
architecture = "MLP"
inputs = 784
hidden = [64]
classes = 1
optimizer = {{ type = "adam", lr = 0.001 }}

[[network.ops]]
op = "ModelOp"
model = "gen"
inputs = "z"
outputs = "fake"

[[network.ops]]
op = "ModelOp"
model = "disc"
inputs = "fake"
outputs = "fake_score"

[[network.ops]]
op = "ModelOp"
model = "disc"
inputs = "x"
outputs = "real_score"

[[network.ops]]
op = "Constant"
inputs = "fake_score"
outputs = "ones"
constant = 1.0

[[network.ops]]
op = "Constant"
inputs = "fake_score"
outputs = "zeros"

[[network.ops]]
op = "CrossEntropy"
inputs = ["fake_score", "ones"]
outputs = "g_loss"
form = "binary"
from_logits = true

[[network.ops]]
op = "CrossEntropy"
inputs = ["real_score", "ones"]
outputs = "d_real"
form = "binary"
from_logits = true

[[network.ops]]
op = "CrossEntropy"
inputs = ["fake_score", "zeros"]
outputs = "d_fake"
form = "binary"
from_logits = true

[[network.ops]]
op = "Average"
inputs = ["d_real", "d_fake"]
outputs = "d_loss"

[[network.ops]]
op = "UpdateOp"
model = "gen"
loss = "g_loss"

[[network.ops]]
op = "UpdateOp"
model = "disc"
loss = "d_loss"
"#,
        x = x.display()
    )
}

#[test]
fn two_model_adversarial_training_moves_both_losses() {
    let dir = TempDir::new("gan");
    let summary = summary(&dir, &gan_manifest());
    let g = values(&summary, "train", "g_loss");
    let d = values(&summary, "train", "d_loss");
    assert_eq!(g.len(), 9, "logged at steps 1, 10, ..., 80: {summary}");
    // The discriminator learns to tell real from fake, which pushes the generator's loss up;
    // both move far from where they began.
    assert!(
        d.last().unwrap() < &(d[0] - 0.1),
        "discriminator loss falls: {d:?}"
    );
    assert!(
        (g.last().unwrap() - g[0]).abs() > 0.1,
        "generator loss moves: {g:?}"
    );
    assert!(g.iter().chain(&d).all(|v| v.is_finite()));
}

#[test]
fn mixed_precision_trains_on_the_cpu_in_bfloat16() {
    let dir = TempDir::new("bf16");
    let manifest = lenet_manifest(1, "").replace(
        "architecture = \"LeNet\"",
        "architecture = \"LeNet\"\nmixed_precision = true",
    );
    let summary = summary(&dir, &manifest);
    let accuracy = values(&summary, "eval", "accuracy");
    assert!(
        accuracy[0] > 0.8,
        "bfloat16 LeNet eval accuracy {accuracy:?}"
    );
}

#[test]
fn transform_writes_predictions_a_trained_model_makes() {
    let dir = TempDir::new("transform");
    let manifest = dir.write("m.toml", &lenet_manifest(2, ""));
    let weights = dir.path().join("weights");
    let out = fe_host()
        .args([
            "run",
            &manifest.to_string_lossy(),
            "--quiet",
            "--save-weights",
            &weights.to_string_lossy(),
        ])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(weights.join("lenet.safetensors").exists());
    let [_, _, ex, ey] = crate::util::digits();
    let predictions = dir.path().join("pred.safetensors");
    let out = fe_host()
        .args([
            "transform",
            &manifest.to_string_lossy(),
            "--weights",
            &weights.to_string_lossy(),
            "--input",
            &format!("x={}", ex.display()),
            "--out",
            &predictions.to_string_lossy(),
        ])
        .output()
        .expect("transform");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_contains!(
        stdout,
        "transformed 1000 samples in infer mode; wrote y_pred [1000, 10]"
    );
    // Infer mode runs no loss: only the model's output is produced.
    let tensors = fe_host::system::tensors::read(&predictions).unwrap();
    assert_eq!(
        tensors.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["y_pred"]
    );
    let labels = fe_host::pipeline::idx::read(ey)
        .unwrap()
        .to_tensor()
        .unwrap()
        .to_kind(tch::Kind::Int64);
    let correct = tensors[0]
        .1
        .argmax(-1, false)
        .eq_tensor(&labels)
        .sum(tch::Kind::Int64)
        .int64_value(&[]);
    assert!(correct >= 930, "{correct}/1000 right");
}

#[test]
fn load_weights_refuses_a_file_that_does_not_fit_the_model() {
    let dir = TempDir::new("bad-weights");
    let manifest = dir.write("m.toml", &lenet_manifest(1, ""));
    let file = dir.path().join("lenet.safetensors");
    fe_host::system::tensors::write(
        &file,
        &[(
            "fc2.weight".to_owned(),
            tch::Tensor::zeros([3, 3], (tch::Kind::Float, tch::Device::Cpu)),
        )],
    )
    .unwrap();
    let out = crate::util::run_failing(
        &[
            "run",
            &manifest.to_string_lossy(),
            "--load-weights",
            &file.to_string_lossy(),
        ],
        6,
    );
    assert_text_eq!(
        out.stderr,
        format!(
            "error: {}: is missing `conv1.bias` of model `lenet`\n",
            file.display()
        )
    );
}

#[test]
fn a_dataset_plugin_generates_data_that_splits_and_trains() {
    let dir = TempDir::new("blobs");
    let manifest = r#"[run]
epochs = 3
seed = 5
log_steps = 0

[pipeline]
batch_size = 32

[pipeline.data.train]
type = "GaussianBlobs"
samples = 1500
features = 2
classes = 3
seed = 9

[pipeline.data.eval]
split_from = "train"
fraction = 0.2
stratify = "y"

[[models]]
name = "mlp"
architecture = "MLP"
inputs = 2
hidden = [16]
classes = 3
softmax = true
optimizer = { type = "adam", lr = 0.01 }

{ops}"#;
    let manifest = manifest.replace("{ops}", &classifier_ops("mlp"));
    let (out, summary) = run_with_summary(&dir, &manifest);
    // 1500 generated samples: 300 split off (stratified) for evaluation, 1200 left to train.
    assert_contains!(out.stdout, "train: 1200 samples");
    assert_contains!(out.stdout, "eval: 300 samples");
    let accuracy = values(&summary, "eval", "accuracy");
    assert!(accuracy[2] > 0.9, "eval accuracy {accuracy:?}");
}

#[test]
fn transform_in_train_mode_refuses_a_network_that_updates_a_model() {
    // `transform` runs without gradients and saves no weights: training there would fail deep
    // inside the UpdateOp, or change nothing anyone keeps.
    let dir = TempDir::new("transform-train");
    let manifest = dir.write("m.toml", &lenet_manifest(1, ""));
    let out_file = dir.path().join("out.safetensors");
    let out = crate::util::run_failing(
        &[
            "transform",
            &manifest.to_string_lossy(),
            "--random-weights",
            "--mode",
            "train",
            "--limit",
            "8",
            "--out",
            &out_file.to_string_lossy(),
        ],
        2,
    );
    assert_contains!(out.stderr, "UpdateOp (network.ops[2])");
    assert_contains!(out.stderr, "train mode");
    assert!(!out_file.exists(), "nothing written");
    // In eval mode the same network transforms (the loss runs, the update does not).
    let out = fe_host()
        .args([
            "transform",
            &manifest.to_string_lossy(),
            "--random-weights",
            "--mode",
            "eval",
            "--limit",
            "8",
            "--out",
            &out_file.to_string_lossy(),
        ])
        .output()
        .expect("transform");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = fe_host::system::tensors::read(&out_file)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    names.sort();
    assert_eq!(names, ["ce", "y_pred"]);
}

#[test]
fn an_output_that_cannot_be_written_is_named_as_asked_not_by_its_temporary() {
    let dir = TempDir::new("predict-unwritable");
    let manifest = dir.write("m.toml", &lenet_manifest(1, ""));
    let [_, _, eval_x, _] = crate::util::digits();
    let out_file = dir.path().join("missing/out.csv");
    let out = fe_host()
        .args([
            "predict",
            &manifest.to_string_lossy(),
            "--random-weights",
            "--input",
            &format!("x={}", eval_x.display()),
            "--limit",
            "4",
            "--out",
            &out_file.to_string_lossy(),
        ])
        .output()
        .expect("predict");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert_contains!(stderr, &*out_file.to_string_lossy());
    assert!(!stderr.contains(".partial"), "{stderr}");
}
