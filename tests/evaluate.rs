//! `fe-host evaluate`: the losses and metrics of trained weights without training. They equal
//! what the run logged for the same weights and data, per dataset; `--input` data, the test
//! mode, JSON and CSV agree; nothing is trained or written but the CSV asked for.

use std::path::Path;

use crate::util::{digits, fe_host_in, TempDir};

fn evaluate_json(dir: &Path, args: &[&str]) -> serde_json::Value {
    let run = fe_host_in(dir, &[&["evaluate"][..], args, &["--json"]].concat());
    assert_eq!(run.code, 0, "{args:?}: {}{}", run.stdout, run.stderr);
    serde_json::from_str(&run.stdout).unwrap()
}

/// The values of dataset `index` of an `evaluate --json` document.
fn values(
    document: &serde_json::Value,
    index: usize,
) -> &serde_json::Map<String, serde_json::Value> {
    document["datasets"][index]["values"].as_object().unwrap()
}

/// LeNet trained 30 steps, evaluated on two datasets (`a`: the evaluation images, `b`: the
/// training images, 5 batches each) and tested on the evaluation images; its checkpoint in
/// `ck/` and its run summary in `summary.json`.
fn trained(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    let [x, y, ex, ey] = digits();
    let datasets = format!(
        "[[pipeline.data.eval]]\nds_id = \"a\"\ntype = \"idx\"\nfiles = {{ x = \"{}\", y = \"{}\" }}\n\n\
         [[pipeline.data.eval]]\nds_id = \"b\"\ntype = \"idx\"\nfiles = {{ x = \"{}\", y = \"{}\" }}\n\n\
         [pipeline.data.test]\ntype = \"idx\"\nfiles = {{ x = \"{}\", y = \"{}\" }}\n",
        ex.display(),
        ey.display(),
        x.display(),
        y.display(),
        ex.display(),
        ey.display()
    );
    let text = crate::util::lenet_manifest(1, "\n[checkpoint]\ndir = \"ck\"\nevery_epochs = 1\n")
        .replace(
            "log_steps = 50",
            "log_steps = 50\ntrain_steps_per_epoch = 30\neval_steps_per_epoch = 5",
        );
    let start = text.find("[pipeline.data.eval]").unwrap();
    let end = text.find("[[pipeline.ops]]").unwrap();
    let text = format!("{}{datasets}\n{}", &text[..start], &text[end..]);
    dir.write("m.toml", &text);
    let out = fe_host_in(
        dir.path(),
        &["run", "m.toml", "-q", "--summary", "summary.json"],
    );
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    dir
}

#[test]
fn evaluate_gives_the_numbers_the_run_logged_per_dataset_and_for_test() {
    let dir = trained("evaluate-equal");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap())
            .unwrap();
    let logged = |mode: &str, key: &str| *crate::util::values(&summary, mode, key).last().unwrap();
    // The run evaluates both datasets in one epoch (one number over both); evaluate gives each
    // its own, and the run's test line, over one dataset, is evaluate's test.
    let eval = evaluate_json(dir.path(), &["m.toml", "--checkpoint", "ck"]);
    assert_eq!(eval["mode"], "eval");
    assert_eq!(eval["datasets"][0]["ds_id"], "a");
    assert_eq!(eval["datasets"][1]["ds_id"], "b");
    assert_eq!(eval["datasets"][0]["samples"], 160);
    let test = evaluate_json(
        dir.path(),
        &["m.toml", "--checkpoint", "ck", "--mode", "test"],
    );
    for key in ["ce", "accuracy"] {
        let from_run = logged("test", key);
        let evaluated = values(&test, 0)[key].as_f64().unwrap();
        assert!(
            (from_run - evaluated).abs() <= 1e-12 * from_run.abs().max(1.0),
            "test {key}: run {from_run}, evaluate {evaluated}"
        );
    }
    // Evaluation set `a` given as --input files is set `a` (5 batches, as the run evaluates).
    let [_, _, ex, ey] = digits();
    let (ex, ey) = (format!("x={}", ex.display()), format!("y={}", ey.display()));
    let from_input = evaluate_json(
        dir.path(),
        &[
            "m.toml",
            "--checkpoint",
            "ck",
            "--input",
            &ex,
            "--input",
            &ey,
        ],
    );
    assert_eq!(
        from_input["datasets"][0]["values"],
        eval["datasets"][0]["values"]
    );
    assert_ne!(values(&eval, 0)["ce"], values(&eval, 1)["ce"]);
    // The run's eval numbers over a and b together are the sample-weighted means of both.
    let a = values(&eval, 0)["accuracy"].as_f64().unwrap();
    let b = values(&eval, 1)["accuracy"].as_f64().unwrap();
    assert!((logged("eval", "accuracy") - (a + b) / 2.0).abs() < 1e-9);
    let (ca, cb) = (
        values(&eval, 0)["ce"].as_f64().unwrap(),
        values(&eval, 1)["ce"].as_f64().unwrap(),
    );
    assert!((logged("eval", "ce") - (ca + cb) / 2.0).abs() < 1e-6);
    // Nothing but numbers for one epoch: no best-so-far or timing values.
    let keys: Vec<&String> = values(&eval, 0).keys().collect();
    assert_eq!(keys, ["accuracy", "ce"]);
}

