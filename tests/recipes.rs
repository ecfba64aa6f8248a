//! The FastEstimator recipes in `examples/` learn in CI-sized runs of the real binary:
//! cifar10_fast (ResNet9, pad + crop + flip + cutout, one-cycle learning rate), FGSM
//! adversarial training, and the tabular classifier on the bundled breast-cancer table.
//! (`examples/mixup.toml` is tests/mixing.rs's, `examples/unet.toml` tests/zoo.rs's.)

use crate::util::{
    copy_bundled_data, copy_example, fe_host, steps, values, OutputWithin, Run, TempDir,
};

/// Copies `examples/<example>.toml` into a fresh directory with each `(from, to)` replaced
/// (asserting each `from` is there, so an edit cannot silently stop applying).
fn shrunk_example(name: &str, edits: &[(&str, &str)]) -> TempDir {
    let dir = TempDir::new(&format!("recipe-{name}"));
    copy_example(&dir, name);
    let manifest = dir.path().join(format!("examples/{name}.toml"));
    let mut text = std::fs::read_to_string(&manifest).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "`{from}` not in examples/{name}.toml");
        text = text.replace(from, to);
    }
    std::fs::write(&manifest, text).unwrap();
    dir
}

/// `fe-host datagen cifar` into `dir/data/cifar`, where the examples read it.
fn small_cifar(dir: &TempDir, train: usize, eval: usize) {
    let out: Run = fe_host()
        .current_dir(dir.path())
        .args(["datagen", "cifar", "--out", "data/cifar"])
        .args(["--train", &train.to_string(), "--eval", &eval.to_string()])
        .args(["--test", "0", "--seed", "5"])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// Runs the copied example with one libtorch thread and returns its summary.
fn train(dir: &TempDir, name: &str) -> (Run, serde_json::Value) {
    let out: Run = fe_host()
        .current_dir(dir.path())
        .args(["run", &format!("examples/{name}.toml")])
        .args(["--summary", "summary.json", "--threads", "1"])
        .args(["--log-dir", "runs"])
        .output_within();
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let summary =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap())
            .unwrap();
    (out, summary)
}

#[test]
fn cifar10_fast_learns_under_its_one_cycle_rate_with_the_augmentation_chain() {
    // 768 images, 12 steps an epoch, 2 epochs: the cycle peaks at step 4 and ends at step 24.
    let dir = shrunk_example(
        "cifar10_fast",
        &[
            ("epochs = 4", "epochs = 2"),
            ("width = 16", "width = 8"),
            ("warmup = 66", "warmup = 4"),
            ("total = 316", "total = 24"),
            ("log_steps = 100", "log_steps = 1"),
        ],
    );
    small_cifar(&dir, 768, 256);
    let (out, summary) = train(&dir, "cifar10_fast");
    let lr = steps(&summary, "train", "resnet9_lr");
    let peak = lr.iter().map(|(_, v)| *v).fold(f64::MIN, f64::max);
    let at = |step: u64| lr.iter().find(|(s, _)| *s == step).map(|(_, v)| *v);
    // Up to 0.004 at step 4, then down linearly: one-third of the way up at step 1 (ramp from
    // init_lr / warmup), 0.004 * (24 - 20) / 20 at step 20.
    assert!((peak - 0.004).abs() < 1e-9, "lr {lr:?}");
    assert!((at(1).unwrap() - 0.001).abs() < 1e-9, "lr {lr:?}");
    assert!((at(20).unwrap() - 0.0008).abs() < 1e-9, "lr {lr:?}");
    let accuracy = values(&summary, "eval", "accuracy");
    // Ten classes (chance 0.1); measured 0.5 and above on this data.
    assert_eq!(accuracy.len(), 2, "{summary}");
    assert!(
        accuracy[1] > 0.35,
        "eval accuracy {accuracy:?}\n{}",
        out.stdout
    );
}

#[test]
fn fgsm_adversarial_training_learns_and_its_attack_hurts() {
    // 1536 images, 48 steps an epoch, 3 epochs.
    let dir = shrunk_example("fgsm", &[("epochs = 4", "epochs = 3")]);
    small_cifar(&dir, 1536, 256);
    let (out, summary) = train(&dir, "fgsm");
    let clean = values(&summary, "eval", "clean_accuracy");
    let adversarial = values(&summary, "eval", "adversarial_accuracy");
    let (base_ce, adv_ce) = (
        values(&summary, "eval", "base_ce"),
        values(&summary, "eval", "adv_ce"),
    );
    let avg_ce = values(&summary, "eval", "avg_ce");
    assert_eq!(clean.len(), 3, "{summary}");
    assert_eq!(adversarial.len(), 3, "{summary}");
    assert_eq!(
        (base_ce.len(), adv_ce.len(), avg_ce.len()),
        (3, 3, 3),
        "{summary}"
    );
    // Ten classes (chance 0.1): it learns the clean images (the full example: 0.33 after its
    // first 157 steps).
    assert!(clean[2] > 0.25, "clean accuracy {clean:?}\n{}", out.stdout);
    // The attack (ε = 0.04 on normalised images) finds harder inputs in every epoch: an FGSM
    // that returned its input unchanged, or stepped down the gradient, fails here.
    for epoch in 0..3 {
        assert!(
            adversarial[epoch] < clean[epoch],
            "epoch {}: adversarial {adversarial:?} vs clean {clean:?}",
            epoch + 1
        );
        assert!(
            adv_ce[epoch] > base_ce[epoch],
            "epoch {}: adv_ce {adv_ce:?} vs base_ce {base_ce:?}",
            epoch + 1
        );
        // The update's loss is the mean of the two (Average), per sample and so per epoch.
        let mean = (base_ce[epoch] + adv_ce[epoch]) / 2.0;
        assert!(
            (avg_ce[epoch] - mean).abs() < 1e-4 * mean,
            "{avg_ce:?} vs {mean}"
        );
    }
    // Trained on both, it also gets better on attacked images.
    assert!(adversarial[2] > adversarial[0], "{adversarial:?}");
    // Training logs the monitored losses with the one it updates on.
    for key in ["avg_ce", "base_ce", "adv_ce"] {
        assert!(
            !values(&summary, "train", key).is_empty(),
            "train {key}: {summary}"
        );
    }
}

#[test]
fn the_tabular_classifier_learns_the_bundled_breast_cancer_table() {
    let dir = shrunk_example("tabular", &[("epochs = 10", "epochs = 3")]);
    copy_bundled_data(&dir);
    let (out, summary) = train(&dir, "tabular");
    let accuracy = values(&summary, "eval", "accuracy");
    let ce = values(&summary, "eval", "ce");
    assert_eq!(accuracy.len(), 3, "{summary}");
    // Always answering "benign" scores 71/114 = 0.62; without the feature scaling, or with the
    // columns mixed up between rows, the network stays near that.
    assert!(
        accuracy[2] > 0.93,
        "eval accuracy {accuracy:?}\n{}",
        out.stdout
    );
    assert!(ce[2] < ce[0] && ce[2] < 0.2, "eval ce {ce:?}");
}

#[test]
fn monitor_names_must_name_a_key_the_network_writes() {
    let dir = shrunk_example(
        "fgsm",
        &[(
            "monitor_names = [\"base_ce\", \"adv_ce\"]",
            "monitor_names = [\"base_cee\"]",
        )],
    );
    small_cifar(&dir, 64, 16);
    let out: Run = fe_host()
        .current_dir(dir.path())
        .args(["render", "examples/fgsm.toml"])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("run.monitor_names: `base_cee` is not a key any network op writes"),
        "{}",
        out.stderr
    );
}
