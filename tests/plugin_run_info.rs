//! What plugins are told about the run (fe-plugin-api's `RunInfo`), through the real binary:
//! relative paths in a configuration resolve against the manifest's directory whatever the
//! working directory, plugin-written files land in the run's output directory (and `--smoke`
//! redirects them), and traces see rank 0 of 1. Also `fe-host plugins show`.

use std::path::Path;

use crate::util::{fe_host, lenet_manifest, run, run_failing, TempDir};

/// The LeNet run with the fixture trace `RunReport`, which reads `notes.txt` (relative to the
/// manifest) and writes `report.txt` (an output path) at `on_begin`.
fn manifest_with_report(log_dir: &str) -> String {
    lenet_manifest(
        1,
        "\n[[traces]]\ntrace = \"RunReport\"\nread = \"notes.txt\"\nfile = \"report.txt\"\n",
    )
    .replace(
        "[run]\n",
        &format!(
            "[run]\ntrain_steps_per_epoch = 2\neval_steps_per_epoch = 1\nlog_dir = \"{log_dir}\"\n"
        ),
    )
}

/// Runs `fe-host args...` from `cwd`.
fn run_in(cwd: &Path, args: &[&str]) -> crate::util::Run {
    fe_host()
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run fe-host")
        .into()
}

#[test]
fn plugin_paths_resolve_against_the_manifest_and_outputs_go_to_the_run_dir() {
    let dir = TempDir::new("run-info");
    let experiment = dir.path().join("experiment");
    std::fs::create_dir_all(&experiment).unwrap();
    std::fs::write(
        experiment.join("notes.txt"),
        "written next to the manifest\n",
    )
    .unwrap();
    let manifest = experiment.join("m.toml");
    std::fs::write(&manifest, manifest_with_report("logs")).unwrap();
    // Another working directory, where `notes.txt` does not exist.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let out = run_in(&elsewhere, &["run", &manifest.to_string_lossy()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let report = std::fs::read_to_string(experiment.join("logs/version_0/report.txt")).unwrap();
    let manifest_dir = std::path::absolute(&experiment).unwrap();
    assert_eq!(
        report,
        format!(
            "rank 0 of 1\nmanifest_dir {}\nread written next to the manifest\n",
            manifest_dir.display()
        )
    );
    assert!(!elsewhere.join("report.txt").exists());
    assert!(!elsewhere.join("logs").exists());
}

#[test]
fn smoke_runs_redirect_plugin_written_files() {
    let dir = TempDir::new("run-info-smoke");
    dir.write("notes.txt", "notes\n");
    let manifest = dir.write("m.toml", &manifest_with_report("logs"));
    let out = run(&["run", &manifest.to_string_lossy(), "--smoke", "--keep"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        !dir.path().join("logs").exists(),
        "--smoke wrote into the real log_dir"
    );
    assert!(!dir.path().join("report.txt").exists());
    // The trace did write: into the smoke run's own directory.
    let kept = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("fe-host smoke: kept everything it wrote in "))
        .expect("--keep names its directory")
        .trim()
        .to_owned();
    let kept = Path::new(&kept);
    let report = std::fs::read_to_string(kept.join("log/report.txt"));
    let _ = std::fs::remove_dir_all(kept);
    assert_contains!(report.unwrap(), "rank 0 of 1\n");
}

