//! Traces in real runs: early stopping, the model savers, the loggers, TensorBoard files and
//! the end-of-run plot, all read back from disk.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fe_host::report::{read_csv, read_events, read_jsonl};

use crate::util::{fe_host, file_names, lenet_manifest, run, run_with_summary, steps, TempDir};

/// LeNet learning for two epochs, then frozen (SGD with lr 0), so the evaluation loss stops
/// improving from epoch 3 on, exactly.
fn plateau_manifest(epochs: u32, extra: &str) -> String {
    lenet_manifest(epochs, extra)
        .replace("[run]\n", "[run]\ntrain_steps_per_epoch = 30\n")
        .replace(
            "optimizer = { type = \"adam\", lr = 0.001 }",
            "optimizer = { epoch = { 1 = { type = \"adam\", lr = 0.001 }, 3 = { type = \"sgd\", lr = 0.0 } } }",
        )
}

#[test]
fn early_stopping_stops_when_eval_loss_stops_improving_and_on_end_still_runs() {
    let dir = TempDir::new("early-stop");
    let events = dir.path().join("events.txt");
    let best = dir.path().join("best");
    let traces = format!(
        r#"
[[traces]]
trace = "EarlyStopping"
patience = 2

[[traces]]
trace = "BestModelSaver"
model = "lenet"
save_dir = "{best}"

[[traces]]
trace = "RecordEvents"
file = "{events}"
"#,
        best = best.display(),
        events = events.display()
    );
    let (out, summary) = run_with_summary(&dir, &plateau_manifest(10, &traces));
    // Without `monitor`, EarlyStopping watches the loss the UpdateOp trains on (`ce`).
    let eval = steps(&summary, "eval", "ce");
    assert_eq!(
        eval.iter().map(|(step, _)| *step).collect::<Vec<_>>(),
        [30, 60, 90, 120],
        "evaluations until the stop: {eval:?}"
    );
    assert!(eval[1].1 < eval[0].1, "epoch 2 improves: {eval:?}");
    assert_eq!(eval[2].1, eval[1].1, "frozen from epoch 3: {eval:?}");
    assert_eq!(eval[3].1, eval[1].1, "frozen from epoch 3: {eval:?}");
    let train_epochs: Vec<u64> = steps(&summary, "train", "epoch_time(sec)")
        .into_iter()
        .map(|(step, _)| step)
        .collect();
    assert_eq!(
        train_epochs,
        [30, 60, 90, 120],
        "no training after the stop"
    );
    assert!(
        out.stdout.contains("EarlyStopping"),
        "the stop is announced:\n{}",
        out.stdout
    );
    let events = std::fs::read_to_string(&events).unwrap();
    assert_eq!(
        events.lines().collect::<Vec<_>>(),
        ["on_begin", "on_end", "on_trial_close"]
    );
    let saved = best.join("lenet_best_ce.safetensors");
    assert!(saved.is_file(), "best model file {}", saved.display());
}

/// LeNet for 2 epochs of 20 steps, logging every 10, with a TensorBoard trace writing into
/// `dir/tb`; returns that directory and the run's summary.
fn tensorboard_run(dir: &TempDir) -> (PathBuf, serde_json::Value) {
    let tb = dir.path().join("tb");
    let manifest = lenet_manifest(
        2,
        &format!(
            "\n[[traces]]\ntrace = \"TensorBoard\"\nlog_dir = \"{}\"\n",
            tb.display()
        ),
    )
    .replace("[run]\n", "[run]\ntrain_steps_per_epoch = 20\n")
    .replace("log_steps = 50", "log_steps = 10");
    let (_, summary) = run_with_summary(dir, &manifest);
    (tb, summary)
}

