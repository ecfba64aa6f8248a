//! Nothing a run does by accident overwrites or loses another run's files: smoke runs write
//! only into their temporary directory, checkpoint folders belong to the run that wrote them,
//! a run that fails at start leaves nothing behind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::util::{fe_host, file_names, lenet_manifest, Run, TempDir};

/// Every output a manifest can name: run log and plot, both savers, both loggers,
/// TensorBoard and checkpoints, all under `out/`.
fn writing_everything() -> String {
    lenet_manifest(
        1,
        r#"
[[traces]]
trace = "BestModelSaver"
model = "lenet"
save_dir = "out/best"

[[traces]]
trace = "ModelSaver"
model = "lenet"
save_dir = "out/every"

[[traces]]
trace = "CSVLogger"
filename = "out/logs/log.csv"

[[traces]]
trace = "JSONLLogger"
filename = "out/logs/log.jsonl"

[[traces]]
trace = "TensorBoard"
log_dir = "out/tb"

[checkpoint]
dir = "out/ckpt"
every_epochs = 1
"#,
    )
    .replace(
        "log_steps = 50",
        "log_steps = 20\ntrain_steps_per_epoch = 30\neval_steps_per_epoch = 3\nlog_dir = \"out/run\"",
    )
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

fn run_in(dir: &Path, args: &[&str]) -> Run {
    fe_host()
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
        .into()
}

#[test]
fn a_smoke_run_leaves_every_file_of_a_finished_run_byte_identical() {
    let temp = TempDir::new("smoke-isolation");
    let dir = temp.path();
    std::fs::write(dir.join("m.toml"), writing_everything()).unwrap();
    let finished = run_in(dir, &["run", "m.toml"]);
    assert_eq!(finished.code, 0, "{}", finished.stderr);
    // The closing lines name every output, the loggers' too.
    for log in ["out/logs/log.csv", "out/logs/log.jsonl", "out/tb"] {
        assert_contains!(finished.stdout, &format!("fe-host saved: log {log};"));
    }
    let before = hashes(dir);
    for expected in [
        "out/run/version_0/log.jsonl",
        "out/run/version_0/metrics.svg",
        "out/run/version_0/run.json",
        "out/best/lenet_best_ce.safetensors",
        "out/every/lenet_epoch_1.safetensors",
        "out/logs/log.csv",
        "out/logs/log.jsonl",
    ] {
        assert!(
            before.contains_key(Path::new(expected)),
            "{expected} missing: {before:?}"
        );
    }
    assert!(
        before.keys().any(|p| p.starts_with("out/tb/train")),
        "{before:?}"
    );
    assert!(
        before.keys().any(|p| p.starts_with("out/ckpt")),
        "{before:?}"
    );

    let smoke = run_in(dir, &["run", "m.toml", "--smoke", "--summary", "s.json"]);
    assert_eq!(smoke.code, 0, "{}", smoke.stderr);
    assert_contains!(smoke.stdout, "fe-host smoke: ok");
    assert_eq!(
        hashes(dir),
        before,
        "a smoke run changed the finished run's files"
    );
    assert_eq!(
        file_names(&dir.join("out/run")),
        ["latest", "version_0"],
        "a smoke run takes no version"
    );

    // `--keep` leaves what it wrote, every output in its own directory, and says where.
    let kept = run_in(dir, &["run", "m.toml", "--smoke", "--keep"]);
    assert_eq!(kept.code, 0, "{}", kept.stderr);
    assert_eq!(
        hashes(dir),
        before,
        "a smoke run changed the finished run's files"
    );
    let line = kept
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("fe-host smoke: kept everything it wrote in "))
        .unwrap_or_else(|| panic!("no kept line:\n{}", kept.stdout));
    let smoke_dir = PathBuf::from(line);
    let written = hashes(&smoke_dir);
    let _ = std::fs::remove_dir_all(&smoke_dir);
    for expected in [
        "log/log.jsonl",
        "log/metrics.svg",
        "outputs/out/best/lenet_best_ce.safetensors",
        "outputs/out/logs/log.csv",
    ] {
        assert!(
            written.contains_key(Path::new(expected)),
            "{expected} missing: {written:?}"
        );
    }
    assert!(
        written.keys().any(|p| p.starts_with("checkpoints")),
        "{written:?}"
    );
    assert!(
        written.keys().any(|p| p.starts_with("outputs/out/tb")),
        "{written:?}"
    );
}

