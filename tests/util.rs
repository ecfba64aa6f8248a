//! Shared helpers: temporary directories, running the real `fe-host` binary, the small digits
//! dataset, out-of-tree plugin builds, and assertions that show what differed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

/// `assert!(haystack.contains(needle))`, printing both on failure.
#[macro_export]
macro_rules! assert_contains {
    ($haystack:expr, $needle:expr) => {{
        let (haystack, needle): (&str, &str) = (&$haystack, &$needle);
        assert!(
            haystack.contains(needle),
            "\n--- expected to find ---\n{needle}\n--- in ---\n{haystack}\n---"
        );
    }};
}

/// `assert_eq!` for multi-line text, printing a line diff on failure.
#[macro_export]
macro_rules! assert_text_eq {
    ($actual:expr, $expected:expr) => {{
        let (actual, expected): (&str, &str) = (&$actual, &$expected);
        if actual != expected {
            let mut diff = String::new();
            let (a, e): (Vec<&str>, Vec<&str>) =
                (actual.lines().collect(), expected.lines().collect());
            for i in 0..a.len().max(e.len()) {
                match (e.get(i), a.get(i)) {
                    (Some(x), Some(y)) if x == y => diff.push_str(&format!("  {x}\n")),
                    (x, y) => {
                        if let Some(x) = x {
                            diff.push_str(&format!("- {x}\n"));
                        }
                        if let Some(y) = y {
                            diff.push_str(&format!("+ {y}\n"));
                        }
                    }
                }
            }
            panic!("text differs (- expected, + actual):\n{diff}");
        }
    }};
}

/// The names of the entries in `dir`, sorted.
pub fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("workspace root")
}

/// The directory holding the workspace's plugins (and fe-host).
pub fn plugin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fe-host"))
        .parent()
        .expect("bin dir")
        .to_path_buf()
}

/// A directory under `target/tmp` removed on drop. Inside the repository, so builds made in
/// it pick up `.cargo/config.toml` (the libtorch location and rpaths).
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh, empty directory named after `tag`.
    pub fn new(tag: &str) -> Self {
        static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = root()
            .join("target/tmp")
            .join(format!("{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `contents` to `name` inside it and returns the path.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("parent dir");
        }
        std::fs::write(&path, contents).expect("write file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The workspace plugins and the test-fixture plugin exist (cargo test builds them, but a
/// filtered run may not have). With `FE_TEST_PREBUILT` set, the files next to fe-host are used
/// as they are: a test binary carried to a machine without cargo (a GPU machine) runs so.
pub fn ensure_plugins() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        if std::env::var_os("FE_TEST_PREBUILT").is_some() {
            return;
        }
        // Two builds, not one: with the fixture example in the same invocation, cargo unifies
        // its dependencies' features into the plugins' and links other plugin files than
        // `cargo build --workspace` (scripts/install.sh, which a test runs) does; each build
        // would then replace the other's, and a run resuming meanwhile sees a plugin "rebuilt"
        // (another sha256). Built apart, both leave the plugins byte-identical.
        for args in [
            &["build", "--workspace", "--lib", "--quiet"][..],
            &[
                "build",
                "-p",
                "fe-faulty",
                "--example",
                "fe_faulty",
                "--quiet",
            ][..],
        ] {
            let status = Command::new(env!("CARGO"))
                .args(args)
                .current_dir(root())
                .status()
                .expect("run cargo build");
            assert!(status.success(), "building the workspace plugins failed");
        }
        // Builds from before the fixture became an example left it next to fe-host, where
        // every run would find it.
        let _ = std::fs::remove_file(plugin_dir().join("libfe_faulty.so"));
    });
}

/// The test-fixture plugin (`Panic`, `BadMatmul`, ...: tests/fixtures/faulty-plugin). Built as
/// an example, into `target/<profile>/examples/`, out of the directory users' runs search:
/// only the tests name it, in `FE_PLUGIN_PATH`.
pub fn fixture_plugin() -> PathBuf {
    plugin_dir().join("examples/libfe_faulty.so")
}

/// A `fe-host` command with the workspace plugins and the test-fixture plugin available.
pub fn fe_host() -> Command {
    ensure_plugins();
    let mut command = Command::new(env!("CARGO_BIN_EXE_fe-host"));
    command
        .env("FE_PLUGIN_PATH", fixture_plugin())
        .env("RUST_BACKTRACE", "1");
    command
}

/// Runs fe-host with `args` in `dir` (relative paths resolve there); any exit code.
pub fn fe_host_in(dir: &Path, args: &[&str]) -> Run {
    fe_host()
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
        .into()
}