#[test]
fn plugins_show_prints_declared_fields_with_types_defaults_and_docs() {
    let out = run(&["plugins", "show", "FocalLoss"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(out.stdout, "FocalLoss: tensor-op from plugin `fe-losses` (");
    assert_contains!(
        out.stdout,
        "  Sigmoid focal loss (RetinaNet) against 0/1 labels, from probabilities or logits\n  default mode: !infer\n  fields:\n"
    );
    for line in [
        "    gamma             float                    default 2.0     Exponent of the modulating factor (1 - p_t)^gamma; >= 0\n",
        "    sample_reduction  \"mean\" | \"sum\" | \"none\"  default \"mean\"  Reduction over the batch\n",
    ] {
        assert_contains!(out.stdout, line);
    }
    let out = run(&["plugins", "show", "Reshape"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Two components of that name (a tensor op and a numpy op): both are shown.
    assert_contains!(out.stdout, "Reshape: numpy-op from plugin `fe-numpy-ops`");
    assert_contains!(out.stdout, "Reshape: tensor-op from plugin `fe-tensor-ops`");
    assert_contains!(
        out.stdout,
        "    shape  [integer]  required  The whole output's shape, batch dimension included; one entry may be -1"
    );
    let out = run(&["plugins", "show", "Accuracy"]);
    assert_contains!(out.stdout, "  no configuration fields\n");
}

#[test]
fn plugins_show_says_when_a_component_declares_nothing_and_refuses_unknown_names() {
    // The test fixture declares no fields.
    let out = run(&["plugins", "show", "Panic"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(out.stdout, "  no field declarations\n");
    let out = run_failing(&["plugins", "show", "FocalLos"], 2);
    assert_text_eq!(
        out.stderr,
        "error: no component is called `FocalLos`; did you mean `FocalLoss`?\n"
    );
}

#[test]
fn plugins_show_documents_the_built_ins_fields() {
    // Built-ins showed "no field declarations": GradientOp's required `finals` was
    // documented nowhere.
    let out = run(&["plugins", "show", "GradientOp"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(out.stdout, "GradientOp: tensor-op from fe-host (built in)");
    assert_contains!(out.stdout, "  fields:\n    finals  string  required");
    assert_contains!(out.stdout, "    model   string  default none");
    let out = run(&["plugins", "show", "UpdateOp"]);
    assert_contains!(out.stdout, "    merge_grad  integer");
    let out = run(&["plugins", "show", "Timer"]);
    assert_contains!(out.stdout, "  no configuration fields\n");
    for name in ["ReduceLROnPlateau", "Repeat", "idx", "BestModelSaver"] {
        let out = run(&["plugins", "show", name]);
        assert!(
            out.stdout.contains("  fields:\n") && !out.stdout.contains("no field declarations"),
            "{name}: {}",
            out.stdout
        );
    }
}

#[test]
fn every_shipped_plugin_component_declares_its_fields() {
    // In-process through the real loader: `plugins show` for ~50 names would load libtorch
    // ~50 times.
    let registry = crate::network::registry();
    let mut missing = Vec::new();
    for (index, plugin) in registry.plugins.plugins.iter().enumerate() {
        if plugin.name() == "fe-faulty" {
            continue;
        }
        for entry in registry
            .entries()
            .filter(|e| e.provider == fe_host::plugins::Provider::Plugin(index))
        {
            let shown = fe_host::plugins::show::render_show(&registry, &entry.info.name)
                .expect("a listed component is shown");
            if shown.contains("no field declarations") {
                missing.push(entry.info.name.to_string());
            }
        }
    }
    assert!(
        registry.plugins.plugins.len() >= 7,
        "the shipped plugins load"
    );
    assert!(missing.is_empty(), "no field declarations: {missing:?}");
}

#[test]
fn a_plugin_trace_adds_a_graph_that_the_run_summary_carries() {
    // FastEstimator's `system.add_graph` from a trace: the graph lands next to the history
    // in the `--summary` file, replaced by each later call under the same name.
    let dir = TempDir::new("add-graph");
    let manifest = lenet_manifest(2, "\n[[traces]]\ntrace = \"AddGraph\"\n").replace(
        "[run]\n",
        "[run]\ntrain_steps_per_epoch = 2\neval_steps_per_epoch = 1\n",
    );
    let summary = crate::util::summary(&dir, &manifest);
    let graphs = &summary["custom_graphs"]["epochs_seen"];
    assert_eq!(
        graphs,
        &serde_json::json!([{ "history": {
            "train": { "epoch": { "1": 10.0, "2": 20.0 } },
            "eval": { "epoch": { "1": 10.0, "2": 20.0 } },
        }}]),
        "summary: {summary}"
    );
    assert!(
        summary["history"]["train"]["ce"].is_object(),
        "history kept"
    );
}
