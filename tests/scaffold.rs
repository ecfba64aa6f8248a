//! `fe-host new plugin`: for every kind, the generated crate passes its own unit test and
//! builds outside the workspace, and fe-host loads the result and lists its component.

use std::path::Path;
use std::process::Command;

use crate::util::{root, run, run_failing, TempDir};

/// `--kind`, the component it names after the crate `new-<kind>`, and how `plugins list`
/// shows its kind.
const KINDS: [(&str, &str, &str); 7] = [
    ("tensor-op", "NewTensorOp", "tensor-op"),
    ("numpy-op", "NewNumpyOp", "numpy-op"),
    ("trace", "NewTrace", "trace"),
    ("metric", "NewMetric", "metric"),
    ("model", "NewModel", "model"),
    ("dataset", "NewDataset", "dataset"),
    ("slicer", "NewSlicer", "slicer"),
];

/// `cargo <args>` in `dir`, into the target directory the out-of-tree tests share (so the
/// dependencies compile once); the workspace's lock file pins the same versions.
fn cargo(dir: &Path, args: &[&str]) {
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
    for (kind, _, _) in KINDS {
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
        assert_contains!(out.stdout, "cargo test && cargo build");
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
    for (_, component, listed_as) in KINDS {
        let line = out
            .stdout
            .lines()
            .find(|l| l.contains(component))
            .unwrap_or_else(|| panic!("`{component}` listed:\n{}", out.stdout));
        assert_contains!(line, listed_as);
    }
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
