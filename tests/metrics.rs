//! Metrics against their reference implementations through the real binary, in one process and
//! on two ranks: random labels and probabilities (tests/fixtures/metrics_reference.py) go
//! through an `npy` dataset into `ROCAUC` (scikit-learn's `roc_auc_score`) and
//! `ExpectedCalibrationError` (torchmetrics' binning, computed in float64). 333 evaluation
//! samples in batches of 32 leave the two ranks different shares.

use crate::dist::{last, spawn_ranks, summary, wait_all};
use crate::util::{fe_host, OutputWithin, Run, TempDir};

/// Writes the data into `dir` and returns the reference values.
fn reference(dir: &TempDir, seed: u32) -> serde_json::Value {
    crate::util::python_fixture_json(
        "metrics_reference.py",
        &[dir.path().as_os_str(), seed.to_string().as_ref()],
    )
}

/// One epoch: nothing to train (one sample), then every metric over the evaluation set.
fn manifest(dir: &TempDir) -> String {
    let d = dir.path().display();
    let files = format!(
        "{{ y_bin = \"{d}/y_bin.npy\", p_bin = \"{d}/p_bin.npy\", y_multi = \"{d}/y_multi.npy\", \
         p_multi = \"{d}/p_multi.npy\" }}"
    );
    let mut text = format!(
        r#"[run]
epochs = 1
seed = 1
process_group_timeout = 60
train_steps_per_epoch = 1

[pipeline]
batch_size = 32

[pipeline.data.train]
type = "npy"
files = {files}

[pipeline.data.eval]
type = "npy"
files = {files}
"#
    );
    let traces = [
        ("ROCAUC", "y_bin", "p_bin", "auc_bin", ""),
        (
            "ROCAUC",
            "y_multi",
            "p_multi",
            "[\"auc_macro\", \"auc_per_class\"]",
            "",
        ),
        ("ExpectedCalibrationError", "y_bin", "p_bin", "ece_bin", ""),
        (
            "ExpectedCalibrationError",
            "y_multi",
            "p_multi",
            "ece_multi",
            "",
        ),
        (
            "ExpectedCalibrationError",
            "y_multi",
            "p_multi",
            "mce_multi",
            "norm = \"max\"",
        ),
        (
            "ExpectedCalibrationError",
            "y_bin",
            "p_bin",
            "rms_bin",
            "norm = \"l2\"",
        ),
    ];
    for (trace, y, p, outputs, extra) in traces {
        let outputs = if outputs.starts_with('[') {
            outputs.to_owned()
        } else {
            format!("\"{outputs}\"")
        };
        text.push_str(&format!(
            "\n[[traces]]\ntrace = \"{trace}\"\ninputs = [\"{y}\", \"{p}\"]\noutputs = {outputs}\n{extra}\n"
        ));
    }
    text
}

/// Runs `manifest` in `dir` as one process or `world` ranks; rank 0's `--summary`.
pub(crate) fn run(dir: &TempDir, world: usize, manifest: &str) -> serde_json::Value {
    let path = dir.write("m.toml", manifest).to_string_lossy().into_owned();
    let args = ["run", path.as_str(), "--summary", "summary.json"];
    let runs: Vec<Run> = if world == 1 {
        vec![fe_host().current_dir(dir.path()).args(args).output_within()]
    } else {
        wait_all(spawn_ranks(dir, world, &args, &[]))
    };
    for (rank, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 0, "rank {rank}:\n{}\n{}", run.stdout, run.stderr);
    }
    summary(dir.path())
}

fn close(got: f64, want: &serde_json::Value, what: &str) {
    let want = want
        .as_f64()
        .unwrap_or_else(|| panic!("no reference {what}"));
    assert!(
        (got - want).abs() < 1e-12,
        "{what}: fe-host {got}, reference {want}"
    );
}

#[test]
fn roc_auc_and_calibration_error_equal_the_references_in_one_process_and_on_two_ranks() {
    let data = TempDir::new("metrics-data");
    let want = reference(&data, 7);
    let text = manifest(&data);
    let mut runs = Vec::new();
    for world in [1, 2] {
        let dir = TempDir::new(&format!("metrics-{world}"));
        let summary = run(&dir, world, &text);
        close(
            last(&summary, "eval", "auc_bin"),
            &want["auc_bin"],
            "binary AUC",
        );
        close(
            last(&summary, "eval", "auc_macro"),
            &want["auc_macro"],
            "macro AUC",
        );
        close(
            last(&summary, "eval", "ece_bin"),
            &want["ece_bin"]["l1"],
            "binary ECE",
        );
        close(
            last(&summary, "eval", "ece_multi"),
            &want["ece_multi"]["l1"],
            "ECE",
        );
        close(
            last(&summary, "eval", "mce_multi"),
            &want["ece_multi"]["max"],
            "MCE",
        );
        close(
            last(&summary, "eval", "rms_bin"),
            &want["ece_bin"]["l2"],
            "binary l2",
        );
        runs.push(summary);
    }
    // Two ranks reduce the same per-sample partials as one process: the same bits.
    for key in ["auc_bin", "auc_macro", "ece_bin", "ece_multi"] {
        assert_eq!(
            last(&runs[0], "eval", key).to_bits(),
            last(&runs[1], "eval", key).to_bits(),
            "{key}"
        );
    }
}