#[test]
fn input_data_csv_and_console_agree_and_nothing_else_is_written() {
    let dir = trained("evaluate-input");
    let [_, _, ex, ey] = digits();
    let before = crate::util::file_names(dir.path());
    let from_input = evaluate_json(
        dir.path(),
        &[
            "m.toml",
            "--checkpoint",
            "ck",
            "--mode",
            "test",
            "--input",
            &format!("x={}", ex.display()),
            "--input",
            &format!("y={}", ey.display()),
        ],
    );
    let test = evaluate_json(
        dir.path(),
        &["m.toml", "--checkpoint", "ck", "--mode", "test"],
    );
    assert_eq!(from_input["datasets"], test["datasets"]);
    let console = fe_host_in(
        dir.path(),
        &[
            "evaluate",
            "m.toml",
            "--checkpoint",
            "ck",
            "--csv",
            "eval.csv",
        ],
    );
    assert_eq!(console.code, 0, "{}", console.stderr);
    assert_contains!(
        console.stdout,
        "fe-host eval: ds_id: a; samples: 160; accuracy: "
    );
    assert_contains!(
        console.stdout,
        "fe-host eval: ds_id: b; samples: 160; accuracy: "
    );
    let csv = std::fs::read_to_string(dir.path().join("eval.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows[0], "mode,ds_id,samples,accuracy,ce");
    assert!(rows[1].starts_with("eval,a,160,"), "{csv}");
    assert_eq!(rows.len(), 3, "{csv}");
    let mut after = crate::util::file_names(dir.path());
    after.retain(|name| name != "eval.csv");
    assert_eq!(before, after, "evaluate wrote only its CSV");
    assert_eq!(
        crate::util::file_names(&dir.path().join("ck")).len(),
        2,
        "no checkpoint was added"
    );
}

#[test]
fn untrained_weights_a_training_mode_and_a_csv_over_an_input_are_refused() {
    let dir = trained("evaluate-refusals");
    for (args, needle) in [
        (
            vec!["evaluate", "m.toml"],
            "no trained weights for model(s) lenet",
        ),
        (
            vec![
                "evaluate",
                "m.toml",
                "--checkpoint",
                "ck",
                "--mode",
                "train",
            ],
            "evaluate runs eval or test",
        ),
        (
            vec![
                "evaluate",
                "m.toml",
                "--checkpoint",
                "ck",
                "--csv",
                "m.toml",
            ],
            "is the manifest",
        ),
    ] {
        let run = fe_host_in(dir.path(), &args);
        assert_eq!(run.code, 2, "{args:?}: {}{}", run.stdout, run.stderr);
        assert_contains!(run.stderr, needle);
    }
    // Untrained on purpose: runs, and gives another number than the trained weights.
    let random = evaluate_json(dir.path(), &["m.toml", "--random-weights"]);
    let trained = evaluate_json(dir.path(), &["m.toml", "--checkpoint", "ck"]);
    assert_ne!(values(&random, 0)["ce"], values(&trained, 0)["ce"]);
}

#[test]
fn evaluate_on_one_and_two_ranks_gives_the_numbers_of_one_process() {
    let dir = trained("evaluate-nproc");
    let one = evaluate_json(dir.path(), &["m.toml", "--checkpoint", "ck"]);
    for nproc in ["1", "2"] {
        // Rank 0's JSON is the command's output, unprefixed, as one process prints it.
        let ranks = evaluate_json(
            dir.path(),
            &["m.toml", "--checkpoint", "ck", "--nproc", nproc],
        );
        for index in 0..2 {
            assert_eq!(
                ranks["datasets"][index]["ds_id"], one["datasets"][index]["ds_id"],
                "--nproc {nproc}"
            );
            assert_eq!(
                ranks["datasets"][index]["samples"],
                one["datasets"][index]["samples"]
            );
            let (alone, shared) = (values(&one, index), values(&ranks, index));
            assert_eq!(
                alone.keys().collect::<Vec<_>>(),
                shared.keys().collect::<Vec<_>>()
            );
            // Counts reduce exactly; a mean loss sums its batches in another order (two
            // halves of 16 instead of batches of 32), so it may differ in the last bits.
            assert_eq!(alone["accuracy"], shared["accuracy"], "--nproc {nproc}");
            let (a, s) = (
                alone["ce"].as_f64().unwrap(),
                shared["ce"].as_f64().unwrap(),
            );
            assert!(
                (a - s).abs() <= 1e-6 * a.abs(),
                "--nproc {nproc}: ce {a} vs {s}"
            );
        }
    }
    // Two ranks on the test data with a CSV: one file, written once, as one process writes it.
    let csv_one = fe_host_in(
        dir.path(),
        &[
            "evaluate",
            "m.toml",
            "--checkpoint",
            "ck",
            "--mode",
            "test",
            "--csv",
            "one.csv",
        ],
    );
    assert_eq!(csv_one.code, 0, "{}", csv_one.stderr);
    let csv_two = fe_host_in(
        dir.path(),
        &[
            "evaluate",
            "m.toml",
            "--checkpoint",
            "ck",
            "--mode",
            "test",
            "--csv",
            "two.csv",
            "--nproc",
            "2",
        ],
    );
    assert_eq!(csv_two.code, 0, "{}{}", csv_two.stdout, csv_two.stderr);
    assert_contains!(csv_two.stdout, "fe-host test: samples: ");
    assert!(!csv_two.stdout.contains("[rank 1]"), "{}", csv_two.stdout);
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    let (one_rows, two_rows) = (read("one.csv"), read("two.csv"));
    assert_eq!(one_rows.lines().next(), two_rows.lines().next());
    assert_eq!(one_rows.lines().count(), two_rows.lines().count());
}

/// `--best` finds the model a versioned run's `BestModelSaver` kept (in the newest version,
/// where its `save_dir` moved), and it is that epoch's model: evaluated on the run's eval data
/// it gives the lowest eval loss the run logged. The saver's directory given to `--weights`
/// loads the same file.
#[test]
fn best_evaluates_the_model_the_run_kept_at_its_best_epoch() {
    let dir = TempDir::new("evaluate-best");
    let text = crate::util::lenet_manifest(
        3,
        "\n[[traces]]\ntrace = \"BestModelSaver\"\nmodel = \"lenet\"\nsave_dir = \"runs/lenet/best\"\n",
    )
    .replace(
        "log_steps = 50",
        "log_steps = 50\nlog_dir = \"runs/lenet\"\ntrain_steps_per_epoch = 10\neval_steps_per_epoch = 5",
    );
    dir.write("m.toml", &text);
    let untrained = fe_host_in(dir.path(), &["evaluate", "m.toml", "--best"]);
    assert_eq!(untrained.code, 2, "{}", untrained.stderr);
    crate::assert_contains!(untrained.stderr, "no run of this manifest yet");
    let run = fe_host_in(
        dir.path(),
        &["run", "m.toml", "-q", "--summary", "summary.json"],
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap())
            .unwrap();
    let lowest = *crate::util::values(&summary, "eval", "min_ce")
        .last()
        .unwrap();
    let best = evaluate_json(dir.path(), &["m.toml", "--best"]);
    let ce = values(&best, 0)["ce"].as_f64().unwrap();
    assert!(
        (ce - lowest).abs() <= 1e-6 * lowest.abs().max(1.0),
        "--best ce {ce}, the run's lowest eval ce {lowest}"
    );
    let by_dir = evaluate_json(
        dir.path(),
        &["m.toml", "--weights", "runs/lenet/version_0/best"],
    );
    assert_eq!(by_dir["datasets"], best["datasets"]);
    // A manifest without a saver has no best model to name.
    dir.write("plain.toml", &crate::util::lenet_manifest(1, ""));
    let refused = fe_host_in(dir.path(), &["evaluate", "plain.toml", "--best"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    crate::assert_contains!(refused.stderr, "has no BestModelSaver trace");
}
