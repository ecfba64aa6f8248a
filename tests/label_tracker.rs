//! `LabelTracker` (fe-metrics) against numpy, in one process and on two ranks: random
//! per-sample losses and labels (tests/fixtures/label_tracker_reference.py) go through an
//! `npy` dataset; 203 evaluation samples in batches of 16 leave the ranks different shares,
//! and the per-label summary graphs must hold numpy's mean, mean ∓ std, min and max at every
//! evaluation epoch's step.

use serde_json::Value;

use crate::dist::{spawn_ranks, summary, wait_all};
use crate::metrics::run;
use crate::util::TempDir;
use crate::util::{fe_host, OutputWithin, Run};

fn manifest(data: &TempDir) -> String {
    let d = data.path().display();
    let files = format!("{{ loss = \"{d}/loss.npy\", y = \"{d}/y.npy\" }}");
    format!(
        r#"[run]
epochs = 2
seed = 1
process_group_timeout = 60
train_steps_per_epoch = 1

[pipeline]
batch_size = 16

[pipeline.data.train]
type = "npy"
files = {files}

[pipeline.data.eval]
type = "npy"
files = {files}

[[traces]]
trace = "LabelTracker"
inputs = ["loss", "y"]
outputs = "loss_by_y"
bounds = ["std", "range"]

[[traces]]
trace = "LabelTracker"
inputs = ["loss", "y"]
outputs = "mapped"
label_mapping = {{ cat = 3, dog = 1 }}
bounds = "none"
"#
    )
}

fn close(got: &Value, want: &Value, what: &str) {
    let (got, want) = (got.as_f64().unwrap(), want.as_f64().unwrap());
    assert!(
        (got - want).abs() < 1e-12,
        "{what}: fe-host {got}, numpy {want}"
    );
}

#[test]
fn label_tracker_graphs_equal_numpy_per_label_in_one_process_and_on_two_ranks() {
    let data = TempDir::new("label-tracker-data");
    let want = crate::util::python_fixture_json(
        "label_tracker_reference.py",
        &[data.path().as_os_str(), "5".as_ref()],
    );
    let text = manifest(&data);
    let mut graphs = Vec::new();
    for world in [1, 2] {
        let dir = TempDir::new(&format!("label-tracker-{world}"));
        let summary = run(&dir, world, &text);
        let custom = &summary["custom_graphs"];
        for label in 0..5 {
            let graph = &custom[format!("loss_by_y/{label}")][0]["history"]["eval"];
            let reference = &want[label.to_string()];
            for (key, field) in [
                ("loss", "mean"),
                ("loss_-std", "-std"),
                ("loss_+std", "+std"),
                ("loss_min", "min"),
                ("loss_max", "max"),
            ] {
                let steps = graph[key].as_object().unwrap_or_else(|| {
                    panic!("{world} rank(s): no `{key}` for label {label}: {custom}")
                });
                // One entry per evaluation epoch, at its global step.
                assert_eq!(steps.keys().collect::<Vec<_>>(), ["1", "2"], "{key}");
                for value in steps.values() {
                    close(value, &reference[field], &format!("label {label} {key}"));
                }
            }
        }
        // A mapping names the graphs and leaves the other labels out; no bounds, no bands.
        let names: Vec<&String> = custom.as_object().unwrap().keys().collect();
        let mapped: Vec<_> = names.iter().filter(|n| n.starts_with("mapped/")).collect();
        assert_eq!(mapped, [&"mapped/cat", &"mapped/dog"], "{names:?}");
        let cat = &custom["mapped/cat"][0]["history"]["eval"];
        assert_eq!(cat.as_object().unwrap().len(), 1, "{cat}");
        close(&cat["loss"]["2"], &want["3"]["mean"], "cat mean");
        graphs.push(custom.clone());
    }
    assert_eq!(
        graphs[0], graphs[1],
        "two ranks gather the same samples as one process"
    );
}

/// Runs `args` (after `run m.toml --summary summary.json`) in `dir` on `world` ranks and
/// returns the summary's per-label graphs.
fn graphs_of(dir: &TempDir, world: usize, manifest: &str, extra: &[&str]) -> Value {
    let path = dir.write("m.toml", manifest).to_string_lossy().into_owned();
    let mut args = vec!["run", path.as_str(), "-q", "--summary", "summary.json"];
    args.extend_from_slice(extra);
    let runs: Vec<Run> = if world == 1 {
        vec![fe_host()
            .current_dir(dir.path())
            .args(&args)
            .output_within()]
    } else {
        wait_all(spawn_ranks(dir, world, &args, &[]))
    };
    for (rank, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 0, "rank {rank}:\n{}\n{}", run.stdout, run.stderr);
    }
    summary(dir.path())["custom_graphs"].clone()
}

#[test]
fn a_resumed_run_keeps_the_label_graphs_from_before_its_checkpoint_in_one_process_and_on_two_ranks()
{
    // FastEstimator's LabelTracker keeps its history in the trace; a crash and a resume must
    // not cut the graphs at the resume.
    let data = TempDir::new("label-tracker-resume-data");
    crate::util::python_fixture_json(
        "label_tracker_reference.py",
        &[data.path().as_os_str(), "5".as_ref()],
    );
    let text = manifest(&data);
    let whole = graphs_of(&TempDir::new("label-tracker-whole"), 1, &text, &[]);
    assert_eq!(
        whole["loss_by_y/0"][0]["history"]["eval"]["loss"]
            .as_object()
            .map(|steps| steps.len()),
        Some(2),
        "{whole}"
    );
    let checkpointed = format!("{text}\n[checkpoint]\ndir = \"ckpt\"\nevery_epochs = 1\n");
    for world in [1, 2] {
        let dir = TempDir::new(&format!("label-tracker-resume-{world}"));
        graphs_of(&dir, world, &checkpointed, &["--epochs", "1"]);
        let resumed = graphs_of(&dir, world, &checkpointed, &["--resume", "--epochs", "2"]);
        assert_eq!(
            resumed, whole,
            "{world} rank(s): the resumed run's graphs differ from the uninterrupted run's"
        );
    }
}