#[test]
fn tensorboard_events_hold_every_logged_value_at_its_step() {
    let dir = TempDir::new("tensorboard");
    let (tb, summary) = tensorboard_run(&dir);
    for mode in ["train", "eval"] {
        let files: Vec<_> = std::fs::read_dir(tb.join(mode))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "one event file per mode: {files:?}");
        let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("events.out.tfevents."), "{name}");
        let events = read_events(&files[0]).unwrap();
        assert_eq!(
            events[0].file_version.as_deref(),
            Some("brain.Event:2"),
            "the first record names the format"
        );
        let mut read: BTreeMap<String, Vec<(u64, f32)>> = BTreeMap::new();
        for event in &events[1..] {
            for value in &event.values {
                read.entry(value.tag.clone())
                    .or_default()
                    .push((event.step as u64, value.simple_value.unwrap()));
            }
        }
        // The finish line's overall rate is computed after the last trace ran.
        let logged: Vec<&String> = summary["history"][mode]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "steps/sec (overall)")
            .collect();
        assert_eq!(read.keys().collect::<Vec<_>>(), logged, "{mode}: tags");
        for (tag, values) in &read {
            let want: Vec<(u64, f32)> = steps(&summary, mode, tag)
                .into_iter()
                .map(|(s, v)| (s, v as f32))
                .collect();
            assert_eq!(values, &want, "{mode}/{tag}");
        }
    }
    let train_steps: Vec<u64> = steps(&summary, "train", "ce")
        .iter()
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(
        train_steps,
        [1, 10, 20, 30, 40],
        "logged at step 1 and every 10"
    );
}

#[test]
fn csv_and_jsonl_loggers_write_a_row_per_epoch_and_mode() {
    let dir = TempDir::new("loggers");
    let csv = dir.path().join("logs/run.csv");
    let jsonl = dir.path().join("logs/run.jsonl");
    let traces = format!(
        "\n[[traces]]\ntrace = \"CSVLogger\"\nfilename = \"{}\"\n\n[[traces]]\ntrace = \"JSONLLogger\"\nfilename = \"{}\"\n",
        csv.display(),
        jsonl.display()
    );
    let manifest = lenet_manifest(2, &traces)
        .replace("[run]\n", "[run]\ntrain_steps_per_epoch = 20\n")
        .replace("log_steps = 50", "log_steps = 15");
    let (_, summary) = run_with_summary(&dir, &manifest);
    let accuracy = steps(&summary, "eval", "accuracy");
    // CSVLogger runs in eval and test by default (FastEstimator); JSONLLogger in every mode.
    let from_csv = read_csv(&csv).unwrap();
    assert_eq!(from_csv.keys().collect::<Vec<_>>(), ["eval"]);
    let from_jsonl = read_jsonl(&jsonl).unwrap();
    assert_eq!(from_jsonl.keys().collect::<Vec<_>>(), ["eval", "train"]);
    for history in [&from_csv, &from_jsonl] {
        let logged: Vec<(u64, f64)> = history["eval"]["accuracy"]
            .iter()
            .map(|(s, v)| (*s, *v))
            .collect();
        assert_eq!(logged, accuracy, "bit-exact values at the epochs' steps");
    }
    let header = std::fs::read_to_string(&csv).unwrap();
    assert!(
        header.starts_with("mode,epoch,step,"),
        "FastEstimator-style columns: {header}"
    );
    assert_eq!(
        from_jsonl["train"]["ce"].keys().collect::<Vec<_>>(),
        [&20, &40],
        "the training loss logged during each epoch (steps 1, 15, 30) is in its row"
    );
}

