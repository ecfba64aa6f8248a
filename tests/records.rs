//! A version directory is a complete record of its run: `record.json` and `manifest.toml`
//! beside `run.json`; `fe-host run --again` reruns it from the record alone and
//! `fe-host logs --diff` compares two runs.

use std::path::Path;

use crate::util::{copy_example, fe_host_in, file_names, small_digits, Run, TempDir};

fn ok_in(dir: &Path, args: &[&str]) -> Run {
    let out = fe_host_in(dir, args);
    assert_eq!(out.code, 0, "{args:?}: {}{}", out.stdout, out.stderr);
    out
}

fn record(version: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(version.join("record.json")).unwrap()).unwrap()
}

/// examples/lenet.toml (relative data and run root) on the small digits, one epoch by
/// `--set`, into `runs/lenet/version_0`.
fn first_run(temp: &TempDir) {
    copy_example(temp, "lenet");
    small_digits(temp);
    ok_in(
        temp.path(),
        &[
            "run",
            "examples/lenet.toml",
            "--set",
            "run.epochs=1",
            "--threads",
            "1",
            "--save-weights",
            "w0",
            "-q",
        ],
    );
}

#[test]
fn a_rerun_from_its_record_alone_reproduces_the_final_weights_bit_for_bit() {
    let temp = TempDir::new("record-again");
    first_run(&temp);
    let dir = temp.path();
    let v0 = dir.join("runs/lenet/version_0");
    assert_eq!(
        file_names(&v0),
        [
            "best",
            "checkpoints",
            "log.jsonl",
            "manifest.toml",
            "metrics.svg",
            "record.json",
            "run.json"
        ]
    );
    // The resolved manifest: the override applied and the defaults written out.
    let manifest = std::fs::read_to_string(v0.join("manifest.toml")).unwrap();
    for line in ["epochs = 1", "seed = 42", "warmup = true", "shuffle = true"] {
        assert_contains!(manifest, line);
    }
    let first = record(&v0);
    assert_eq!(first["manifest"]["overrides"][0], "run.epochs=1");
    assert_eq!(first["world_size"], 1);
    assert_eq!(first["threads"], 1);
    assert_eq!(first["seed"], 42);
    assert_eq!(first["device"], "cpu");
    assert_eq!(first["end"]["outcome"], "completed");
    // Every data file, by its whole-file sha256 (they are small).
    let data = first["data"].as_array().unwrap();
    assert_eq!(data.len(), 4, "{data:?}");
    let images = dir.join("data/digits/train-images-idx3-ubyte");
    let train = data
        .iter()
        .find(|d| d["key"] == "pipeline.data.train.files.x")
        .unwrap();
    assert_eq!(train["path"], images.to_str().unwrap());
    assert_eq!(train["method"], "sha256");
    let bytes = std::fs::read(&images).unwrap();
    assert_eq!(train["size"], bytes.len());
    assert_eq!(
        train["sha256"],
        fe_host::checkpoint::store::sha256_hex(&bytes)
    );
    // fe-host and every plugin with the sha256 of its file.
    let plugins = first["plugins"].as_array().unwrap();
    let models = plugins.iter().find(|p| p["name"] == "fe-models").unwrap();
    let file = std::fs::read(models["path"].as_str().unwrap()).unwrap();
    assert_eq!(
        models["sha256"],
        fe_host::checkpoint::store::sha256_hex(&file)
    );

    // From another working directory, with the record alone: the manifest's relative paths
    // still resolve against its own directory, and the rerun writes a new version.
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let w1 = dir.join("w1");
    ok_in(
        &elsewhere,
        &[
            "run",
            "--again",
            v0.to_str().unwrap(),
            "--save-weights",
            w1.to_str().unwrap(),
            "-q",
        ],
    );
    let v1 = dir.join("runs/lenet/version_1");
    assert_eq!(record(&v1)["again_of"], v0.to_str().unwrap());
    let weights = |p: &Path| std::fs::read(p.join("lenet.safetensors")).unwrap();
    assert!(
        weights(&dir.join("w0")) == weights(&w1),
        "the rerun's final weights differ"
    );
    let best = "best/lenet_best_ce.safetensors";
    assert!(std::fs::read(v0.join(best)).unwrap() == std::fs::read(v1.join(best)).unwrap());
    assert_eq!(file_names(&elsewhere), Vec::<String>::new());

    let same = ok_in(
        dir,
        &["logs", "--diff", "runs/lenet/version_0", "runs/lenet"],
    );
    assert_contains!(same.stdout, "B: runs/lenet/version_1 (started ");
    assert_contains!(same.stdout, "\nsettings: equal (");
    assert_contains!(same.stdout, "\nenvironment: equal (");
    assert_contains!(same.stdout, "\nfinal metrics: equal (");

    // Another learning rate: the diff names the key and both runs' final values.
    ok_in(
        dir,
        &[
            "run",
            "examples/lenet.toml",
            "--set",
            "run.epochs=1",
            "--set",
            "models.lenet.optimizer.lr=0.01",
            "--threads",
            "1",
            "-q",
        ],
    );
    let v2 = dir.join("runs/lenet/version_2");
    let changed = ok_in(
        dir,
        &[
            "logs",
            "--diff",
            "runs/lenet/version_0",
            "runs/lenet/version_2",
        ],
    );
    assert_contains!(changed.stdout, "\nsettings: 1 of ");
    assert_contains!(
        changed.stdout,
        " differ\n  models.lenet.optimizer.lr: 0.001 | 0.01\nenvironment: equal"
    );
    let ce = |v: &Path| record(v)["end"]["metrics"]["eval"]["ce"].as_f64().unwrap();
    assert_ne!(ce(&v0), ce(&v2));
    assert_contains!(
        changed.stdout,
        format!("\n  eval ce: {} | {}\n", ce(&v0), ce(&v2))
    );
}

