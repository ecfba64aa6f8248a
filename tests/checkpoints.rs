//! Checkpoints through the binary: exact resume, refusals of bad checkpoints, the
//! Determined-style hooks, smoke mode, and a harness that kills runs at random moments.

use std::path::{Path, PathBuf};

use crate::util::{
    classifier_ops, copy_dir, fe_host, lenet_manifest, run, run_failing, Run, TempDir,
};

/// LeNet on the small digits: 3 epochs of 6 steps, a noisy augmentation in the pipeline and
/// the network (so random state matters), checkpoints every 4 steps and every epoch.
pub(crate) fn manifest(extra: &str) -> String {
    let noise = r#"
[[pipeline.ops]]
op = "Noise"
outputs = "noise"
shape = [1, 28, 28]
std = 0.2
mode = "train"
"#;
    let average = r#"[[network.ops]]
op = "Average"
inputs = ["x", "noise"]
outputs = "x"
mode = "train"

[[network.ops]]
op = "ModelOp""#;
    let checkpoint = format!(
        "{noise}\n[checkpoint]\ndir = \"ckpt\"\nevery_steps = 4\nevery_epochs = 1\n{extra}\n"
    );
    lenet_manifest(3, &checkpoint)
        .replace("[[network.ops]]\nop = \"ModelOp\"", average)
        .replace(
            "log_steps = 50",
            "log_steps = 2\ntrain_steps_per_epoch = 6\neval_steps_per_epoch = 2",
        )
}

/// Runs `fe-host run m.toml args...` in `dir`.
pub(crate) fn run_in(dir: &Path, args: &[&str]) -> Run {
    fe_host()
        .current_dir(dir)
        .args(["run", "m.toml"])
        .args(args)
        .output()
        .unwrap()
        .into()
}

fn history(path: &Path, mode: &str, key: &str) -> serde_json::Value {
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    summary["history"][mode][key].clone()
}

/// A run of `text` in `dir/name`, with weights and summary saved; returns its directory.
pub(crate) fn full_run(dir: &TempDir, name: &str, text: &str, args: &[&str]) -> PathBuf {
    let run_dir = dir.path().join(name);
    std::fs::create_dir_all(&run_dir).unwrap();
    std::fs::write(run_dir.join("m.toml"), text).unwrap();
    let mut all = vec![
        "--save-weights",
        "weights",
        "--summary",
        "summary.json",
        "-q",
    ];
    all.extend_from_slice(args);
    let out = run_in(&run_dir, &all);
    assert_eq!(out.code, 0, "{name}: {}{}", out.stdout, out.stderr);
    run_dir
}

fn assert_same_run(a: &Path, b: &Path) {
    let weights = |d: &Path| std::fs::read(d.join("weights/lenet.safetensors")).unwrap();
    assert!(
        weights(a) == weights(b),
        "weights differ between {} and {}",
        a.display(),
        b.display()
    );
    for (mode, key) in [("train", "ce"), ("eval", "ce"), ("eval", "accuracy")] {
        let (x, y) = (
            history(&a.join("summary.json"), mode, key),
            history(&b.join("summary.json"), mode, key),
        );
        assert!(
            x.is_object() && !x.as_object().unwrap().is_empty(),
            "{mode} {key} logged"
        );
        assert_eq!(x, y, "{mode} {key}");
    }
}

#[test]
fn resuming_at_an_epoch_boundary_or_mid_epoch_ends_bit_for_bit_equal() {
    let dir = TempDir::new("exact-resume");
    let text = manifest("");
    let whole = full_run(&dir, "whole", &text, &[]);
    let list = run(&["checkpoint", "list", &whole.join("ckpt").to_string_lossy()]);
    assert_contains!(list.stdout, "ckpt-6: step 6, after epoch 1");
    assert_contains!(
        list.stdout,
        "ckpt-8: step 8, inside epoch 2 (2 batches done)"
    );
    for (name, checkpoint) in [("boundary", "ckpt-6"), ("mid-epoch", "ckpt-8")] {
        let from = whole.join("ckpt").join(checkpoint);
        let resumed = full_run(&dir, name, &text, &["--resume", &from.to_string_lossy()]);
        assert_same_run(&whole, &resumed);
    }
    // Without the restored random state the augmentation differs, and so do the weights: the
    // comparison above can fail.
    let other_seed = full_run(
        &dir,
        "other-seed",
        &text.replace("seed = 7", "seed = 8"),
        &[],
    );
    let weights = |d: &Path| std::fs::read(d.join("weights/lenet.safetensors")).unwrap();
    assert!(weights(&whole) != weights(&other_seed));
}

