//! `fe-host pipeline`: a few batches of a manifest's pipeline (shapes, dtypes, value ranges)
//! and `--benchmark` (samples/s overall and per op), on the examples and small manifests; and
//! the rule that at most one `Batch` op applies to a mode, ds_id and epoch.

use crate::util::{copy_example, fe_host, run_failing, small_digits, Run, TempDir};

/// A copy of `examples/lenet.toml` next to a small generated `data/digits` (96 training and
/// 40 evaluation samples), as the render tests lay it out.
fn lenet_dir() -> TempDir {
    let dir = TempDir::new("pipeline-lenet");
    copy_example(&dir, "lenet");
    small_digits(&dir);
    dir
}

fn run_in(dir: &TempDir, args: &[&str]) -> Run {
    fe_host()
        .current_dir(dir.path())
        .args(args)
        .output()
        .unwrap()
        .into()
}

fn ok(out: Run) -> String {
    assert_eq!(
        out.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    out.stdout
}

/// The words of the line describing `key` in each batch.
fn key_lines(stdout: &str, key: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(key) && l.starts_with("  "))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn shows_lenet_batches_with_shapes_dtypes_and_ranges() {
    let dir = lenet_dir();
    let stdout = ok(run_in(&dir, &["pipeline", "examples/lenet.toml"]));
    assert_contains!(stdout, "train data, epoch 1: 96 samples, 3 batches of 32");
    assert_contains!(
        stdout,
        "ops: Minmax (pipeline.ops[0]), ExpandDims (pipeline.ops[1])"
    );
    for n in 1..=3 {
        assert_contains!(stdout, format!("batch {n}: 32 samples\n"));
    }
    // Minmax scales each image to exactly [0, 1]; ExpandDims adds the channel axis.
    let x = key_lines(&stdout, "x");
    assert_eq!(x.len(), 3, "{stdout}");
    for line in &x {
        assert_eq!(
            line.join(" "),
            "x [32, 1, 28, 28] float32 min 0 max 1",
            "{stdout}"
        );
    }
    let y = key_lines(&stdout, "y");
    assert_eq!(y.len(), 3, "{stdout}");
    for line in &y {
        assert_eq!(line[..4].join(" "), "y [32] uint8 min", "{stdout}");
        let (min, max): (u8, u8) = (line[4].parse().unwrap(), line[6].parse().unwrap());
        assert!(min <= max && max <= 9, "{stdout}");
    }
}

#[test]
fn shows_another_mode_and_the_last_partial_batch() {
    let dir = lenet_dir();
    let stdout = ok(run_in(
        &dir,
        &[
            "pipeline",
            "examples/lenet.toml",
            "--mode",
            "eval",
            "--batches",
            "5",
        ],
    ));
    assert_contains!(stdout, "eval data, epoch 1: 40 samples, 2 batches of 32");
    assert_contains!(stdout, "batch 2: 8 samples\n");
    assert!(!stdout.contains("batch 3"), "{stdout}");
    let x = key_lines(&stdout, "x");
    assert_eq!(x[1].join(" "), "x [8, 1, 28, 28] float32 min 0 max 1");
}

#[test]
fn benchmark_prints_samples_per_second_overall_and_for_every_op() {
    let dir = lenet_dir();
    let stdout = ok(run_in(
        &dir,
        &[
            "pipeline",
            "examples/lenet.toml",
            "--benchmark",
            "--batches",
            "5",
        ],
    ));
    let overall = stdout
        .lines()
        .find(|l| l.starts_with("pipeline: 5 batches, 160 samples in "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(overall.contains(" samples/s ("), "{overall}");
    let peak = stdout
        .lines()
        .find_map(|l| l.strip_prefix("peak resident memory: "))
        .and_then(|rest| rest.split(" MiB").next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no peak memory line:\n{stdout}"));
    // libtorch alone keeps tens of MiB resident; a figure outside this range is misread.
    assert!((10.0..100_000.0).contains(&peak), "{peak} MiB");
    assert_contains!(stdout, "per op, on one thread (5 batches):");
    let steps = [
        "<read dataset>",
        "Minmax (pipeline.ops[0])",
        "ExpandDims (pipeline.ops[1])",
        "<collate batch>",
    ];
    for step in steps {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(step))
            .unwrap_or_else(|| panic!("no line for {step}:\n{stdout}"));
        let words: Vec<&str> = line[line.find(step).unwrap() + step.len()..]
            .split_whitespace()
            .collect();
        assert_eq!(words[0], "160", "{line}");
        assert_eq!(
            (words[1], words[3], words[5]),
            ("samples", "s", "samples/s"),
            "{line}"
        );
        assert!(words[6].ends_with('%'), "{line}");
    }
}

#[test]
fn shows_text_keys_as_lengths() {
    let dir = TempDir::new("pipeline-text");
    dir.write("data.csv", "name,score\ncat,1.5\ntiger,2\nox,-1\n");
    let manifest = dir.write(
        "text.toml",
        "[run]\nepochs = 1\n\n[pipeline]\nbatch_size = 2\nshuffle = false\n\n[pipeline.data.train]\ntype = \"csv\"\nfile = \"data.csv\"\n",
    );
    let stdout = ok(run_in(&dir, &["pipeline", &manifest.to_string_lossy()]));
    assert_contains!(stdout, "train data, epoch 1: 3 samples, 2 batches of 2");
    assert_contains!(stdout, "ops: none");
    let names = key_lines(&stdout, "name");
    assert_eq!(names[0].join(" "), "name [2] str length min 3 max 5");
    assert_eq!(names[1].join(" "), "name [1] str length min 2 max 2");
    let scores = key_lines(&stdout, "score");
    assert_eq!(scores[0].join(" "), "score [2] float32 min 1.5 max 2");
}

#[test]
fn unknown_datasets_and_modes_without_data_are_usage_errors() {
    let dir = lenet_dir();
    let out = run_failing_in(&dir, &["pipeline", "examples/lenet.toml", "--mode", "test"]);
    assert_contains!(out.stderr, "no test data in epoch 1");
    let out = run_failing_in(
        &dir,
        &["pipeline", "examples/lenet.toml", "--ds-id", "extra"],
    );
    assert_contains!(out.stderr, "no train dataset `extra` in epoch 1");
    let out = run_failing_in(&dir, &["pipeline", "examples/lenet.toml", "--batches", "0"]);
    assert_contains!(out.stderr, "--batches must be at least 1");
}

/// Runs `fe-host args...` in `dir` and asserts a usage error (exit 2) on one clean line.
fn run_failing_in(dir: &TempDir, args: &[&str]) -> Run {
    let out = run_in(dir, args);
    assert_eq!(
        out.code, 2,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    assert!(out.stderr.starts_with("error: "), "{}", out.stderr);
    assert_eq!(out.stderr.trim_end().lines().count(), 1, "{}", out.stderr);
    out
}

const TWO_BATCH_OPS: &str = r#"
[run]
epochs = 2

[pipeline]
batch_size = 4

[pipeline.data.train]
type = "csv"
file = "data.csv"

[[pipeline.ops]]
op = "Batch"
batch_size = 2

[[pipeline.ops]]
op = "Batch"
drop_last = true
"#;

#[test]
fn two_batch_ops_for_the_same_mode_ds_id_and_epoch_are_rejected() {
    let dir = TempDir::new("pipeline-two-batch");
    dir.write("data.csv", "a\n1\n2\n3\n");
    let manifest = dir.write("two.toml", TWO_BATCH_OPS);
    let out = run_failing(&["pipeline", &manifest.to_string_lossy()], 2);
    assert_contains!(
        out.stderr,
        "Batch (pipeline.ops[0]) and Batch (pipeline.ops[1]) both batch the train data in epoch 1"
    );

    // Batch ops for different modes are fine.
    let modes = TWO_BATCH_OPS.replace("drop_last = true", "drop_last = true\nmode = \"eval\"");
    let manifest = dir.write("modes.toml", &modes);
    let stdout = ok(run_in(&dir, &["pipeline", &manifest.to_string_lossy()]));
    assert_contains!(stdout, "train data, epoch 1: 3 samples, 2 batches of 2");
}

#[test]
fn a_mode_whose_data_is_short_of_one_batch_with_drop_last_is_refused_at_start() {
    let dir = lenet_dir();
    let short = [
        "run",
        "examples/lenet.toml",
        "-q",
        "--epochs",
        "1",
        "--set",
        "pipeline.batch_size=64",
        "--set",
        "pipeline.drop_last=true",
    ];
    // 40 evaluation samples, batches of 64 with drop_last: evaluation ran no step and logged
    // `accuracy: NaN`, and the best-model saver never saved, exit 0.
    let out = run_in(&dir, &short);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        out.stderr.trim(),
        "error: the eval dataset has 40 samples, fewer than one batch of 64 with drop_last = true: epoch 1 would run no eval step (its metrics would be NaN); use a batch size of at most 40, drop_last = false, or set run.eval_steps_per_epoch"
    );
    assert!(
        !dir.path().join("runs").exists(),
        "a refused run writes nothing"
    );
    // Steps per epoch repeat the data to fill the batch: that evaluation has its step.
    let mut filled = short.to_vec();
    filled.extend(["--set", "run.eval_steps_per_epoch=1"]);
    let out = run_in(&dir, &filled);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
}
