//! Versioned run directories: every run with a `run.log_dir` (its root) writes into a
//! `version_N` of its own, `latest` links to the last one started or resumed, a resumed run
//! appends to its own version, and `fe-host logs` reads a root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::util::{fe_host, file_names, lenet_manifest, Run, TempDir};

/// LeNet for 4 steps an epoch, logging every 2, with its best model and checkpoints under
/// its root `runs/lenet`, as examples/lenet.toml keeps them.
fn versioned() -> String {
    lenet_manifest(
        1,
        r#"
[[traces]]
trace = "BestModelSaver"
model = "lenet"
save_dir = "runs/lenet/best"

[checkpoint]
dir = "runs/lenet/checkpoints"
every_epochs = 1
"#,
    )
    .replace(
        "log_steps = 50",
        "log_steps = 2\ntrain_steps_per_epoch = 4\neval_steps_per_epoch = 1\nlog_dir = \"runs/lenet\"",
    )
}

fn run_in(dir: &Path, args: &[&str]) -> Run {
    let out: Run = fe_host()
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 0, "{args:?}: {}{}", out.stdout, out.stderr);
    out
}

/// sha256 of every file under `dir`, by relative path.
fn hashes(dir: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                let relative = path.strip_prefix(root).unwrap().to_path_buf();
                out.insert(relative, fe_host::checkpoint::store::sha256_hex(&bytes));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn latest(root: &Path) -> String {
    std::fs::read_link(root.join("latest"))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[test]
fn two_runs_get_two_versions_and_a_resume_appends_to_its_own() {
    let temp = TempDir::new("run-versions");
    let dir = temp.path();
    std::fs::write(dir.join("m.toml"), versioned()).unwrap();
    let root = dir.join("runs/lenet");

    let first = run_in(dir, &["run", "m.toml"]);
    assert_contains!(
        first.stdout,
        "fe-host run: writing into runs/lenet/version_0 (runs/lenet/latest links to it);"
    );
    assert_contains!(
        first.stdout,
        "fe-host saved: model runs/lenet/version_0/best/lenet_best_ce.safetensors;"
    );
    assert_contains!(
        first.stdout,
        "fe-host saved: checkpoint runs/lenet/version_0/checkpoints/ckpt-4;"
    );
    assert_eq!(latest(&root), "version_0");
    let version_0 = hashes(&root.join("version_0"));
    for file in [
        "run.json",
        "log.jsonl",
        "metrics.svg",
        "best/lenet_best_ce.safetensors",
        "checkpoints/ckpt-4/MANIFEST.json",
    ] {
        assert!(
            version_0.contains_key(Path::new(file)),
            "{file}: {version_0:?}"
        );
    }

    // The run directory and a checkpoint root's `latest` file lead to the checkpoints too.
    let listed = run_in(dir, &["checkpoint", "list", "runs/lenet"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert_contains!(listed.stdout, "ckpt-4 (latest): step 4");
    let verified = run_in(
        dir,
        &[
            "checkpoint",
            "verify",
            "runs/lenet/version_0/checkpoints/latest",
        ],
    );
    assert_eq!(verified.code, 0, "{}", verified.stderr);
    assert_contains!(verified.stdout, "ckpt-4 (");

    // A second run into the same root leaves the first untouched.
    let second = run_in(dir, &["run", "m.toml", "-q", "--summary", "summary.json"]);
    assert_eq!(second.stdout, "", "-q prints nothing");
    assert_eq!(file_names(&root), ["latest", "version_0", "version_1"]);
    assert_eq!(latest(&root), "version_1");
    assert_eq!(hashes(&root.join("version_0")), version_0);
    let version_1 = hashes(&root.join("version_1"));

    // The run log holds every value the run logged, at the step it was logged (rates left
    // aside: the overall rate is only known once the run has ended).
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    let summary: fe_host::report::History =
        serde_json::from_value(summary["history"].clone()).unwrap();
    let logged = fe_host::report::read_jsonl(&root.join("version_1/log.jsonl")).unwrap();
    assert_eq!(
        fe_host::report::without_rates(logged.clone()),
        fe_host::report::without_rates(summary)
    );
    assert_eq!(
        logged["train"]["ce"].keys().copied().collect::<Vec<_>>(),
        [1, 2, 4]
    );

    // Resuming version 0 by its checkpoint folder appends to it, and makes it the latest.
    let resumed = run_in(
        dir,
        &[
            "run",
            "m.toml",
            "--resume",
            "runs/lenet/version_0/checkpoints",
            "--epochs",
            "2",
        ],
    );
    assert_contains!(resumed.stdout, "writing into runs/lenet/version_0");
    assert_eq!(file_names(&root), ["latest", "version_0", "version_1"]);
    assert_eq!(latest(&root), "version_0");
    assert_eq!(hashes(&root.join("version_1")), version_1);
    assert_eq!(
        file_names(&root.join("version_0/checkpoints")),
        ["ckpt-4", "ckpt-8", "latest"]
    );
    // `--resume` alone continues the latest version.
    run_in(dir, &["run", "m.toml", "-q", "--resume", "--epochs", "3"]);
    assert_eq!(file_names(&root), ["latest", "version_0", "version_1"]);
    let history = fe_host::report::read_jsonl(&root.join("version_0/log.jsonl")).unwrap();
    assert_eq!(
        history["eval"]["ce"].keys().copied().collect::<Vec<_>>(),
        [4, 8, 12],
        "one evaluation row per epoch, each once"
    );
    assert_eq!(
        hashes(&root.join("version_0")).get(Path::new("run.json")),
        version_0.get(Path::new("run.json")),
        "a resumed run keeps the record of its first start"
    );

    // `fe-host logs` lists the versions, and re-plots a version as the run plotted it.
    let list = run_in(dir, &["logs", "--list", "runs/lenet"]);
    let lines: Vec<&str> = list.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", list.stdout);
    assert_eq!(lines[0], "runs/lenet:");
    assert!(
        lines[1].starts_with("  version_0 (latest): started 20"),
        "{}",
        lines[1]
    );
    assert_contains!(lines[1], "reached epoch 3, step 12; best ce ");
    assert!(
        lines[2].starts_with("  version_1: started 20"),
        "{}",
        lines[2]
    );
    assert_contains!(lines[2], "reached epoch 1, step 4; best ce ");

    let plotted = run_in(dir, &["logs", "runs/lenet", "--out", "latest.svg"]);
    assert_contains!(
        plotted.stdout,
        "plotted 1 run(s) (lenet/version_0) to latest.svg"
    );
    assert!(
        std::fs::read(dir.join("latest.svg")).unwrap()
            == std::fs::read(root.join("version_0/metrics.svg")).unwrap(),
        "logs re-plots the run's own plot"
    );
    let svg = std::fs::read_to_string(dir.join("latest.svg")).unwrap();
    assert!(!svg.contains("steps/sec"), "rates are left out by default");
    run_in(
        dir,
        &["logs", "runs/lenet", "--version", "1", "--out", "v1.svg"],
    );
    assert!(
        std::fs::read(dir.join("v1.svg")).unwrap()
            == std::fs::read(root.join("version_1/metrics.svg")).unwrap()
    );
    let with_rates = run_in(
        dir,
        &["logs", "runs/lenet", "--rates", "--out", "rates.svg"],
    );
    assert_contains!(with_rates.stdout, "rates.svg");
    assert_contains!(
        std::fs::read_to_string(dir.join("rates.svg")).unwrap(),
        "steps/sec"
    );
}

#[test]
fn a_launcher_names_the_version_every_rank_writes_into() {
    let temp = TempDir::new("run-version-env");
    let dir = temp.path();
    std::fs::write(dir.join("m.toml"), versioned()).unwrap();
    let out: Run = fe_host()
        .current_dir(dir)
        .env("FE_RUN_VERSION", "7")
        .args(["run", "m.toml", "-q"])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let root = dir.join("runs/lenet");
    assert_eq!(file_names(&root), ["latest", "version_7"]);
    assert!(root.join("version_7/checkpoints/ckpt-4").is_dir());
    // The next run without it takes the next free number.
    run_in(dir, &["run", "m.toml", "-q"]);
    assert_eq!(file_names(&root), ["latest", "version_7", "version_8"]);
    assert_eq!(latest(&root), "version_8");
}

#[test]
fn a_named_version_holding_another_runs_results_is_refused_unless_resumed() {
    let temp = TempDir::new("run-version-env-taken");
    let dir = temp.path();
    // The tester's case: a best model and logs, no `[checkpoint]`: nothing to resume from.
    let plain = versioned().replace(
        "\n[checkpoint]\ndir = \"runs/lenet/checkpoints\"\nevery_epochs = 1\n",
        "\n",
    );
    assert!(!plain.contains("[checkpoint]"));
    std::fs::write(dir.join("plain.toml"), &plain).unwrap();
    std::fs::write(dir.join("m.toml"), versioned()).unwrap();
    let root = dir.join("runs/lenet");
    run_in(dir, &["run", "plain.toml", "-q"]);
    let version = root.join("version_0");
    assert!(version.join("best/lenet_best_ce.safetensors").is_file());
    let before = hashes(&version);

    for manifest in ["plain.toml", "m.toml"] {
        let out: Run = fe_host()
            .current_dir(dir)
            .env("FE_RUN_VERSION", "0")
            .args(["run", manifest, "-q"])
            .output()
            .unwrap()
            .into();
        assert_eq!(out.code, 2, "{manifest}: {}{}", out.stdout, out.stderr);
        assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
        assert_contains!(out.stderr, "FE_RUN_VERSION=0: ");
        assert_contains!(
            out.stderr,
            "runs/lenet/version_0 already holds another run's results"
        );
        assert_eq!(
            hashes(&version),
            before,
            "{manifest}: the finished run's files changed"
        );
        assert_eq!(file_names(&root), ["latest", "version_0"]);
    }

    // A run that resumes the version it names is that version's run: it goes on there.
    run_in(dir, &["run", "m.toml", "-q"]);
    assert_eq!(file_names(&root), ["latest", "version_0", "version_1"]);
    let resumed: Run = fe_host()
        .current_dir(dir)
        .env("FE_RUN_VERSION", "1")
        .args(["run", "m.toml", "-q", "--resume", "--epochs", "2"])
        .output()
        .unwrap()
        .into();
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(root.join("version_1/checkpoints/ckpt-8").is_dir());
}

#[test]
fn a_run_that_fails_at_start_leaves_no_version_behind() {
    let temp = TempDir::new("run-version-failed");
    let dir = temp.path();
    // The warm-up step fails: an MLP cannot take 28x28 images as 100 inputs.
    let text = versioned().replace(
        "architecture = \"LeNet\"",
        "architecture = \"MLP\"\ninputs = 100",
    );
    std::fs::write(dir.join("m.toml"), text).unwrap();
    let out: Run = fe_host()
        .current_dir(dir)
        .args(["run", "m.toml", "-q"])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(file_names(dir), ["m.toml"], "nothing left behind");
}

/// A root copied with `cp -rL` has a directory where `latest` links: the next run failed at
/// its end (exit 1) and left a version behind that `--resume` then took for the latest.
#[test]
fn a_latest_that_is_a_directory_is_refused_before_anything_is_written() {
    let temp = TempDir::new("run-version-latest-dir");
    let dir = temp.path();
    std::fs::write(dir.join("m.toml"), versioned()).unwrap();
    run_in(dir, &["run", "m.toml", "-q"]);
    let root = dir.join("runs/lenet");
    std::fs::remove_file(root.join("latest")).unwrap();
    std::fs::create_dir_all(root.join("latest")).unwrap();
    let before = file_names(&root);
    let out: Run = fe_host()
        .current_dir(dir)
        .args(["run", "m.toml", "-q"])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_contains!(
        out.stderr,
        "latest: is a directory, but fe-host keeps a link"
    );
    assert_eq!(file_names(&root), before, "nothing written");
}

#[test]
fn resume_auto_continues_the_latest_version_only_when_it_has_checkpoints() {
    let dir = TempDir::new("runs-auto");
    let two_epochs = versioned().replace("epochs = 1", "epochs = 2");
    dir.write("m.toml", &two_epochs.replace("epochs = 2", "epochs = 1"));
    // A first job ends after epoch 1 with a checkpoint in version_0.
    run_in(dir.path(), &["run", "m.toml"]);
    let root = dir.path().join("runs/lenet");
    dir.write("m.toml", &two_epochs);
    // Restarted with resume = auto (what an elastic restart does): it continues in version_0.
    let out = run_in(
        dir.path(),
        &["run", "m.toml", "--resume", "auto", "--allow-changes"],
    );
    assert_contains!(out.stdout, "fe-host resume:");
    assert!(!root.join("version_1").exists(), "{}", out.stdout);
    assert!(root.join("version_0/checkpoints/ckpt-8").is_dir());
    // A version without checkpoints is never written into by a fresh start: a new one is made.
    std::fs::remove_dir_all(root.join("version_0/checkpoints")).unwrap();
    let out = run_in(dir.path(), &["run", "m.toml", "--resume", "auto"]);
    assert_contains!(out.stdout, "starting fresh");
    assert!(root.join("version_1").is_dir(), "{}", out.stdout);
}

#[test]
fn a_checkpoint_table_without_dir_checkpoints_into_the_runs_version() {
    let dir = TempDir::new("runs-ckpt-default");
    let manifest = versioned().replace("dir = \"runs/lenet/checkpoints\"\n", "");
    assert!(!manifest.contains("runs/lenet/checkpoints"));
    dir.write("m.toml", &manifest);
    // Given on the command line too, the root holds the checkpoints of each version.
    run_in(dir.path(), &["run", "m.toml", "--log-dir", "elsewhere"]);
    let version = dir.path().join("elsewhere/version_0");
    assert!(
        version.join("checkpoints/ckpt-4").is_dir(),
        "{:?}",
        file_names(&version)
    );
    assert!(!dir.path().join("checkpoints").exists());
    // `--resume` alone finds them there and appends to the same version.
    dir.write("m.toml", &manifest.replace("epochs = 1", "epochs = 2"));
    let out = run_in(
        dir.path(),
        &[
            "run",
            "m.toml",
            "--log-dir",
            "elsewhere",
            "--resume",
            "--allow-changes",
        ],
    );
    assert_contains!(out.stdout, "fe-host resume:");
    assert!(
        version.join("checkpoints/ckpt-8").is_dir(),
        "{}",
        out.stdout
    );
    assert!(!dir.path().join("elsewhere/version_1").exists());
}

/// A run claims its version when it starts setting up; Ctrl-C then ends it at once (past any
/// destructor), and the handler removes the still-empty version and the root it made.
#[test]
fn a_run_stopped_during_set_up_leaves_no_version_behind() {
    use std::os::unix::ffi::OsStrExt;
    let dir = TempDir::new("runs-setup-stop");
    // The training images are a named pipe: reading them blocks the set-up, after the claim.
    let fifo = dir.path().join("x.fifo");
    let name = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo(3) with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let [x, ..] = crate::util::digits();
    let text = versioned().replace(&*x.to_string_lossy(), "x.fifo");
    dir.write("m.toml", &text);
    let mut child = fe_host()
        .current_dir(dir.path())
        .args(["run", "m.toml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let done = crate::util::watchdog(child.id(), 120);
    let version = dir.path().join("runs/lenet/version_0");
    while !version.is_dir() {
        // A run that ended instead (or was killed by the watchdog) fails here, not hangs.
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before its version appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: kill(2) on the child this test started.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    let _ = done.send(());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(
        !dir.path().join("runs").exists(),
        "{:?}",
        file_names(dir.path())
    );
}
