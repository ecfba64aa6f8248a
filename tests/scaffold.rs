//! `fe-host new plugin`: for every kind, the generated crate passes its own unit test and
//! builds outside the workspace, and fe-host loads the result and lists its component.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::util::{fe_host, lenet_manifest, root, run, run_failing, Run, TempDir};

/// `--kind`, the component it names after the crate `new-<kind>`, how `plugins list` shows
/// its kind and default mode, and a configuration field `plugins show` documents.
const KINDS: [(&str, &str, &str, &str); 7] = [
    ("tensor-op", "NewTensorOp", "tensor-op", "factor"),
    ("numpy-op", "NewNumpyOp", "numpy-op", "max"),
    ("trace", "NewTrace", "trace", "target"),
    ("metric", "NewMetric", "metric", ""),
    ("model", "NewModel", "model", "hidden"),
    ("dataset", "NewDataset", "dataset", "samples"),
    ("slicer", "NewSlicer", "slicer", "parts"),
];

/// The modes each kind's component declares: a loss-like op must not run in `infer`.
const MODES: [(&str, &str); 3] = [
    ("NewTensorOp", "[mode: !infer]"),
    ("NewTrace", "[mode: eval]"),
    ("NewMetric", "[mode: eval,test]"),
];

/// `cargo <args>` in `dir`, into the target directory the out-of-tree tests share (so the
/// dependencies compile once); the workspace's lock file pins the same versions.
fn cargo(dir: &Path, args: &[&str]) {
    let _guard = crate::util::fixtures_lock();
    std::fs::copy(root().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let out = Command::new(env!("CARGO"))
        .args(args)
        .arg("--quiet")
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", root().join("target/fixtures"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo {args:?} in {}:\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_kind_builds_alone_passes_its_test_and_loads() {
    let dir = TempDir::new("scaffold");
    let mut libraries = Vec::new();
    for (kind, _, _, _) in KINDS {
        let name = format!("new-{kind}");
        let crate_dir = dir.path().join(&name);
        let out = run(&[
            "new",
            "plugin",
            &name,
            "--kind",
            kind,
            "--dir",
            &crate_dir.to_string_lossy(),
        ]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert_contains!(out.stdout, "cargo test && fe-host plugins build .");
        cargo(&crate_dir, &["test"]);
        cargo(&crate_dir, &["build"]);
        let library = root()
            .join("target/fixtures/debug")
            .join(format!("libnew_{}.so", kind.replace('-', "_")));
        assert!(library.is_file(), "{} built", library.display());
        libraries.push(library);
    }
    let mut args = vec!["plugins".to_owned(), "list".to_owned()];
    for library in &libraries {
        args.push("--plugin-dir".to_owned());
        args.push(library.to_string_lossy().into_owned());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&args);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for (_, component, listed_as, field) in KINDS {
        let line = out
            .stdout
            .lines()
            .find(|l| l.contains(component))
            .unwrap_or_else(|| panic!("`{component}` listed:\n{}", out.stdout));
        assert_contains!(line, listed_as);
        if let Some((_, mode)) = MODES.iter().find(|(c, _)| *c == component) {
            assert_contains!(line, mode);
        }
        // Declared fields: `plugins show` documents them instead of "not declared".
        let mut show = vec!["plugins", "show", component];
        show.extend(args[2..].iter().copied());
        let shown = run(&show);
        assert_eq!(shown.code, 0, "{}", shown.stderr);
        assert!(
            !shown.stdout.contains("no field declarations"),
            "{}",
            shown.stdout
        );
        if field.is_empty() {
            assert_contains!(shown.stdout, "no configuration fields");
        } else {
            assert_contains!(shown.stdout, format!("    {field} "));
        }
    }
}

#[test]
fn keyword_and_builtin_crate_names_are_refused_in_one_line() {
    let dir = TempDir::new("scaffold-keywords");
    for name in ["fn", "std", "core", "alloc", "test", "proc-macro"] {
        let target = dir.path().join(name);
        let out = run_failing(
            &["new", "plugin", name, "--dir", &target.to_string_lossy()],
            2,
        );
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert_contains!(out.stderr, format!("`{name}` is"));
        assert_contains!(out.stderr, "choose another name");
        assert!(!target.exists(), "{name}: nothing written");
    }
}

/// fe-host with the fixtures' target directory as the shared plugin one: the out-of-tree
/// tests keep it built with the checkout's settings, which crates under `target/` share, as
/// setup keeps `target/plugin-build` built for crates outside the checkout.
fn fe_host_with_cache(args: &[&str]) -> Run {
    let _guard = crate::util::fixtures_lock();
    fe_host()
        .args(args)
        .env("FE_PLUGIN_TARGET_DIR", root().join("target/fixtures"))
        .output()
        .expect("fe-host")
        .into()
}

/// `new plugin NAME` into `dir`, then `plugins build` into `dir/plugins`; returns the seconds
/// the build took and the installed library.
fn scaffold_and_build(dir: &Path, name: &str) -> (f64, std::path::PathBuf) {
    let crate_dir = dir.join(name);
    let crate_arg = crate_dir.to_string_lossy().into_owned();
    let out = fe_host_with_cache(&["new", "plugin", name, "--dir", &crate_arg]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let config = std::fs::read_to_string(crate_dir.join(".cargo/config.toml")).unwrap();
    assert_contains!(config, "target/fixtures");
    // Installed into a plugin root of its own (the default is fe-host's).
    let installed_dir = dir.join("plugins");
    let started = Instant::now();
    let out = fe_host_with_cache(&[
        "plugins",
        "build",
        &crate_arg,
        "--into",
        &installed_dir.to_string_lossy(),
    ]);
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let installed = installed_dir.join(format!("lib{}.so", name.replace('-', "_")));
    assert_contains!(out.stdout, format!("installed {}", installed.display()));
    assert!(installed.is_file());
    (seconds, installed)
}

#[test]
fn a_scaffolded_op_builds_on_the_shared_cache_installs_and_predicts() {
    let dir = TempDir::new("scaffold-predict");
    // What setup does once: a first plugin fills the shared target directory.
    let (warm_up, _) = scaffold_and_build(&dir.path().join("warm"), "fe-warm-up");
    // Measured, not asserted: a new crate's first build on the shared directory.
    let (first, installed) = scaffold_and_build(dir.path(), "my-scale");
    println!(
        "plugins build: warm-up (fills the shared directory when empty) {warm_up:.1} s; a new plugin's first build on it {first:.1} s"
    );
    let crate_dir = dir.path().join("my-scale");
    // Used as its README shows, in a training run, then in the predict command the run
    // prints: the op scales a loss, which does not exist in `infer`.
    let usage = std::fs::read_to_string(crate_dir.join("README.md")).unwrap();
    let usage = usage
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("README's manifest example");
    let ops =
        "[[network.ops]]\nop = \"CrossEntropy\"\ninputs = [\"y_pred\", \"y\"]\noutputs = \"ce\"\n";
    let extra = format!("\n[plugins]\npaths = [\"{}\"]\n", installed.display());
    let manifest = lenet_manifest(1, &extra)
        .replace(
            "[run]\n",
            "[run]\ntrain_steps_per_epoch = 4\neval_steps_per_epoch = 2\n",
        )
        .replace(ops, &format!("{ops}\n{usage}\n"));
    assert_contains!(manifest, "op = \"MyScale\"");
    let path = dir.write("m.toml", &manifest);
    let trained = run(&["run", &path.to_string_lossy()]);
    assert_eq!(trained.code, 0, "{}", trained.stderr);
    let [_, _, eval_x, _] = crate::util::digits();
    let out_file = dir.path().join("predictions.csv");
    let predicted = run(&[
        "predict",
        &path.to_string_lossy(),
        "--random-weights",
        "--input",
        &format!("x={}", eval_x.display()),
        "--limit",
        "4",
        "--out",
        &out_file.to_string_lossy(),
    ]);
    assert_eq!(predicted.code, 0, "{}", predicted.stderr);
    assert!(out_file.is_file());
}

#[test]
fn a_bad_name_or_an_existing_directory_is_refused_and_nothing_written() {
    let dir = TempDir::new("scaffold-refusals");
    let target = dir.path().join("Bad Name");
    let out = run_failing(
        &[
            "new",
            "plugin",
            "Bad Name",
            "--dir",
            &target.to_string_lossy(),
        ],
        2,
    );
    assert_contains!(out.stderr, "`Bad Name` is not a crate name");
    assert!(!target.exists());
    let taken = dir.write("taken/keep.txt", "mine");
    let out = run_failing(
        &[
            "new",
            "plugin",
            "fine",
            "--dir",
            &dir.path().join("taken").to_string_lossy(),
        ],
        2,
    );
    assert_contains!(
        out.stderr,
        "already exists and is not empty; nothing was written"
    );
    assert_eq!(std::fs::read_to_string(taken).unwrap(), "mine");
}