#[test]
fn a_rerun_refuses_a_changed_plugin_or_data_file_unless_allowed() {
    let temp = TempDir::new("record-changed");
    first_run(&temp);
    let dir = temp.path();
    let v0 = dir.join("runs/lenet/version_0");
    let edit = |change: &dyn Fn(&mut serde_json::Value)| {
        let mut value = record(&v0);
        change(&mut value);
        std::fs::write(v0.join("record.json"), value.to_string()).unwrap();
    };
    let zeros = "0".repeat(64);
    edit(&|r| {
        let data = r["data"].as_array_mut().unwrap();
        let train = data
            .iter_mut()
            .find(|d| d["key"] == "pipeline.data.train.files.x")
            .unwrap();
        train["sha256"] = zeros.clone().into();
    });
    let data = fe_host_in(dir, &["run", "--again", "runs/lenet/version_0", "-q"]);
    assert_eq!(data.code, 5, "{}", data.stderr);
    assert_contains!(
        data.stderr,
        "data/digits/train-images-idx3-ubyte: changed since "
    );
    assert_contains!(data.stderr, &format!("sha256 {zeros}; now "));
    assert_contains!(data.stderr, "pass --allow-changes to run anyway");

    let position = |r: &serde_json::Value| {
        let plugins = r["plugins"].as_array().unwrap();
        plugins
            .iter()
            .position(|p| p["name"] == "fe-models")
            .unwrap()
    };
    edit(&|r| {
        let at = position(r);
        r["plugins"][at]["sha256"] = zeros.clone().into();
    });
    let plugin = fe_host_in(dir, &["run", "--again", "runs/lenet/version_0", "-q"]);
    assert_eq!(plugin.code, 3, "{}", plugin.stderr);
    assert_contains!(plugin.stderr, "plugin fe-models changed: ");
    assert_contains!(plugin.stderr, &format!("ran with {zeros} (version 0.1.0)"));
    // Refused before anything was written.
    assert_eq!(file_names(&dir.join("runs/lenet")), ["latest", "version_0"]);

    let allowed = ok_in(
        dir,
        &[
            "run",
            "--again",
            "runs/lenet/version_0",
            "--allow-changes",
            "-q",
        ],
    );
    assert_contains!(
        allowed.stderr,
        "fe-host run --again: plugin fe-models changed: "
    );
    assert_contains!(allowed.stderr, "train-images-idx3-ubyte: changed since ");
    assert!(dir.join("runs/lenet/version_1/record.json").is_file());

    let old = fe_host_in(dir, &["logs", "--diff", "runs/lenet/version_0", "w0"]);
    assert_eq!(old.code, 2);
    assert_contains!(old.stderr, "--diff: w0 holds no record.json");
}

#[test]
fn a_missing_example_dataset_names_the_command_that_generates_it() {
    let temp = TempDir::new("record-no-data");
    copy_example(&temp, "lenet");
    let out = fe_host_in(temp.path(), &["run", "examples/lenet.toml", "-q"]);
    assert_eq!(out.code, 5, "{}", out.stderr);
    assert_contains!(
        out.stderr,
        "No such file or directory (os error 2); generate it: fe-host datagen digits --out data/digits"
    );
    assert!(!temp.path().join("runs/lenet/version_0").exists());
}
