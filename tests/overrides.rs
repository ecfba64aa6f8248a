//! `--set KEY=VALUE`: manifest values changed from the command line, errors that point at the
//! override, and checkpoints that treat overrides like edits of the file.

use crate::util::{fe_host, lenet_manifest, line_of, run_failing, steps, Run, TempDir};

/// LeNet on the small digits for 3 short epochs, with checkpoints every epoch.
fn manifest() -> String {
    lenet_manifest(3, "\n[checkpoint]\ndir = \"ckpt\"\nevery_epochs = 1\n").replace(
        "log_steps = 50",
        "log_steps = 2\ntrain_steps_per_epoch = 4\neval_steps_per_epoch = 2",
    )
}

fn run_in(dir: &TempDir, args: &[&str]) -> Run {
    fe_host()
        .current_dir(dir.path())
        .args(["run", "m.toml", "-q"])
        .args(args)
        .output()
        .unwrap()
        .into()
}

#[test]
fn overrides_change_values_anywhere_in_the_manifest() {
    let dir = TempDir::new("set-values");
    dir.write("m.toml", &manifest());
    let out = run_in(
        &dir,
        &[
            "--set",
            "run.epochs=1",
            "--set",
            "models.lenet.optimizer.lr=0.005",
            "--set",
            "network.ops[1].inputs=[\"y_pred\", \"y\"]",
            "--set",
            "checkpoint.dir=other",
            "--summary",
            "summary.json",
        ],
    );
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap())
            .unwrap();
    let lr = steps(&summary, "train", "lenet_lr");
    assert!(!lr.is_empty(), "lenet_lr logged: {summary}");
    assert!(lr.iter().all(|(_, v)| (*v - 0.005).abs() < 1e-12), "{lr:?}");
    assert_eq!(
        lr.last().map(|(step, _)| *step),
        Some(4),
        "one epoch of 4 steps"
    );
    assert!(
        dir.path().join("other/latest").exists(),
        "checkpoint.dir overridden"
    );
    assert!(!dir.path().join("ckpt").exists());
}

#[test]
fn a_bad_override_names_itself_and_a_bad_file_still_points_at_its_line() {
    let dir = TempDir::new("set-errors");
    let text = manifest();
    let path = dir.write("m.toml", &text).to_string_lossy().into_owned();
    let out = run_failing(
        &["run", &path, "--set", "models.resnet.optimizer.lr=0.1"],
        2,
    );
    assert_text_eq!(
        out.stderr,
        "error: --set models.resnet.optimizer.lr=0.1: `models` has no entry named `resnet` (names: lenet)\n"
    );
    let out = run_failing(&["run", &path, "--set", "run.epochs=\"three\""], 2);
    assert!(
        out.stderr
            .starts_with("error: --set run.epochs=\"three\": run.epochs: invalid type: string"),
        "{}",
        out.stderr
    );
    let out = run_failing(
        &["run", &path, "--set", "network.ops[1].op=CrossEntropyy"],
        2,
    );
    assert_contains!(
        out.stderr,
        "error: --set network.ops[1].op=CrossEntropyy: network.ops[1].op: unknown tensor-op `CrossEntropyy`"
    );
    let out = run_failing(&["run", &path, "--set", "run.epochs"], 2);
    assert_contains!(out.stderr, "expected KEY=VALUE");
    // A mistake in the file, next to an unrelated override, is still located in the file.
    let broken = text.replace("seed = 7", "seed = 7\nepoch = 3");
    let path = dir.write("m.toml", &broken).to_string_lossy().into_owned();
    let out = run_failing(&["run", &path, "--set", "run.epochs=1"], 2);
    let line = line_of(&broken, "epoch = 3");
    assert!(
        out.stderr
            .starts_with(&format!("error: {path}:{line}:1: run.epoch: unknown field")),
        "{}",
        out.stderr
    );
}

#[test]
fn a_resume_compares_overrides_like_edits_of_the_file() {
    let dir = TempDir::new("set-resume");
    dir.write("m.toml", &manifest());
    let lr = "models.lenet.optimizer.lr=0.002";
    let out = run_in(&dir, &["--set", lr, "--set", "run.epochs=1"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Without the optimizer override the run is another run.
    let out = run_in(&dir, &["--resume", "--set", "run.epochs=2"]);
    assert_eq!(out.code, 6, "{}{}", out.stdout, out.stderr);
    assert_contains!(out.stderr, "cannot resume");
    assert_contains!(out.stderr, "models");
    // With it, only the epoch count differs: a compatible change, given consent.
    let out = run_in(
        &dir,
        &[
            "--resume",
            "--allow-changes",
            "--set",
            lr,
            "--set",
            "run.epochs=2",
        ],
    );
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        dir.path().join("ckpt/ckpt-8").exists(),
        "trained on to step 8"
    );
}
