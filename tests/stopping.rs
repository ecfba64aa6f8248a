//! Ctrl-C and SIGTERM with real signals sent to the real binary: the first stops after the
//! current step with a checkpoint the run resumes from to the weights of an uninterrupted run,
//! bit for bit; a second stops at once and leaves the last complete checkpoint, as one during
//! set-up does, in a run started with the signal ignored too. No sleeps: each signal is sent
//! once a line (or the manifest pipe opened) proves the run got where the test needs it.

use std::ffi::CString;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::util::{fe_host, lenet_manifest, watchdog, Run, TempDir};

const STEPS_PER_EPOCH: u64 = 25;

fn manifest(extra: &str) -> String {
    lenet_manifest(2, extra)
        .replace(
            "architecture = \"LeNet\"",
            "architecture = \"MLP\"\ninputs = 784\nhidden = [32]\nsoftmax = true",
        )
        .replace(
            "log_steps = 50",
            "log_steps = 1\ntrain_steps_per_epoch = 25\neval_steps_per_epoch = 2",
        )
}

/// Reads `stream` line by line on a thread, reporting the first line containing `needle`
/// and collecting all of it.
fn watch(
    stream: impl Read + Send + 'static,
    needle: &'static str,
) -> (mpsc::Receiver<()>, std::thread::JoinHandle<String>) {
    let (seen, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if line.contains(needle) {
                let _ = seen.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    (rx, reader)
}

fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) with a pid this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
}

fn run_in(dir: &Path, args: &[&str]) -> Run {
    fe_host()
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
        .into()
}

fn weights(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("weights/lenet.safetensors")).unwrap()
}