#[test]
fn jsonl_instance_rows_hold_each_samples_whole_value_and_name_keys_no_batch_has() {
    let dir = TempDir::new("jsonl-instances");
    let jsonl = dir.path().join("instances.jsonl");
    let logger = |id: &str, keys: &str| {
        format!(
            "\n[[traces]]\ntrace = \"JSONLLogger\"\nfilename = \"{}\"\nmode = \"eval\"\ninstance_id_key = \"{id}\"\ninstance_keys = {keys}\n",
            jsonl.display()
        )
    };
    let manifest = |traces: &str| {
        lenet_manifest(1, traces).replace(
            "[run]\n",
            "[run]\ntrain_steps_per_epoch = 2\neval_steps_per_epoch = 1\n",
        )
    };
    let path = dir.write(
        "m.toml",
        &manifest(&logger("y", r#"["y", "y_pred", "ce"]"#)),
    );
    let out = run(&["run", &path.to_string_lossy(), "-q"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    // `ce` is the batch's mean, not a value per sample: said once, and left out.
    assert_eq!(
        out.stderr
            .matches("`ce` is shaped [] in a batch of 32")
            .count(),
        1,
        "{}",
        out.stderr
    );
    let text = std::fs::read_to_string(&jsonl).unwrap();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| l.contains("\"instance\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 32, "one row per sample of the one eval batch");
    for row in &rows {
        let values = &row["instance"]["values"];
        assert_eq!(values["y"], row["instance"]["id"]);
        assert!(values.get("ce").is_none(), "{row}");
        // Every class score of the sample, not its first (LeNet ends with a softmax).
        let scores = values["y_pred"].as_array().expect("an array per sample");
        assert_eq!(scores.len(), 10, "{row}");
        let total: f64 = scores.iter().map(|v| v.as_f64().unwrap()).sum();
        assert!((total - 1.0).abs() < 1e-5, "{total}");
    }

    for (traces, wanted) in [
        (
            logger("idx", r#"["y_pred"]"#),
            "names `idx` as the key of each sample (instance_id_key), but no batch of the modes it runs in has it",
        ),
        (
            logger("y", r#"["y_pred", "nosuchkey"]"#),
            "logs `nosuchkey` per sample (instance_keys), but eval (epoch 1) has no such key (available: x, y, y_pred, ce)",
        ),
    ] {
        std::fs::remove_file(&jsonl).ok();
        let path = dir.write("m.toml", &manifest(&traces));
        let out = run(&["run", &path.to_string_lossy(), "-q"]);
        assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
        assert_contains!(out.stderr, wanted);
        assert!(!jsonl.exists(), "a refused run wrote its log");
    }
}

#[test]
fn render_builds_loggers_without_touching_their_files() {
    let dir = TempDir::new("render-loggers");
    let csv = dir.write("old.csv", "mode,epoch,step,ce\neval,1,10,0.5\n");
    let manifest = lenet_manifest(
        1,
        &format!(
            "\n[[traces]]\ntrace = \"CSVLogger\"\nfilename = \"{}\"\n",
            csv.display()
        ),
    );
    let path = dir.write("m.toml", &manifest);
    let out = run(&["render", &path.to_string_lossy()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        std::fs::read_to_string(&csv).unwrap(),
        "mode,epoch,step,ce\neval,1,10,0.5\n"
    );
}

/// A file is a PNG or SVG of at least `min_bytes`, with the dimensions it declares.
fn assert_image(path: &Path, min_bytes: usize) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes.len() >= min_bytes,
        "{}: {} bytes",
        path.display(),
        bytes.len()
    );
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        assert_eq!(&bytes[12..16], b"IHDR");
        assert!(width >= 400 && height >= 300, "{width}x{height}");
    } else {
        let text = String::from_utf8(bytes).unwrap();
        let start = text.find("<svg").expect("an <svg> element");
        assert!(text.trim_end().ends_with("</svg>"), "a complete document");
        let tag = &text[start..start + text[start..].find('>').unwrap()];
        assert!(
            tag.contains("width=\"") && tag.contains("height=\""),
            "{tag}"
        );
        assert!(text.matches("<polyline").count() + text.matches("<path").count() >= 3);
    }
}

#[test]
fn log_dir_gets_the_run_log_and_a_plot_and_logs_compares_runs() {
    let dir = TempDir::new("log-dir");
    let manifest = lenet_manifest(2, "").replace("[run]\n", "[run]\ntrain_steps_per_epoch = 20\n");
    let path = dir.write("m.toml", &manifest);
    let mut runs = Vec::new();
    for name in ["a", "b"] {
        let log_dir = dir.path().join(name);
        let out: crate::util::Run = fe_host()
            .args([
                "run",
                &path.to_string_lossy(),
                "--log-dir",
                &log_dir.to_string_lossy(),
            ])
            .output()
            .unwrap()
            .into();
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stdout.contains("metrics.svg"), "{}", out.stdout);
        let version = log_dir.join("version_0");
        assert_image(&version.join("metrics.svg"), 10_000);
        let history = read_jsonl(&version.join("log.jsonl")).unwrap();
        assert_eq!(history["eval"]["accuracy"].len(), 2);
        runs.push(log_dir);
    }
    let svg = std::fs::read_to_string(runs[0].join("version_0/metrics.svg")).unwrap();
    for key in ["accuracy", "ce"] {
        assert!(svg.contains(key), "a panel for {key}");
    }
    let png = dir.path().join("compare.png");
    let out = run(&[
        "logs",
        &runs[0].to_string_lossy(),
        &runs[1].to_string_lossy(),
        "--out",
        &png.to_string_lossy(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("2 run(s) (a/version_0, b/version_0)"),
        "{}",
        out.stdout
    );
    assert_image(&png, 10_000);
}

#[test]
fn the_main_example_writes_its_plot() {
    // The README's main command runs examples/lenet.toml; its plot goes to runs/lenet.
    let text = std::fs::read_to_string(crate::util::root().join("examples/lenet.toml")).unwrap();
    assert!(text.contains("log_dir = \"../runs/lenet\""), "{text}");
}

#[test]
fn a_trace_input_nothing_provides_is_an_error_before_training() {
    let dir = TempDir::new("trace-missing");
    let manifest = lenet_manifest(
        1,
        "\n[[traces]]\ntrace = \"Accuracy\"\ninputs = [\"y\", \"logits\"]\noutputs = \"acc2\"\n",
    );
    let path = dir.write("m.toml", &manifest);
    let out = crate::util::run_failing(&["run", &path.to_string_lossy()], 2);
    for part in ["Accuracy", "`logits`", "eval", "epoch 1"] {
        assert!(out.stderr.contains(part), "{part}: {}", out.stderr);
    }
}

/// Opt-in (`FE_TENSORBOARD_PYTHON=/path/to/python` with the `tensorboard` package): TensorBoard's
/// own event reader loads what the TensorBoard trace wrote, with the right tags, steps and values.
#[test]
fn tensorboard_python_package_reads_our_event_files() {
    let Some(python) = std::env::var_os("FE_TENSORBOARD_PYTHON") else {
        eprintln!("skipped: set FE_TENSORBOARD_PYTHON to a python with the tensorboard package");
        return;
    };
    let dir = TempDir::new("tensorboard-python");
    let (tb, summary) = tensorboard_run(&dir);
    let script = r#"
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
out = {}
for mode in ("train", "eval"):
    acc = EventAccumulator(sys.argv[1] + "/" + mode)
    acc.Reload()
    out[mode] = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
print(json.dumps(out))
"#;
    let output = std::process::Command::new(python)
        .args(["-c", script, &tb.to_string_lossy()])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let read: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    for mode in ["train", "eval"] {
        let tags = read[mode].as_object().unwrap();
        for (tag, points) in tags {
            let want: Vec<(u64, f32)> = steps(&summary, mode, tag)
                .into_iter()
                .map(|(s, v)| (s, v as f32))
                .collect();
            let got: Vec<(u64, f32)> = points
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].as_u64().unwrap(), p[1].as_f64().unwrap() as f32))
                .collect();
            assert_eq!(got, want, "{mode}/{tag}");
        }
        assert!(tags.contains_key("ce"), "{mode}: {tags:?}");
    }
}

/// `lenet_manifest` cut to a few steps per epoch, for tests about what traces write.
fn short_lenet(epochs: u32, extra: &str) -> String {
    lenet_manifest(epochs, extra).replace(
        "log_steps = 50",
        "log_steps = 1\ntrain_steps_per_epoch = 3\neval_steps_per_epoch = 2",
    )
}

#[test]
fn a_metric_returning_more_or_fewer_values_than_its_keys_is_refused_naming_the_plugin() {
    let dir = TempDir::new("metric-arity");
    for (values, outputs) in [(1, r#"["a", "b"]"#), (3, r#"["a", "b"]"#), (0, r#""a""#)] {
        let trace = format!(
            "\n[[traces]]\ntrace = \"WrongArity\"\ninputs = \"y\"\noutputs = {outputs}\nvalues = {values}\n"
        );
        let path = dir.write("m.toml", &short_lenet(1, &trace));
        let out = crate::util::run_failing(&["run", &path.to_string_lossy(), "-q"], 1);
        assert_contains!(out.stderr, "fe-faulty::WrongArity");
        assert_contains!(
            out.stderr,
            &format!(
                "returned {values} value(s) for {} output key(s)",
                outputs.matches('"').count() / 2
            )
        );
    }
    // The right number is accepted and logged under each key.
    let trace = "\n[[traces]]\ntrace = \"WrongArity\"\ninputs = \"y\"\noutputs = [\"a\", \"b\"]\nvalues = 2\n";
    let (_, summary) = run_with_summary(&dir, &short_lenet(1, trace));
    assert_eq!(steps(&summary, "eval", "a"), [(3, 2.0)]);
    assert_eq!(steps(&summary, "eval", "b"), [(3, 2.0)]);
}

#[test]
fn post_processing_ops_run_on_the_batch_and_traces_read_their_outputs() {
    // Post-processing one-hot encodes the labels on the CPU after the network; an accuracy
    // over the one-hot labels must equal the one over the integer labels, batch for batch.
    let dir = TempDir::new("post-processing");
    let extra = r#"
[[network.postprocessing]]
op = "Onehot"
inputs = "y"
outputs = "y_hot"
num_classes = 10
mode = "eval"

[[traces]]
trace = "Accuracy"
inputs = ["y_hot", "y_pred"]
outputs = "accuracy_hot"
"#;
    let (_, summary) = run_with_summary(&dir, &short_lenet(2, extra));
    let plain = steps(&summary, "eval", "accuracy");
    assert_eq!(plain.len(), 2, "{summary}");
    assert_eq!(steps(&summary, "eval", "accuracy_hot"), plain);
}

#[test]
fn terminate_on_nan_stops_training_at_the_first_non_finite_loss() {
    // SGD with an absurd learning rate overflows the weights after the first step, so a loss
    // a few steps in is not finite.
    let dir = TempDir::new("nan");
    let text = short_lenet(3, "\n[[traces]]\ntrace = \"TerminateOnNaN\"\n")
        .replace("train_steps_per_epoch = 3", "train_steps_per_epoch = 10")
        .replace(
            "optimizer = { type = \"adam\", lr = 0.001 }",
            "optimizer = { type = \"sgd\", lr = 1e38 }",
        );
    let (out, summary) = run_with_summary(&dir, &text);
    const PREFIX: &str = "fe-host TerminateOnNaN: `ce` is not finite at step ";
    let note = out
        .stdout
        .lines()
        .find(|l| l.starts_with(PREFIX))
        .unwrap_or_else(|| panic!("no stop note:\n{}", out.stdout));
    let stop: u64 = note
        .trim_start_matches(PREFIX)
        .trim_end_matches(": stopping")
        .parse()
        .unwrap();
    assert!(stop < 10, "stopped inside the first epoch: {note}");
    // Nothing trains after the stop, every finite loss comes before it, nothing evaluates.
    let logged: Vec<u64> = summary["history"]["train"]["ce"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.parse().unwrap())
        .collect();
    assert!(logged.iter().all(|s| *s <= stop), "{logged:?}");
    assert!(steps(&summary, "train", "ce")
        .iter()
        .all(|(s, v)| *s < stop && v.is_finite()));
    assert!(
        summary["history"]["eval"]["ce"].is_null(),
        "no evaluation after the stop"
    );
    assert_contains!(out.stdout, &format!("fe-host finish: step: {stop};"));
}

#[test]
fn timer_writes_epoch_times_and_sample_rates_that_agree_with_the_batches() {
    let dir = TempDir::new("timer");
    let (_, summary) = run_with_summary(&dir, &short_lenet(2, "\n[[traces]]\ntrace = \"Timer\"\n"));
    // 3 training batches and 2 evaluation batches of 32 per epoch.
    for (mode, samples, at) in [("train", 96.0, [3, 6]), ("eval", 64.0, [3, 6])] {
        let times = steps(&summary, mode, &format!("{mode}_epoch_time(sec)"));
        let rates = steps(&summary, mode, &format!("{mode}_samples/sec"));
        assert_eq!(
            times.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            at,
            "{mode}"
        );
        assert_eq!(
            rates.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            at,
            "{mode}"
        );
        for ((_, seconds), (_, rate)) in times.iter().zip(&rates) {
            assert!(*seconds > 0.0);
            let counted = rate * seconds;
            assert!(
                (counted - samples).abs() < 1e-6 * samples,
                "{mode}: {counted} samples"
            );
        }
    }
    let total: Vec<f64> = ["train", "eval", "test"]
        .iter()
        .flat_map(|m| steps(&summary, m, "total_time(sec)"))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(total.len(), 1, "total time logged once: {total:?}");
    let epochs: f64 = ["train", "eval"]
        .iter()
        .flat_map(|m| steps(&summary, m, &format!("{m}_epoch_time(sec)")))
        .map(|(_, v)| v)
        .sum();
    assert!(total[0] >= epochs, "{} < {epochs}", total[0]);
}

#[test]
fn model_saver_saves_every_frequency_epochs_and_keeps_the_newest() {
    let dir = TempDir::new("model-saver");
    let saves = dir.path().join("saves");
    let trace = format!(
        "\n[[traces]]\ntrace = \"ModelSaver\"\nmodel = \"lenet\"\nsave_dir = \"{}\"\nmax_to_keep = 2\n",
        saves.display()
    );
    let path = dir.write("m.toml", &short_lenet(3, &trace));
    let weights = dir.path().join("weights");
    let out = run(&[
        "run",
        &path.to_string_lossy(),
        "-q",
        "--save-weights",
        &weights.to_string_lossy(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let names = file_names(&saves);
    assert_eq!(
        names,
        ["lenet_epoch_2.safetensors", "lenet_epoch_3.safetensors"]
    );
    // The last save holds the final weights, tensor for tensor.
    let read = |p: &Path| {
        let mut t = fe_host::system::tensors::read(p).unwrap();
        t.sort_by(|a, b| a.0.cmp(&b.0));
        t
    };
    let (saved, last) = (
        read(&saves.join("lenet_epoch_3.safetensors")),
        read(&weights.join("lenet.safetensors")),
    );
    assert_eq!(saved.len(), last.len());
    for ((n, a), (m, b)) in saved.iter().zip(&last) {
        assert_eq!(n, m);
        assert!(a.equal(b), "{n} differs");
    }
    // frequency = 2 saves epoch 2 only.
    std::fs::remove_dir_all(&saves).unwrap();
    let every_other = trace.replace("max_to_keep = 2", "frequency = 2");
    let path = dir.write("m.toml", &short_lenet(3, &every_other));
    let out = run(&["run", &path.to_string_lossy(), "-q"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let names = file_names(&saves);
    assert_eq!(names, ["lenet_epoch_2.safetensors"]);
}

#[test]
fn a_model_savers_old_file_deleted_by_hand_does_not_fail_the_resumed_run() {
    let dir = TempDir::new("model-saver-deleted");
    let trace = "\n[[traces]]\ntrace = \"ModelSaver\"\nmodel = \"lenet\"\nsave_dir = \"ms\"\nmax_to_keep = 2\n\
                 \n[checkpoint]\ndir = \"ckpt\"\nevery_epochs = 1\n";
    let path = dir.write("m.toml", &short_lenet(2, trace));
    let path = path.to_string_lossy();
    let out = run(&["run", &path, "-q"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    std::fs::remove_file(dir.path().join("ms/lenet_epoch_1.safetensors")).unwrap();
    // Epoch 3 saves its model and then drops epoch 1's, which is already gone: nothing to do.
    let out = run(&["run", &path, "-q", "--resume", "--epochs", "3"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let names = file_names(&dir.path().join("ms"));
    assert_eq!(
        names,
        ["lenet_epoch_2.safetensors", "lenet_epoch_3.safetensors"]
    );
    assert!(
        dir.path().join("ckpt/ckpt-9").is_dir(),
        "epoch 3's checkpoint was written"
    );
}

#[test]
fn a_saver_or_plateau_watching_a_model_trained_on_two_losses_must_be_told_which() {
    // FastEstimator's BestModelSaver and ReduceLROnPlateau take the model's loss only when it
    // has one (`model.loss_name`); taking the first UpdateOp's would watch one loss silently.
    let dir = TempDir::new("two-losses");
    let second_loss = "\n[[network.ops]]\nop = \"CrossEntropy\"\ninputs = [\"y_pred\", \"y\"]\noutputs = \"ce2\"\n\
                       \n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lenet\"\nloss = \"ce2\"\n";
    for (trace, extra) in [
        (
            "BestModelSaver",
            format!("save_dir = \"{}\"\n", dir.path().join("best").display()),
        ),
        ("ReduceLROnPlateau", String::new()),
    ] {
        let traces =
            format!("{second_loss}\n[[traces]]\ntrace = \"{trace}\"\nmodel = \"lenet\"\n{extra}");
        let path = dir.write("m.toml", &lenet_manifest(1, &traces));
        let out = crate::util::run_failing(&["run", &path.to_string_lossy()], 2);
        assert!(
            out.stderr.contains("m.toml")
                && out.stderr.contains("trained on several losses (ce, ce2)")
                && out.stderr.contains("`metric`"),
            "{trace}: {}",
            out.stderr
        );
        assert!(!dir.path().join("best").exists(), "nothing written");
    }
    // One loss is still taken as the default.
    let path = dir.write(
        "m.toml",
        &lenet_manifest(
            1,
            "\n[[traces]]\ntrace = \"ReduceLROnPlateau\"\nmodel = \"lenet\"\n",
        )
        .replace(
            "[run]\n",
            "[run]\ntrain_steps_per_epoch = 2\neval_steps_per_epoch = 2\n",
        ),
    );
    let out = run(&["run", &path.to_string_lossy(), "-q"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}