/// Stdout and stderr of a finished command, as text.
pub struct Run {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(output: Output) -> Self {
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// How long a test of several processes (ranks, a launcher) may take before it is killed: a
/// hang then fails the test in minutes instead of stalling CI.
pub const PROCESSES_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Waits for every child (each in its own thread, so no pipe fills while another is waited
/// for), killing those still running after [`PROCESSES_LIMIT`]; then fails the test.
pub fn wait_all_within(children: Vec<std::process::Child>) -> Vec<Run> {
    let pids: Vec<i32> = children.iter().map(|c| c.id() as i32).collect();
    let waiters: Vec<_> = children
        .into_iter()
        .map(|child| std::thread::spawn(move || Run::from(child.wait_with_output().unwrap())))
        .collect();
    let deadline = std::time::Instant::now() + PROCESSES_LIMIT;
    let mut timed_out = false;
    while !waiters.iter().all(|w| w.is_finished()) {
        if std::time::Instant::now() > deadline {
            for (pid, waiter) in pids.iter().zip(&waiters) {
                if !waiter.is_finished() {
                    // SAFETY: kill(2) on a child of this test that has not been reaped.
                    unsafe { libc::kill(*pid, libc::SIGKILL) };
                }
            }
            timed_out = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let runs: Vec<Run> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
    if timed_out {
        let stderr: Vec<&str> = runs.iter().map(|r| r.stderr.as_str()).collect();
        panic!(
            "killed after {PROCESSES_LIMIT:?}:\n{}",
            stderr.join("\n---\n")
        );
    }
    runs
}

/// Kills `pid` if the test has not finished with it after `seconds`: a hung run fails the
/// test instead of hanging the suite.
pub fn watchdog(pid: u32, seconds: u64) -> std::sync::mpsc::Sender<()> {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if wait
            .recv_timeout(std::time::Duration::from_secs(seconds))
            .is_err()
        {
            // SAFETY: kill(2) with a pid this test spawned.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    });
    done
}

/// A command's output, killed and failed after [`PROCESSES_LIMIT`] (see [`wait_all_within`]):
/// for commands that start several processes.
pub trait OutputWithin {
    /// Runs it to the end or to the limit.
    fn output_within(&mut self) -> Run;
}

impl OutputWithin for Command {
    fn output_within(&mut self) -> Run {
        let child = self
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_all_within(vec![child]).remove(0)
    }
}

/// Starts `command`, reads its stdout until a line containing `needle`, then SIGKILLs it. A
/// run that never prints it is killed by a watchdog after 300 s, so the test fails instead of
/// hanging.
pub fn kill_after_line(command: &mut Command, needle: &str) {
    use std::io::BufRead;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let done = watchdog(child.id(), 300);
    let stdout = child.stdout.take().unwrap();
    for line in std::io::BufReader::new(stdout).lines() {
        if line.unwrap().contains(needle) {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = done.send(());
}

/// Runs `fe-host args...`.
pub fn run(args: &[&str]) -> Run {
    fe_host().args(args).output().expect("run fe-host").into()
}

/// Runs `fe-host args...` and asserts it failed with `code` and one clean line on stderr:
/// no panic message, no backtrace.
pub fn run_failing(args: &[&str], code: i32) -> Run {
    let out = run(args);
    assert_eq!(
        out.code, code,
        "exit code\nstdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    assert!(out.stderr.starts_with("error: "), "stderr: {}", out.stderr);
    assert_eq!(
        out.stderr.trim_end().lines().count(),
        1,
        "one line expected:\n{}",
        out.stderr
    );
    for noise in [
        "panicked at",
        "stack backtrace",
        "RUST_BACKTRACE",
        "Exception raised from",
        "frame #",
    ] {
        assert!(
            !out.stderr.contains(noise) && !out.stdout.contains(noise),
            "`{noise}` leaked:\n{}{}",
            out.stdout,
            out.stderr
        );
    }
    out
}

/// A small generated digits dataset, made once per test run: (train images, train labels,
/// eval images, eval labels).
pub fn digits() -> &'static [PathBuf; 4] {
    static DATA: OnceLock<[PathBuf; 4]> = OnceLock::new();
    DATA.get_or_init(|| {
        let dir = root().join("target/test-data/digits-4000");
        if !dir.join("MANIFEST").exists() {
            let out = run(&[
                "datagen",
                "digits",
                "--out",
                &dir.to_string_lossy(),
                "--train",
                "4000",
                "--eval",
                "1000",
                "--test",
                "0",
                "--seed",
                "11",
            ]);
            assert_eq!(out.code, 0, "{}", out.stderr);
        }
        [
            "train-images-idx3-ubyte",
            "train-labels-idx1-ubyte",
            "eval-images-idx3-ubyte",
            "eval-labels-idx1-ubyte",
        ]
        .map(|f| dir.join(f))
    })
}

/// The LeNet manifest of `examples/lenet.toml` pointed at the small dataset; `extra` is
/// appended (more ops, traces, ...).
pub fn lenet_manifest(epochs: u32, extra: &str) -> String {
    let [x, y, ex, ey] = digits();
    format!(
        r#"[run]
epochs = {epochs}
seed = 7
log_steps = 50

[pipeline]
batch_size = 32

[pipeline.data.train]
type = "idx"
files = {{ x = "{x}", y = "{y}" }}

[pipeline.data.eval]
type = "idx"
files = {{ x = "{ex}", y = "{ey}" }}

[[pipeline.ops]]
op = "Minmax"
inputs = "x"
outputs = "x"

[[pipeline.ops]]
op = "ExpandDims"
inputs = "x"
outputs = "x"
axis = 0

[[models]]
name = "lenet"
architecture = "LeNet"
optimizer = {{ type = "adam", lr = 0.001 }}

{ops}{extra}"#,
        x = x.display(),
        y = y.display(),
        ex = ex.display(),
        ey = ey.display(),
        ops = classifier_ops("lenet"),
    )
}

/// The 1-based line of the first line of `text` containing `needle`.
pub fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .map(|i| i + 1)
        .expect("needle in text")
}

/// Held by every test that builds into `target/fixtures`: cargo locks a build, but one test's
/// build can replace a library another's `cargo test` (rustdoc) is about to read.
pub fn fixtures_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Builds `crates` (name → files) as a cargo workspace of its own under `target/out-of-tree`,
/// into
/// the shared `target/fixtures` target directory, and returns the directory holding the
/// built libraries. Builds are serialised: they share one target directory.
pub fn build_out_of_tree(tag: &str, members: &[(&str, Vec<(&str, String)>)]) -> PathBuf {
    let _guard = fixtures_lock();
    // Kept between runs, and files rewritten only when they change, so cargo rebuilds only
    // what changed.
    let dir = root().join("target/out-of-tree").join(tag);
    std::fs::create_dir_all(&dir).expect("out-of-tree dir");
    let names: Vec<String> = members
        .iter()
        .map(|(name, _)| format!("\"{name}\""))
        .collect();
    let workspace = format!(
        "[workspace]\nresolver = \"2\"\nmembers = [{}]\n\n{}",
        names.join(", "),
        PROFILES
    );
    write_if_changed(&dir.join("Cargo.toml"), &workspace);
    // The same dependency versions as the workspace, so compiled dependencies are reused.
    write_if_changed(
        &dir.join("Cargo.lock"),
        &std::fs::read_to_string(root().join("Cargo.lock")).expect("lock file"),
    );
    for (name, files) in members {
        for (file, contents) in files {
            write_if_changed(&dir.join(name).join(file), contents);
        }
    }
    let target = root().join("target/fixtures");
    let out = Command::new(env!("CARGO"))
        .args(["build", "--workspace", "--quiet"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "out-of-tree build failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("debug")
}

fn write_if_changed(path: &Path, contents: &str) {
    if std::fs::read_to_string(path).is_ok_and(|old| old == contents) {
        return;
    }
    std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
    std::fs::write(path, contents).expect("write");
}

/// The workspace's profile settings (see the root Cargo.toml), repeated so that out-of-tree
/// builds compile dependencies the same way.
const PROFILES: &str = r#"[profile.dev]
opt-level = 3
debug = "line-tables-only"
incremental = true

[profile.dev.package."*"]
debug = false
"#;

/// Runs `manifest` (written into `dir`); the run must succeed. Returns what it printed and
/// its `--summary` JSON.
pub fn run_with_summary(dir: &TempDir, manifest: &str) -> (Run, serde_json::Value) {
    let path = dir.write("m.toml", manifest);
    let summary = dir.path().join("summary.json");
    let out: Run = fe_host()
        .args([
            "run",
            &path.to_string_lossy(),
            "--summary",
            &summary.to_string_lossy(),
        ])
        .output()
        .expect("run")
        .into();
    assert_eq!(
        out.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    let json = serde_json::from_str(&std::fs::read_to_string(summary).expect("summary file"))
        .expect("summary json");
    (out, json)
}

/// Runs `manifest` (written into `dir`) and returns its `--summary` JSON; the run must succeed.
pub fn summary(dir: &TempDir, manifest: &str) -> serde_json::Value {
    run_with_summary(dir, manifest).1
}

/// The logged history of a `--summary`, less timings (they differ between runs; nothing
/// else may).
pub fn history_without_timings(mut summary: serde_json::Value) -> serde_json::Value {
    if let Some(modes) = summary["history"].as_object_mut() {
        for keys in modes
            .values_mut()
            .filter_map(serde_json::Value::as_object_mut)
        {
            keys.retain(|k, _| !k.contains("sec"));
        }
    }
    summary["history"].take()
}

/// The network and metric of a classifier `model` reading `x` and `y`: ModelOp → `y_pred`,
/// CrossEntropy → `ce`, UpdateOp, and an `accuracy` trace.
pub fn classifier_ops(model: &str) -> String {
    format!(
        r#"[[network.ops]]
op = "ModelOp"
model = "{model}"
inputs = "x"
outputs = "y_pred"

[[network.ops]]
op = "CrossEntropy"
inputs = ["y_pred", "y"]
outputs = "ce"

[[network.ops]]
op = "UpdateOp"
model = "{model}"
loss = "ce"

[[traces]]
trace = "Accuracy"
inputs = ["y", "y_pred"]
outputs = "accuracy"
"#
    )
}

/// `(step, value)` logged for `key` in `mode`, in step order.
pub fn steps(summary: &serde_json::Value, mode: &str, key: &str) -> Vec<(u64, f64)> {
    let mut logged: Vec<(u64, f64)> = summary["history"][mode][key]
        .as_object()
        .map(|steps| {
            steps
                .iter()
                .filter_map(|(step, v)| Some((step.parse().ok()?, v.as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    logged.sort_by_key(|(step, _)| *step);
    logged
}

/// The values logged for `key` in `mode`, in step order.
pub fn values(summary: &serde_json::Value, mode: &str, key: &str) -> Vec<f64> {
    steps(summary, mode, key)
        .into_iter()
        .map(|(_, v)| v)
        .collect()
}

/// Copies `examples/<name>.toml` into `dir/examples`, so its relative paths resolve inside
/// `dir`.
pub fn copy_example(dir: &TempDir, name: &str) {
    let examples = dir.path().join("examples");
    std::fs::create_dir_all(&examples).unwrap();
    std::fs::copy(
        root().join("examples").join(format!("{name}.toml")),
        examples.join(format!("{name}.toml")),
    )
    .unwrap();
}

/// Copies the data bundled with the examples (`examples/data/`) into `dir/examples/data`, where
/// an example copied by [`copy_example`] reads it.
pub fn copy_bundled_data(dir: &TempDir) {
    fn copy_tree(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let target = to.join(path.file_name().unwrap());
            if path.is_dir() {
                copy_tree(&path, &target);
            } else {
                std::fs::copy(&path, &target).unwrap();
            }
        }
    }
    copy_tree(
        &root().join("examples/data"),
        &dir.path().join("examples/data"),
    );
}

/// A small generated `dir/data/digits` (96 training and 40 evaluation samples), where the
/// examples copied by [`copy_example`] look for it.
pub fn small_digits(dir: &TempDir) {
    let out: Run = fe_host()
        .current_dir(dir.path())
        .args([
            "datagen",
            "digits",
            "--out",
            "data/digits",
            "--train",
            "96",
            "--eval",
            "40",
            "--test",
            "0",
        ])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// Writes `script` into `dir` as `helper.py` and runs it there with `.venv`'s python and
/// `args`; panics with its output unless it succeeds, else returns its stdout.
pub fn run_python_helper(dir: &Path, script: &str, args: &[&str]) -> String {
    let path = dir.join("helper.py");
    std::fs::write(&path, script).unwrap();
    let mut command = Command::new(root().join(".venv/bin/python"));
    command.arg(&path).args(args).current_dir(dir);
    venv_stdout(command, &format!("python {args:?}"))
}

/// Runs the reference script `tests/fixtures/<fixture>` with `.venv`'s python and `args`, and
/// returns the JSON it prints; panics with its output unless it succeeds.
pub fn python_fixture_json<S: AsRef<std::ffi::OsStr>>(
    fixture: &str,
    args: &[S],
) -> serde_json::Value {
    let mut command = Command::new(root().join(".venv/bin/python"));
    command
        .arg(root().join("tests/fixtures").join(fixture))
        .args(args);
    serde_json::from_str(&venv_stdout(command, fixture)).unwrap()
}

fn venv_stdout(mut command: Command, what: &str) -> String {
    let out = command.output().expect("run .venv/bin/python");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Copies the tree `from` to `to` (made when missing), files and folders alike.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    copy_dir_except(from, to, &[]);
}

/// `copy_dir` leaving out every entry, at any depth, named in `skip`, and symbolic links.
pub fn copy_dir_except(from: &std::path::Path, to: &std::path::Path, skip: &[&str]) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if skip.iter().any(|s| entry.file_name() == *s) {
            continue;
        }
        let target = to.join(entry.file_name());
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            copy_dir_except(&entry.path(), &target, skip);
        } else if kind.is_file() {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