fn stop_and_resume(name: &str, sig: libc::c_int) {
    let temp = TempDir::new(&format!("stop-{name}"));
    let dir = temp.path().join("run");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("m.toml"),
        manifest("\n[checkpoint]\ndir = \"ckpt\"\nevery_epochs = 1\nkeep_last = 2\n"),
    )
    .unwrap();
    // Far more epochs than the test waits for: the run is certainly training when signalled.
    let mut child = fe_host()
        .current_dir(&dir)
        .args([
            "run",
            "m.toml",
            "--epochs",
            "1000",
            "--set",
            "run.log_steps=7",
            "--save-weights",
            "weights",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let done = watchdog(child.id(), 600);
    let (training, stdout) = watch(child.stdout.take().unwrap(), "fe-host train: step:");
    training.recv().expect("the run printed no training step");
    signal(&child, sig);
    let (_, stderr) = watch(child.stderr.take().unwrap(), "\u{0}");
    let status = child.wait().unwrap();
    let _ = done.send(());
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    assert_eq!(
        status.code(),
        Some(75),
        "{name}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let line = stderr
        .lines()
        .find(|l| l.starts_with("fe-host stopped: "))
        .unwrap_or_else(|| panic!("no stop line:\n{stderr}"));
    assert_contains!(line, &format!("fe-host stopped: {name} after step "));
    // The command repeats what the run computed with: a resume without the override would be
    // refused as an edit.
    assert_contains!(
        line,
        "; continue with: fe-host run m.toml --set run.log_steps=7 --epochs 1000 --resume"
    );
    assert!(!stderr.contains("error:"), "{stderr}");
    let step: u64 = line["fe-host stopped: ".len() + name.len() + " after step ".len()..]
        .split(';')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no step in {line}"));
    assert_contains!(line, &format!("ckpt/ckpt-{step}; "));
    let verify = run_in(&dir, &["checkpoint", "verify", "ckpt"]);
    assert_eq!(verify.code, 0, "{}", verify.stderr);
    assert_contains!(verify.stdout, &format!("step {step}, inside epoch"));

    // Resume to the end of the epoch after the one it stopped in, and compare with a run
    // that went there without a stop.
    let epochs = (step.div_ceil(STEPS_PER_EPOCH) + 1).to_string();
    let resumed = run_in(
        &dir,
        &[
            "run",
            "m.toml",
            "-q",
            "--set",
            "run.log_steps=7",
            "--resume",
            "--epochs",
            &epochs,
            "--save-weights",
            "weights",
        ],
    );
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let reference = temp.path().join("reference");
    std::fs::create_dir_all(&reference).unwrap();
    std::fs::write(reference.join("m.toml"), manifest("")).unwrap();
    let uninterrupted = run_in(
        &reference,
        &[
            "run",
            "m.toml",
            "-q",
            "--epochs",
            &epochs,
            "--save-weights",
            "weights",
        ],
    );
    assert_eq!(uninterrupted.code, 0, "{}", uninterrupted.stderr);
    assert!(
        weights(&dir) == weights(&reference),
        "{name}: stopped at step {step} and resumed to epoch {epochs}, the weights differ from an uninterrupted run"
    );
}

#[test]
fn sigint_saves_a_checkpoint_the_run_resumes_from_bit_for_bit() {
    stop_and_resume("SIGINT", libc::SIGINT);
}

#[test]
fn sigterm_saves_a_checkpoint_the_run_resumes_from_bit_for_bit() {
    stop_and_resume("SIGTERM", libc::SIGTERM);
}

#[test]
fn a_run_without_checkpoint_settings_saves_where_resume_looks() {
    let temp = TempDir::new("stop-default-root");
    let dir = temp.path();
    std::fs::write(dir.join("m.toml"), manifest("")).unwrap();
    let mut child = fe_host()
        .current_dir(dir)
        .args(["run", "m.toml", "--epochs", "1000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let done = watchdog(child.id(), 600);
    let (training, stdout) = watch(child.stdout.take().unwrap(), "fe-host train: step:");
    training.recv().expect("the run printed no training step");
    signal(&child, libc::SIGINT);
    let output = child.wait_with_output().unwrap();
    let _ = done.send(());
    let _ = stdout.join();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(75), "{stderr}");
    assert_contains!(stderr, "checkpoints/ckpt-");
    let verify = run_in(dir, &["checkpoint", "verify", "checkpoints"]);
    assert_eq!(verify.code, 0, "{}", verify.stderr);
}

/// `command` with `signal` ignored in the process it starts, as a non-interactive shell starts
/// a background job (`cmd &` ignores SIGINT) and as fe-host then inherits it.
fn ignoring(command: &mut Command, signal: libc::c_int) -> &mut Command {
    // SAFETY: signal(2) is async-signal-safe, as what runs between fork and exec must be.
    unsafe {
        command.pre_exec(move || {
            libc::signal(signal, libc::SIG_IGN);
            Ok(())
        })
    }
}

#[test]
fn a_second_sigint_stops_at_once_keeping_the_last_complete_checkpoint() {
    second_sigint_stops_at_once(false);
}

#[test]
fn a_second_sigint_stops_at_once_in_a_run_started_ignoring_sigint() {
    second_sigint_stops_at_once(true);
}

#[test]
fn a_signal_during_set_up_stops_at_once_in_a_run_started_ignoring_it() {
    for (sig, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let temp = TempDir::new("stop-set-up");
        // The manifest is a named pipe: fe-host blocks reading it, in the middle of its set-up,
        // for as long as the test holds the writing end open.
        let fifo = temp.path().join("m.toml");
        let name = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo(3) with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let mut command = fe_host();
        command
            .current_dir(temp.path())
            .args(["run", "m.toml"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let child = ignoring(&mut command, sig).spawn().unwrap();
        let (done, wait) = mpsc::channel::<()>();
        let (pid, unblock) = (child.id() as i32, fifo.clone());
        std::thread::spawn(move || {
            if wait.recv_timeout(Duration::from_secs(120)).is_err() {
                // SAFETY: kill(2) with a pid this test spawned.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                // A reader of our own, should fe-host never have opened the pipe, so that
                // the test's open for writing returns and the test fails instead of hanging.
                let _ = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&unblock);
            }
        });
        // Opening the pipe for writing returns once fe-host has opened it to read the manifest:
        // it is then setting up, past the point where it takes the signals over.
        let writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        signal(&child, sig);
        let output = child.wait_with_output().unwrap();
        let _ = done.send(());
        drop(writer);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "signal {sig}: {stderr}");
        assert_contains!(stderr, "fe-host: stopped at once, before training started");
    }
}

fn second_sigint_stops_at_once(ignored: bool) {
    let temp = TempDir::new(if ignored {
        "stop-twice-ignored"
    } else {
        "stop-twice"
    });
    let dir = temp.path();
    // Steps long enough (a wide MLP, big batches) that the second signal lands while the
    // first is still finishing its step; a checkpoint every two steps, written in the
    // foreground so that the one of step 2 is complete before step 3 is logged (in the
    // background it could still be in flight when the second signal ends the process).
    let text = manifest(
        "\n[checkpoint]\ndir = \"ckpt\"\nevery_steps = 2\nkeep_last = 1\nbackground = false\n",
    )
    .replace("hidden = [32]", "hidden = [1024, 1024]")
    .replace("batch_size = 32", "batch_size = 512");
    std::fs::write(dir.join("m.toml"), text).unwrap();
    let mut command = fe_host();
    command
        .current_dir(dir)
        .args(["run", "m.toml", "--epochs", "1000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if ignored {
        ignoring(&mut command, libc::SIGINT);
    }
    let mut child = command.spawn().unwrap();
    let done = watchdog(child.id(), 600);
    // Step 3 is under way once step 2 (and its checkpoint snapshot) is logged.
    let (training, stdout) = watch(child.stdout.take().unwrap(), "fe-host train: step: 3;");
    training.recv().expect("the run printed no third step");
    let (stopping, stderr) = watch(
        child.stderr.take().unwrap(),
        "fe-host: stopping after this step",
    );
    signal(&child, libc::SIGINT);
    stopping
        .recv()
        .expect("the first SIGINT was not acknowledged");
    signal(&child, libc::SIGINT);
    let status = child.wait().unwrap();
    let _ = done.send(());
    let (_, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert_contains!(
        stderr,
        "fe-host: stopped at once; the last complete checkpoint is kept"
    );
    let verify = run_in(dir, &["checkpoint", "verify", "ckpt"]);
    assert_eq!(verify.code, 0, "{}", verify.stderr);
    let resumed = run_in(dir, &["run", "m.toml", "-q", "--resume", "--epochs", "1"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
}

/// A smoke run keeps nothing, so a signal stops it after its step with nothing to continue:
/// it removes its temporary directory (it was left behind) and says it was a smoke run.
#[test]
fn a_signalled_smoke_run_removes_its_temporary_directory() {
    for (sig, name, code) in [
        (libc::SIGINT, "SIGINT", 130),
        (libc::SIGTERM, "SIGTERM", 143),
    ] {
        let temp = TempDir::new(&format!("smoke-stop-{name}"));
        let tmp = temp.path().join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        // LeNet on batches of 1000: a smoke run's few steps take long enough that the signal
        // sent after the first lands inside training.
        std::fs::write(temp.path().join("m.toml"), lenet_manifest(1, "")).unwrap();
        let mut child = fe_host()
            .current_dir(temp.path())
            .args(["run", "m.toml", "--smoke"])
            .args([
                "--set",
                "pipeline.batch_size=1000",
                "--set",
                "run.log_steps=1",
            ])
            .env("TMPDIR", &tmp)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let done = watchdog(child.id(), 300);
        let (stepped, stdout) = watch(child.stdout.take().unwrap(), "train: step: 1;");
        let (_, stderr) = watch(child.stderr.take().unwrap(), "\u{0}");
        stepped
            .recv_timeout(Duration::from_secs(240))
            .expect("the smoke run did not reach step 1");
        signal(&child, sig);
        let status = child.wait().unwrap();
        let _ = done.send(());
        let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
        assert_eq!(status.code(), Some(code), "{stdout}{stderr}");
        assert_contains!(
            stderr,
            format!("fe-host smoke: stopped by {name} after step")
        );
        assert_contains!(stderr, "its temporary directory is removed");
        let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
        assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    }
}