#[test]
fn more_epochs_resume_from_latest_with_consent() {
    let dir = TempDir::new("more-epochs");
    let text = manifest("keep_last = 2");
    let first = full_run(&dir, "run", &text, &[]);
    let names = crate::util::file_names(&first.join("ckpt"));
    assert_eq!(names.len(), 3, "two checkpoints and `latest`: {names:?}");
    // The command line's --epochs is explicit; an edited manifest needs --allow-changes.
    // (Not --quiet: the resume line is what this checks, and --quiet silences it.)
    let out = run_in(&first, &["--resume", "--epochs", "4"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(out.stdout, "fe-host resume: ");
    assert_contains!(out.stdout, "step 18, after epoch 3");
    std::fs::write(
        first.join("m.toml"),
        text.replace("epochs = 3", "epochs = 5"),
    )
    .unwrap();
    let out = run_in(&first, &["--resume"]);
    assert_eq!(out.code, 6, "{}", out.stderr);
    assert_contains!(out.stderr, "run.epochs: 3 -> 5; pass --allow-changes");
    let out = run_in(&first, &["--resume", "--allow-changes"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(out.stdout, "step 24, after epoch 4");
}

/// Rewrites `MANIFEST.json` of `checkpoint` after a test edited its files, so that only the
/// check under test can catch the edit.
pub(crate) fn rehash(checkpoint: &Path) {
    let list_path = checkpoint.join("MANIFEST.json");
    let mut list: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&list_path).unwrap()).unwrap();
    let files = list["files"].as_array_mut().unwrap();
    files.retain(|f| checkpoint.join(f["path"].as_str().unwrap()).exists());
    for file in files.iter_mut() {
        let bytes = std::fs::read(checkpoint.join(file["path"].as_str().unwrap())).unwrap();
        file["bytes"] = bytes.len().into();
        file["sha256"] = sha256(&bytes).into();
    }
    std::fs::write(&list_path, serde_json::to_vec_pretty(&list).unwrap()).unwrap();
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn damaged_or_foreign_checkpoints_are_refused_naming_the_file() {
    let dir = TempDir::new("refusals");
    let text = manifest("");
    let source = full_run(&dir, "source", &text, &[]);
    let fresh_copy = |name: &str| {
        let target = dir.path().join(name);
        std::fs::create_dir_all(target.join("ckpt-6")).unwrap();
        copy_dir(&source.join("ckpt/ckpt-6"), &target.join("ckpt-6"));
        std::fs::write(target.join("m.toml"), &text).unwrap();
        target
    };
    let refuse = |run_dir: &Path, args: &[&str], needle: &str| {
        let mut all = vec!["run", "m.toml", "--resume", "ckpt-6"];
        all.extend_from_slice(args);
        let out: Run = fe_host()
            .current_dir(run_dir)
            .args(&all)
            .output()
            .unwrap()
            .into();
        assert_eq!(out.code, 6, "{}{}", out.stdout, out.stderr);
        assert_contains!(out.stderr, needle);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(!out.stdout.contains("fe-host train"), "nothing may train");
    };

    let truncated = fresh_copy("truncated");
    let weights = truncated.join("ckpt-6/models/lenet.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    refuse(&truncated, &[], "ckpt-6/models/lenet.safetensors: is ");
    refuse(&truncated, &[], "the file is truncated or was changed");
    // ... and a truncated file whose hash was recomputed still fails to parse, naming it.
    rehash(&truncated.join("ckpt-6"));
    refuse(&truncated, &[], "ckpt-6/models/lenet.safetensors: ");

    let flipped = fresh_copy("flipped");
    let optim = flipped.join("ckpt-6/optim/lenet.0.safetensors");
    let mut bytes = std::fs::read(&optim).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&optim, bytes).unwrap();
    refuse(
        &flipped,
        &[],
        "ckpt-6/optim/lenet.0.safetensors: sha256 is ",
    );

    let missing = fresh_copy("missing-state");
    std::fs::remove_file(missing.join("ckpt-6/states/network.ops.3.json")).unwrap();
    rehash(&missing.join("ckpt-6"));
    refuse(
        &missing,
        &[],
        "ckpt-6/states/network.ops.3.json: is missing from the checkpoint",
    );

    let foreign = fresh_copy("foreign");
    std::fs::write(
        foreign.join("m.toml"),
        text.replace("batch_size = 32", "batch_size = 16"),
    )
    .unwrap();
    refuse(
        &foreign,
        &["--allow-changes"],
        "cannot resume: the run differs from the checkpoint: pipeline.batch_size: 32 -> 16",
    );

    let counted = fresh_copy("count");
    let components = counted.join("ckpt-6/components.json");
    let mut list: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&components).unwrap()).unwrap();
    list.retain(|c| c["id"] != "traces.2");
    std::fs::write(&components, serde_json::to_vec(&list).unwrap()).unwrap();
    rehash(&counted.join("ckpt-6"));
    refuse(
        &counted,
        &[],
        "components.json: has 2 traces but this run has 3",
    );
}

#[test]
fn checkpoint_and_trial_hooks_fire_in_order_even_when_an_op_fails() {
    let dir = TempDir::new("hooks");
    let events = dir.path().join("events.txt");
    let trace = format!(
        "\n[[traces]]\ntrace = \"RecordEvents\"\nfile = \"{}\"\n",
        events.display()
    );
    let text = manifest("").replace("[checkpoint]", &format!("{trace}\n[checkpoint]"));
    let first = full_run(
        &dir,
        "run",
        &text.replace("every_steps = 4\n", ""),
        &["--epochs", "2"],
    );
    let lines = std::fs::read_to_string(&events).unwrap();
    let ckpt = first.join("ckpt");
    assert_eq!(
        lines,
        format!(
            "on_begin\non_checkpoint_end {0}/ckpt-6\non_checkpoint_end {0}/ckpt-12\non_end\non_trial_close\n",
            ckpt.display()
        )
    );
    std::fs::remove_file(&events).unwrap();
    let out = run_in(&first, &["--resume", "--epochs", "3", "-q"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines = std::fs::read_to_string(&events).unwrap();
    assert!(
        lines.starts_with(&format!(
            "on_checkpoint_load {}/ckpt-12\non_begin\n",
            ckpt.display()
        )),
        "{lines}"
    );
    std::fs::remove_file(&events).unwrap();

    // A failing op ends the run with an error, and the trial still closes.
    let failing = text.replace(
        "[[network.ops]]\nop = \"UpdateOp\"",
        "[[network.ops]]\nop = \"Panic\"\ninputs = \"ce\"\noutputs = \"ce\"\nat_step = 3\nmode = \"train\"\n\n[[network.ops]]\nop = \"UpdateOp\"",
    );
    let failed = dir.path().join("failed");
    std::fs::create_dir_all(&failed).unwrap();
    std::fs::write(failed.join("m.toml"), failing).unwrap();
    let out = run_in(&failed, &["--quiet"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_contains!(out.stderr, "fe-faulty::Panic panicked in forward");
    let lines = std::fs::read_to_string(&events).unwrap();
    assert_eq!(lines, "on_begin\non_trial_close\n");
}

#[test]
fn background_and_foreground_writes_give_the_same_run_and_the_same_hooks() {
    let dir = TempDir::new("background");
    let run_with = |name: &str, background: bool| {
        let events = dir.path().join(format!("events-{name}.txt"));
        let trace = format!(
            "\n[[traces]]\ntrace = \"RecordEvents\"\nfile = \"{}\"\n",
            events.display()
        );
        let text = manifest(&format!("background = {background}"))
            .replace("[checkpoint]", &format!("{trace}\n[checkpoint]"));
        let run_dir = full_run(&dir, name, &text, &["--epochs", "2"]);
        let lines = std::fs::read_to_string(&events).unwrap();
        let lines = lines.replace(&run_dir.display().to_string(), "RUN");
        (run_dir, lines)
    };
    let (background, background_events) = run_with("background", true);
    let (foreground, foreground_events) = run_with("foreground", false);
    // Hooks for a background write fire when the run next waits for it (the next checkpoint,
    // the end of the run): the same moments in every run, so the same events in the same order.
    assert_eq!(
        background_events,
        "on_begin\n\
         on_checkpoint_end RUN/ckpt/ckpt-4\n\
         on_checkpoint_end RUN/ckpt/ckpt-6\n\
         on_checkpoint_end RUN/ckpt/ckpt-8\n\
         on_checkpoint_end RUN/ckpt/ckpt-12\n\
         on_checkpoint_end RUN/ckpt/ckpt-12.1\n\
         on_end\non_trial_close\n"
    );
    assert_eq!(background_events, foreground_events);
    assert_same_run(&background, &foreground);
    for run_dir in [&background, &foreground] {
        let root = run_dir.join("ckpt");
        let out = run(&["checkpoint", "verify", &root.to_string_lossy()]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert_contains!(out.stdout, "ckpt-12.1");
    }
}

#[test]
fn a_plugin_datasets_state_goes_into_the_checkpoint_and_back() {
    let dir = TempDir::new("dataset-state");
    let restores = dir.path().join("restores.txt");
    let text = format!(
        r#"[run]
epochs = 1
seed = 3
log_steps = 0

[pipeline]
batch_size = 8

[pipeline.data.train]
type = "StatefulDataset"
samples = 48
tag = "blue"
file = "{}"

[pipeline.data.eval]
split_from = "train"
fraction = 0.25

[[models]]
name = "mlp"
architecture = "MLP"
inputs = 2
hidden = [4]
classes = 2
softmax = true
optimizer = {{ type = "sgd", lr = 0.1 }}

{}
[checkpoint]
dir = "ckpt"
every_epochs = 1
"#,
        restores.display(),
        classifier_ops("mlp")
    );
    std::fs::write(dir.path().join("m.toml"), text).unwrap();
    let out = run_in(dir.path(), &["-q"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!restores.exists(), "nothing is restored in a fresh run");
    // Both splits are views of the one plugin dataset: each saves its state.
    let checkpoint = dir.path().join("ckpt/ckpt-5");
    for id in ["pipeline.data.0", "pipeline.data.1"] {
        let json = std::fs::read_to_string(checkpoint.join(format!("states/{id}.json"))).unwrap();
        assert_eq!(json, r#"{"tag":"blue"}"#, "{id}");
        assert!(checkpoint
            .join(format!("states/{id}.safetensors"))
            .is_file());
    }
    let out = run_in(dir.path(), &["-q", "--resume", "--epochs", "2"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        std::fs::read_to_string(&restores).unwrap(),
        "load_state tag=blue offsets=[1.5, -2.0]\n".repeat(2)
    );
}

#[test]
fn smoke_mode_trains_evaluates_saves_and_reloads_in_seconds() {
    let dir = TempDir::new("smoke");
    let path = dir.write("m.toml", &manifest(""));
    let out = run(&["run", &path.to_string_lossy(), "--smoke"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_contains!(
        out.stdout,
        "fe-host smoke: ok: trained 5 steps, evaluated, saved a checkpoint ("
    );
    assert_contains!(out.stdout, "fe-host eval: step: 5; epoch: 1;");
    assert!(
        !dir.path().join("ckpt").exists(),
        "smoke mode leaves the manifest's checkpoints alone"
    );
}

#[test]
fn verify_reports_a_complete_checkpoint_and_refuses_a_broken_one() {
    let dir = TempDir::new("verify");
    let first = full_run(&dir, "run", &manifest(""), &["--epochs", "1"]);
    let root = first.join("ckpt");
    let out = run(&["checkpoint", "verify", &root.to_string_lossy()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(out.stdout, "all hashes match); step 6, after epoch 1");
    std::fs::write(root.join("ckpt-6/system.json"), "{}").unwrap();
    let out = run_failing(&["checkpoint", "verify", &root.to_string_lossy()], 6);
    assert_contains!(
        out.stderr,
        "ckpt-6/system.json: is 2 bytes but MANIFEST.json says"
    );
}

#[test]
fn a_resumed_run_log_reads_as_if_the_run_had_never_stopped() {
    use fe_host::report::jsonl::{read_jsonl_rows, JsonlRow};
    let dir = TempDir::new("resume-log");
    let text = manifest("").replace("[run]\n", "[run]\nlog_dir = \"logs\"\n");
    let whole = full_run(&dir, "whole", &text, &[]);
    // The crashed attempt wrote rows past its last checkpoint (ckpt-8, inside epoch 2); the
    // resumed run must drop them and write them again, once. It appends to the version its
    // checkpoint's run wrote (found by the run id in run.json).
    let resumed_dir = dir.path().join("resumed");
    std::fs::create_dir_all(resumed_dir.join("logs/version_0")).unwrap();
    for file in ["log.jsonl", "run.json"] {
        std::fs::copy(
            whole.join("logs/version_0").join(file),
            resumed_dir.join("logs/version_0").join(file),
        )
        .unwrap();
    }
    let from = whole.join("ckpt/ckpt-8");
    let resumed = full_run(
        &dir,
        "resumed",
        &text,
        &["--resume", &from.to_string_lossy()],
    );
    let rows = |d: &Path| -> Vec<JsonlRow> {
        let mut rows = read_jsonl_rows(&d.join("logs/version_0/log.jsonl")).unwrap();
        for row in &mut rows {
            if let JsonlRow::Epoch(row) = row {
                // Timings differ between runs; everything else must not.
                row.values.retain(|k, _| !k.contains("sec"));
            }
        }
        rows
    };
    let (a, b) = (rows(&whole), rows(&resumed));
    // A row at every logged step (log_steps = 2: steps 1, 2, 4, ..., 18 of three 6-step
    // epochs), one at each training epoch's end, and the evaluation rows.
    let count = |mode: &str| {
        a.iter()
            .filter(|r| matches!(r, JsonlRow::Epoch(r) if r.mode == mode))
            .count()
    };
    assert_eq!((count("train"), count("eval")), (10 + 3, 3), "{a:?}");
    assert_eq!(a, b);
    assert!(resumed.join("logs/version_0/metrics.svg").is_file());
    assert!(!resumed.join("logs/version_1").exists(), "a new version");
}

#[test]
fn smoke_mode_reloads_its_checkpoint_before_the_trial_closes() {
    // Determined's order: `on_trial_close` is the last call a trace sees.
    let dir = TempDir::new("smoke-order");
    let events = dir.path().join("events.txt");
    let trace = format!(
        "\n[[traces]]\ntrace = \"RecordEvents\"\nfile = \"{}\"\n",
        events.display()
    );
    let text = manifest("").replace("[checkpoint]", &format!("{trace}\n[checkpoint]"));
    let path = dir.write("m.toml", &text);
    let out = run(&["run", &path.to_string_lossy(), "--smoke", "-q"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let lines = std::fs::read_to_string(&events).unwrap();
    let calls: Vec<&str> = lines
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(
        calls,
        [
            "on_begin",
            "on_checkpoint_end",
            "on_end",
            "on_checkpoint_load",
            "on_trial_close"
        ],
        "{lines}"
    );
}

#[test]
fn a_train_metric_resumed_mid_epoch_equals_the_uninterrupted_one() {
    let dir = TempDir::new("metric-resume");
    // Accuracy in training too: its running totals are inside the epoch when ckpt-8 is taken.
    let text = manifest("").replace(
        "outputs = \"accuracy\"\n",
        "outputs = \"accuracy\"\nmode = [\"train\", \"eval\"]\n",
    );
    let whole = full_run(&dir, "whole", &text, &[]);
    let from = whole.join("ckpt/ckpt-8");
    let resumed = full_run(
        &dir,
        "mid-epoch",
        &text,
        &["--resume", &from.to_string_lossy()],
    );
    let train_accuracy = |d: &Path| history(&d.join("summary.json"), "train", "accuracy");
    let expected = train_accuracy(&whole);
    assert_eq!(
        expected.as_object().map(|steps| steps.len()),
        Some(3),
        "one train accuracy per epoch: {expected}"
    );
    assert_eq!(train_accuracy(&resumed), expected);
    assert_same_run(&whole, &resumed);
}