#[test]
fn a_new_run_never_writes_into_another_runs_checkpoint_folder() {
    let temp = TempDir::new("ckpt-owner");
    let dir = temp.path();
    std::fs::write(dir.join("m.toml"), writing_everything()).unwrap();
    let first = run_in(dir, &["run", "m.toml", "-q"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    // A best-model save killed mid-write left its temporary behind.
    std::fs::write(
        dir.join("out/best/lenet_best_ce.tmp-999999"),
        b"half a file",
    )
    .unwrap();
    let before = hashes(dir);

    let second = crate::util::run_failing(&["run", &dir.join("m.toml").to_string_lossy()], 6);
    assert_contains!(second.stderr, &dir.join("out/ckpt").display().to_string());
    assert_contains!(second.stderr, "holds checkpoints of another run (ckpt-30)");
    assert_contains!(second.stderr, "--resume");
    assert_eq!(hashes(dir), before, "a refused run changed files");

    // The run the folder belongs to goes on; it cleans the save's temporary at start and
    // keeps its own checkpoints.
    let resumed = run_in(dir, &["run", "m.toml", "-q", "--resume", "--epochs", "2"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(!dir.join("out/best/lenet_best_ce.tmp-999999").exists());
    assert_eq!(
        file_names(&dir.join("out/ckpt")),
        ["ckpt-30", "ckpt-60", "latest"]
    );
}

#[test]
fn resume_never_falls_back_to_another_runs_checkpoint() {
    let temp = TempDir::new("ckpt-fallback");
    let (a, b) = (temp.path().join("a"), temp.path().join("b"));
    for dir in [&a, &b] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("m.toml"), writing_everything()).unwrap();
        let out = run_in(dir, &["run", "m.toml", "-q"]);
        assert_eq!(out.code, 0, "{}", out.stderr);
    }
    // b's checkpoint lands in a's folder, and a's `latest` names a checkpoint that is gone.
    let status = std::process::Command::new("cp")
        .args(["-a"])
        .arg(b.join("out/ckpt/ckpt-30"))
        .arg(a.join("out/ckpt/other-30"))
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::write(a.join("out/ckpt/latest"), "ckpt-90\n").unwrap();
    let out = run_in(&a, &["run", "m.toml", "-q", "--resume"]);
    assert_eq!(out.code, 6, "{}", out.stderr);
    assert_contains!(out.stderr, "holds checkpoints of more than one run");
}

#[test]
fn a_run_refused_at_start_leaves_nothing_behind() {
    let temp = TempDir::new("refused-start");
    let dir = temp.path();
    // No dataset in any mode.
    let text = writing_everything();
    let start = text.find("[pipeline.data.train]").unwrap();
    let end = text.find("[[pipeline.ops]]").unwrap();
    let no_data = format!("{}{}", &text[..start], &text[end..]);
    std::fs::write(dir.join("m.toml"), no_data).unwrap();
    let out = crate::util::run_failing(&["run", &dir.join("m.toml").to_string_lossy()], 2);
    assert_contains!(out.stderr, "no dataset");
    assert_eq!(file_names(dir), ["m.toml"]);

    // `run.log_dir` naming a file: refused before the CSV logger creates its file.
    std::fs::write(dir.join("m.toml"), writing_everything()).unwrap();
    std::fs::create_dir_all(dir.join("out")).unwrap();
    std::fs::write(dir.join("out/run"), "a file").unwrap();
    let out = crate::util::run_failing(&["run", &dir.join("m.toml").to_string_lossy()], 2);
    assert_contains!(out.stderr, "run.log_dir");
    assert_eq!(file_names(&dir.join("out")), ["run"]);
}

/// Every file and directory under `dir` whose name marks it as a write's temporary
/// (`*.tmp-<pid>`, `.tmp-*`, `*.tmp`, `*.partial`), by relative path.
fn temporaries(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.contains(".tmp") || name.ends_with(".partial") {
                found.push(entry.path().strip_prefix(dir).unwrap().to_path_buf());
            }
            if entry.file_type().unwrap().is_dir() {
                pending.push(entry.path());
            }
        }
    }
    found
}

/// A case of [`a_failed_write_removes_its_temporary`]: its name, the target whose write fails,
/// and what makes it fail.
type Breakage = (&'static str, &'static str, fn(&Path));

#[test]
fn a_failed_write_removes_its_temporary() {
    let temp = TempDir::new("failed-writes");
    // Each write fails at its rename, deterministically (and as root too, unlike a read-only
    // folder): something that is not what the rename can replace stands at the target. The
    // temporary is complete by then, which is what a full disk can leave as well.
    let text = lenet_manifest(
        1,
        r#"
[[traces]]
trace = "BestModelSaver"
model = "lenet"
save_dir = "out/best"

[checkpoint]
dir = "out/ckpt"
every_epochs = 1
"#,
    )
    .replace(
        "log_steps = 50",
        "log_steps = 2\ntrain_steps_per_epoch = 4\neval_steps_per_epoch = 1",
    );
    let cases: [Breakage; 3] = [
        // The saver's model file is a directory.
        ("model", "out/best/lenet_best_ce.safetensors", |dir| {
            std::fs::create_dir_all(dir.join("out/best/lenet_best_ce.safetensors/x")).unwrap()
        }),
        // The checkpoint's name is taken by a dangling link: the checkpoint's temporary
        // directory cannot be renamed onto it.
        ("checkpoint", "out/ckpt/ckpt-4", |dir| {
            std::fs::create_dir_all(dir.join("out/ckpt")).unwrap();
            std::os::unix::fs::symlink("nowhere", dir.join("out/ckpt/ckpt-4")).unwrap();
        }),
        // `latest` is a directory: the new pointer cannot replace it (the checkpoint itself
        // is complete by then and stays).
        ("latest", "out/ckpt/latest", |dir| {
            std::fs::create_dir_all(dir.join("out/ckpt/latest/x")).unwrap()
        }),
    ];
    for (name, target, break_target) in cases {
        let dir = temp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("m.toml"), &text).unwrap();
        break_target(&dir);
        let out: Run = fe_host()
            .current_dir(&dir)
            .args(["run", "m.toml", "-q"])
            .output()
            .unwrap()
            .into();
        assert_eq!(out.code, 1, "{name}: {}{}", out.stdout, out.stderr);
        assert_eq!(
            out.stderr.trim().lines().count(),
            1,
            "{name}: {}",
            out.stderr
        );
        assert_contains!(out.stderr, &format!("{target}: "));
        assert_eq!(
            temporaries(&dir),
            Vec::<PathBuf>::new(),
            "{name}: a failed write left its temporary ({})",
            out.stderr
        );
    }
}
