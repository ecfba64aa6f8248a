//! No command destroys a file it reads: every output flag refuses a path that is an input of
//! the same command, a file of a checkpoint or an export, or anything inside a checkpoint
//! folder, before writing anything (exit 2), and every file stays byte for byte as it was.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::util::{digits, fe_host_in, TempDir};

/// LeNet trained for 20 steps with a checkpoint folder `ck/`, its weights in `weights/` and
/// its export in `export/`; the evaluation images copied to `data/x.idx` to predict on.
fn trained(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    let text = crate::util::lenet_manifest(1, "\n[checkpoint]\ndir = \"ck\"\nevery_epochs = 1\n")
        .replace(
            "log_steps = 50",
            "log_steps = 50\ntrain_steps_per_epoch = 20\neval_steps_per_epoch = 2",
        );
    dir.write("m.toml", &text);
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::copy(&digits()[2], dir.path().join("data/x.idx")).unwrap();
    let out = fe_host_in(
        dir.path(),
        &[
            "run",
            "m.toml",
            "-q",
            "--export",
            "export",
            "--save-weights",
            "weights",
        ],
    );
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    dir
}

/// Every file under `dir` with its bytes (and every directory, empty or not).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let name = path.strip_prefix(root).unwrap().to_path_buf();
            if path.is_dir() {
                out.insert(name, b"<dir>".to_vec());
                walk(&path, root, out);
            } else {
                out.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn every_output_flag_refuses_what_the_command_reads_and_leaves_every_file_as_it_was() {
    let dir = trained("overwrites");
    let ckpt = crate::util::file_names(&dir.path().join("ck"))
        .into_iter()
        .find(|n| n.starts_with("ckpt-"))
        .unwrap();
    let in_ckpt = format!("ck/{ckpt}/models/lenet.safetensors");
    let ckpt_dir = format!("ck/{ckpt}");
    dir.write(
        "saver.toml",
        &format!(
            "{}\n[[traces]]\ntrace = \"ModelSaver\"\nmodel = \"lenet\"\nsave_dir = \"ck/{ckpt}\"\n",
            std::fs::read_to_string(dir.path().join("m.toml")).unwrap()
        ),
    );
    let input = ["--input", "x=data/x.idx"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        // predict: into a checkpoint's files, an export's files, its own input and weights.
        (
            [
                &["predict", "m.toml", "--checkpoint", "ck"][..],
                &input,
                &["--out", &in_ckpt],
            ]
            .concat(),
            "inside the checkpoint",
        ),
        (
            [
                &["predict", "export/lenet.json"][..],
                &input,
                &["--out", "export/lenet.safetensors"],
            ]
            .concat(),
            "this command reads",
        ),
        (
            [
                &["predict", "m.toml", "--weights", "weights"][..],
                &input,
                &["--out", "data/x.idx"],
            ]
            .concat(),
            "is the --input data this command reads",
        ),
        (
            [
                &["predict", "m.toml", "--weights", "weights"][..],
                &input,
                &["--out", "weights/lenet.safetensors"],
            ]
            .concat(),
            "inside the weights",
        ),
        (
            [
                &["predict", "m.toml", "--weights", "weights"][..],
                &input,
                &["--out", "m.toml"],
            ]
            .concat(),
            "is the manifest",
        ),
        // transform: onto the weights it loads, into a checkpoint folder.
        (
            [
                &[
                    "transform",
                    "m.toml",
                    "--weights",
                    "weights/lenet.safetensors",
                ][..],
                &input,
                &["--out", "weights/lenet.safetensors"],
            ]
            .concat(),
            "is the weights this command reads",
        ),
        (
            [
                &["transform", "m.toml", "--weights", "weights"][..],
                &input,
                &["--out", "ck/t.safetensors"],
            ]
            .concat(),
            "inside the checkpoint folder",
        ),
        // export: into the checkpoint folder it reads.
        (
            vec![
                "export",
                "m.toml",
                "--checkpoint",
                "ck",
                "--out",
                "ck/exported",
            ],
            "inside the checkpoint folder",
        ),
        // run: every output it writes at the end or on the way.
        (
            vec!["run", "m.toml", "--save-weights", &ckpt_dir],
            "inside the checkpoint",
        ),
        (
            vec!["run", "m.toml", "--export", "export/again"],
            "inside the export",
        ),
        (
            vec![
                "run",
                "m.toml",
                "--load-weights",
                "weights",
                "--summary",
                "weights/s.json",
            ],
            "inside the --load-weights weights",
        ),
        (
            vec!["run", "m.toml", "--summary", "m.toml"],
            "is the manifest",
        ),
        (
            vec!["run", "m.toml", "--log-dir", "ck"],
            "checkpoint folder",
        ),
        (vec!["run", "saver.toml"], "traces[1].save_dir"),
    ];
    let before = snapshot(dir.path());
    for (args, needle) in cases {
        let run = fe_host_in(dir.path(), &args);
        assert_eq!(run.code, 2, "{args:?}: {}{}", run.stdout, run.stderr);
        assert_contains!(run.stderr, needle);
        assert_eq!(
            run.stderr.trim().lines().count(),
            1,
            "{args:?}: {}",
            run.stderr
        );
        let after = snapshot(dir.path());
        assert!(
            before == after,
            "{args:?} changed files: {:?}",
            before
                .keys()
                .chain(after.keys())
                .filter(|k| before.get(*k) != after.get(*k))
                .collect::<Vec<_>>()
        );
    }
    let verified = fe_host_in(dir.path(), &["checkpoint", "verify", "ck"]);
    assert_eq!(verified.code, 0, "{}", verified.stderr);
    // Beside its inputs, in a place nothing reads, predict writes as before.
    let fine = fe_host_in(
        dir.path(),
        &[
            &["predict", "m.toml", "--checkpoint", "ck"][..],
            &input,
            &["--out", "data/p.csv"],
        ]
        .concat(),
    );
    assert_eq!(fine.code, 0, "{}", fine.stderr);
}

#[test]
fn a_run_root_whose_latest_is_a_file_is_refused_and_the_file_kept() {
    let dir = TempDir::new("latest-file");
    let text = crate::util::lenet_manifest(1, "").replace(
        "log_steps = 50",
        "log_steps = 50\ntrain_steps_per_epoch = 2\neval_steps_per_epoch = 1\nlog_dir = \"runs\"",
    );
    dir.write("m.toml", &text);
    dir.write("runs/latest", "my notes");
    let run = fe_host_in(dir.path(), &["run", "m.toml"]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert_contains!(run.stderr, "latest: is a file fe-host did not make");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("runs/latest")).unwrap(),
        "my notes"
    );
    assert_eq!(
        crate::util::file_names(&dir.path().join("runs")),
        ["latest"]
    );
}
