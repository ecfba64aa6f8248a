//! Data parallelism from the command line. The process group itself is tested with two real
//! processes in host/src/dist/tests.rs; until the training loop joins it, a rank of several is
//! refused before it writes anything.

use std::process::Command;

use crate::util::{fe_host, lenet_manifest, root, Run, TempDir};

fn files_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn one_rank_of_several_is_refused_before_writing_anything() {
    let dir = TempDir::new("dist-refused");
    let manifest = lenet_manifest(1, "").replacen("[run]\n", "[run]\nlog_dir = \"logs\"\n", 1);
    let path = dir.write("m.toml", &manifest);
    let out: Run = fe_host()
        .env("RANK", "1")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "29999")
        .args(["run", &path.to_string_lossy()])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_eq!(
        out.stderr.trim(),
        "error: started as rank 1 of 2 (RANK/WORLD_SIZE are set, as torchrun does), but \
         `fe-host run` does not train data-parallel yet; run it as one process (WORLD_SIZE=1 or unset)"
    );
    assert_eq!(files_in(dir.path()), ["m.toml"]);
}

#[test]
fn a_malformed_rank_variable_is_named() {
    let dir = TempDir::new("dist-malformed");
    let path = dir.write("m.toml", &lenet_manifest(1, ""));
    let out: Run = fe_host()
        .env("RANK", "first")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "29999")
        .args(["run", &path.to_string_lossy()])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_eq!(
        out.stderr.trim(),
        "error: environment variable RANK=\"first\" is not a non-negative integer"
    );
}

#[test]
fn torchrun_from_the_venv_sets_the_variables_fe_host_reads() {
    // The real launcher: every rank it starts is recognised as such (and, for now, refused).
    let dir = TempDir::new("dist-torchrun");
    let path = dir.write("m.toml", &lenet_manifest(1, ""));
    let out: Run = Command::new("timeout")
        .arg("300")
        .arg(root().join(".venv/bin/torchrun"))
        .args(["--standalone", "--nproc-per-node", "2", "--no-python"])
        .arg(env!("CARGO_BIN_EXE_fe-host"))
        .args(["run", &path.to_string_lossy()])
        .env_remove("FE_PLUGIN_PATH")
        .output()
        .unwrap()
        .into();
    assert_ne!(out.code, 0);
    assert_ne!(out.code, 124, "torchrun timed out:\n{}", out.stderr);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert_contains!(all, "started as rank 0 of 2");
    assert_contains!(all, "started as rank 1 of 2");
    assert_eq!(files_in(dir.path()), ["m.toml"]);
}
