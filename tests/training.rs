//! Real training runs through the binary.

use crate::util::{fe_host, lenet_manifest, TempDir};

fn summary(dir: &TempDir, manifest: &str) -> serde_json::Value {
    let path = dir.write("m.toml", manifest);
    let summary = dir.path().join("summary.json");
    let out = fe_host()
        .args([
            "run",
            &path.to_string_lossy(),
            "--summary",
            &summary.to_string_lossy(),
        ])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(summary).expect("summary file"))
        .expect("summary json")
}

fn values(summary: &serde_json::Value, mode: &str, key: &str) -> Vec<f64> {
    summary["history"][mode][key]
        .as_object()
        .map(|steps| steps.values().filter_map(|v| v.as_f64()).collect())
        .unwrap_or_default()
}

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
    let strip = |mut s: serde_json::Value| {
        // Timings differ between runs; everything else must not.
        for mode in ["train", "eval"] {
            if let Some(keys) = s["history"][mode].as_object_mut() {
                keys.retain(|k, _| !k.contains("sec"));
            }
        }
        s
    };
    assert_eq!(strip(a), strip(b));
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
