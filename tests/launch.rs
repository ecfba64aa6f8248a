//! `fe-host run --nproc N` (local ranks with torchrun's variables) and `run.resume = "auto"`
//! (what a job restarted by torchrun or a scheduler needs to continue by itself).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::util::{
    copy_dir, fe_host, lenet_manifest, root, run_failing, OutputWithin, Run, TempDir,
};

/// LeNet on the small digits, 3 epochs of 6 steps, a checkpoint every 4 steps and every epoch
/// (all kept), evaluation cut to 2 steps.
fn manifest(resume: &str) -> String {
    lenet_manifest(
        3,
        "\n[checkpoint]\ndir = \"ckpt\"\nevery_steps = 4\nevery_epochs = 1\n",
    )
    .replace(
        "log_steps = 50",
        &format!("log_steps = 2\ntrain_steps_per_epoch = 6\neval_steps_per_epoch = 2{resume}"),
    )
}

/// [`manifest`] for two ranks: a short process-group timeout, and the fixture trace that
/// kills a rank where `FE_TEST_KILL=<rank>:<step>` says.
fn two_rank_manifest(resume: &str) -> String {
    manifest(&format!("{resume}\nprocess_group_timeout = 60"))
        + "\n[[traces]]\ntrace = \"KillRank\"\n"
}

/// Runs `fe-host run m.toml args...` in `dir`.
fn run_in(dir: &Path, args: &[&str]) -> Run {
    fe_host()
        .current_dir(dir)
        .args(["run", "m.toml"])
        .args(args)
        .output_within()
}

/// `dir/name` holding `text` as m.toml.
fn run_dir(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::create_dir_all(&path).unwrap();
    std::fs::write(path.join("m.toml"), text).unwrap();
    path
}

fn weights(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("weights/lenet.safetensors")).unwrap()
}

#[test]
fn nproc_zero_inside_a_rank_or_with_smoke_is_refused() {
    let dir = TempDir::new("nproc-refused");
    let path = dir.write("m.toml", &lenet_manifest(1, ""));
    let path = path.to_string_lossy();
    let out = run_failing(&["run", &path, "--nproc", "0"], 2);
    assert_eq!(
        out.stderr.trim(),
        "error: --nproc must be at least 1 (the number of ranks to start on this machine)"
    );
    let out = run_failing(&["run", &path, "--nproc", "2", "--smoke"], 2);
    assert_contains!(out.stderr, "'--nproc <N>' cannot be used with '--smoke'");
    for (name, value) in [("RANK", "0"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "2")] {
        let out: Run = fe_host()
            .env(name, value)
            .args(["run", &path, "--nproc", "2"])
            .output_within();
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert_eq!(
            out.stderr.trim(),
            format!(
                "error: --nproc starts ranks itself, but this process already is one ({name}={value} \
                 is set, as torchrun sets it): drop --nproc, or unset torchrun's variables"
            )
        );
        assert!(out.stdout.is_empty(), "nothing started: {}", out.stdout);
    }
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "nothing but the manifest was written");
}

#[test]
fn every_rank_prefixes_its_lines_and_the_launcher_exits_with_the_failing_code() {
    // A data file that is missing where the ranks run: found by each rank, not the launcher.
    let dir = TempDir::new("nproc-prefix");
    let [x, ..] = crate::util::digits();
    let text = lenet_manifest(1, "").replace(&*x.to_string_lossy(), "missing-images");
    let path = dir.write("m.toml", &text);
    let out: Run = fe_host()
        .args(["run", &path.to_string_lossy(), "--nproc", "2"])
        .output_within();
    assert_eq!(out.code, 5, "{}{}", out.stdout, out.stderr);
    assert_contains!(
        out.stdout,
        "fe-host launch: 2 ranks on this machine, rendezvous at 127.0.0.1:"
    );
    // The first rank to fail ends the other, which may not have printed its own error yet
    // (it then says it stopped at once, before training).
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|line| !line.ends_with("] fe-host: stopped at once, before training started"))
        .collect();
    assert!(matches!(lines.len(), 2 | 3), "{}", out.stderr);
    for line in &lines[..lines.len() - 1] {
        let prefixed = line.starts_with("[rank 0] error: ") || line.starts_with("[rank 1] error: ");
        assert!(
            prefixed && line.contains("missing-images"),
            "{}",
            out.stderr
        );
    }
    let last = lines[lines.len() - 1];
    assert!(
        last.starts_with("error: rank ")
            && last.contains(" of 2 exited with code 5, the first to fail"),
        "{last}"
    );
}

#[test]
fn resume_auto_starts_fresh_without_a_checkpoint_and_continues_from_the_newest_valid_one() {
    let dir = TempDir::new("resume-auto");
    let text = manifest("\nresume = \"auto\"");
    // Uninterrupted: no checkpoint yet, so it starts fresh and trains all 18 steps.
    let whole = run_dir(&dir, "whole", &text);
    let out = run_in(&whole, &["--save-weights", "weights"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(out.stdout, "fe-host resume: no checkpoint in ");
    assert_contains!(out.stdout, "starting fresh;");
    // A job that crashed after step 8 and was started again with the same command line: its
    // checkpoints up to step 8, and a step-12 one damaged by the crash (the end of epoch 2,
    // `ckpt-12.1`, which replaced the step checkpoint `ckpt-12` taken moments before).
    let restarted = run_dir(&dir, "restarted", &text);
    copy_dir(&whole.join("ckpt"), &restarted.join("ckpt"));
    for entry in std::fs::read_dir(restarted.join("ckpt")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let step: Option<u64> = name
            .strip_prefix("ckpt-")
            .and_then(|rest| rest.split('.').next()?.parse().ok());
        if step.is_some_and(|step| step > 8) && name != "ckpt-12.1" {
            std::fs::remove_dir_all(restarted.join("ckpt").join(name)).unwrap();
        }
    }
    std::fs::write(restarted.join("ckpt/latest"), "ckpt-12.1\n").unwrap();
    std::fs::write(
        restarted.join("ckpt/ckpt-12.1/models/lenet.safetensors"),
        b"torn",
    )
    .unwrap();
    let out = run_in(&restarted, &["--save-weights", "weights"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_contains!(out.stderr, "warning: skipping a damaged checkpoint: ");
    assert_contains!(out.stderr, "ckpt-12.1/models/lenet.safetensors");
    assert_contains!(
        out.stdout,
        "ckpt-8: step 8, inside epoch 2 (2 batches done);"
    );
    assert!(
        weights(&whole) == weights(&restarted),
        "the restarted run ends with the uninterrupted run's weights"
    );
    assert!(restarted.join("ckpt/.damaged-ckpt-12.1").is_dir());
    assert!(restarted.join("ckpt/ckpt-12.1/MANIFEST.json").is_file());
}

#[test]
fn resume_auto_flag_continues_a_run_whose_manifest_never_named_it() {
    // `run.resume` is how a run starts, not what it computes: a checkpoint written without it
    // resumes with it (or with the flag) without --allow-changes.
    let dir = TempDir::new("resume-auto-flag");
    let text = manifest("");
    let first = run_dir(&dir, "first", &text);
    let out = run_in(&first, &["--epochs", "1", "-q"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = run_in(&first, &["--resume", "auto", "--epochs", "2"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(out.stdout, "ckpt-6: step 6, after epoch 1;");
    let out = run_in(&first, &["--set", "run.resume=\"auto\"", "--epochs", "3"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(out.stdout, "ckpt-12.1: step 12, after epoch 2;");
    let out = run_in(&first, &["--set", "run.resume=\"sometimes\""]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_contains!(out.stderr, "run.resume: unknown variant `sometimes`");
}

#[test]
fn resume_auto_refuses_a_folder_whose_every_checkpoint_is_damaged() {
    let dir = TempDir::new("resume-auto-damaged");
    let text = manifest("\nresume = \"auto\"");
    let first = run_dir(&dir, "first", &text);
    let out = run_in(&first, &["--epochs", "1", "-q"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for name in ["ckpt-4", "ckpt-6"] {
        std::fs::write(first.join("ckpt").join(name).join("system.json"), b"{}").unwrap();
    }
    let out = run_in(&first, &[]);
    assert_eq!(out.code, 6, "{}{}", out.stdout, out.stderr);
    assert_contains!(
        out.stderr,
        "none of its 2 checkpoints verifies; resume one by name after repairing it, or move them away to start fresh"
    );
}

#[test]
fn devices_shows_the_rank_torchruns_variables_give() {
    let out: Run = fe_host()
        .args(["devices"])
        .env("RANK", "1")
        .env("WORLD_SIZE", "2")
        .env("LOCAL_RANK", "1")
        .env("LOCAL_WORLD_SIZE", "2")
        .env("MASTER_ADDR", "10.0.0.5")
        .env("MASTER_PORT", "29500")
        .output_within();
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Set-up installs the headers NCCL needs, so this build has it (no GPU here to use it).
    assert_contains!(
        out.stdout,
        "process groups: gloo (CPU); nccl: built in; needs CUDA"
    );
    assert_contains!(
        out.stdout,
        "rank: 1 of 2, local rank 1 of 2, master 10.0.0.5:29500; cluster: torchrun\n"
    );
    let alone = crate::util::run(&["devices"]);
    assert_contains!(
        alone.stdout,
        "rank: one process (no launcher's variables: torchrun, SLURM, OpenMPI, Kubeflow)"
    );
}

#[test]
fn nproc_two_ends_with_the_weights_torchrun_gives_and_only_rank_0_speaks() {
    let dir = TempDir::new("nproc-weights");
    let text = two_rank_manifest("");
    let ours = run_dir(&dir, "nproc", &text);
    // One thread per rank in both: torchrun's default, and results independent of the cores.
    let out = run_in(
        &ours,
        &[
            "--nproc",
            "2",
            "--threads",
            "1",
            "--save-weights",
            "weights",
        ],
    );
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_contains!(out.stdout, "[rank 0] fe-host train: step: 18;");
    // The machine's cores are shared out among its ranks: pipeline workers too.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_contains!(
        out.stdout,
        format!("threads: 1; pipeline workers: {};", (cores / 2).max(1))
    );
    assert!(!out.stdout.contains("[rank 1] fe-host"), "{}", out.stdout);
    // Rank 0 ends with what the ranks' all-reduces cost it (18 steps, one update each).
    assert_contains!(
        out.stdout,
        "[rank 0] fe-host parallel: 2 ranks; gradients waited for after backward: median "
    );
    let theirs = run_dir(&dir, "torchrun", &text);
    let out: Run = Command::new("timeout")
        .arg("300")
        .arg(root().join(".venv/bin/torchrun"))
        .args(["--standalone", "--nproc-per-node", "2", "--no-python"])
        .arg(env!("CARGO_BIN_EXE_fe-host"))
        .args([
            "run",
            "m.toml",
            "--threads",
            "1",
            "--save-weights",
            "weights",
        ])
        .current_dir(&theirs)
        .env("FE_PLUGIN_PATH", crate::util::fixture_plugin())
        .output_within();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        weights(&ours) == weights(&theirs),
        "--nproc 2 and torchrun differ"
    );
}

/// Rank 0 hosts the rendezvous store: killed, it takes the store with it, and the survivor's
/// later calls on the store fail too. libtorch logs each with a C++ backtrace, which must not
/// reach the user.
#[test]
fn a_killed_rank_zero_is_reported_without_libtorch_backtraces() {
    let dir = TempDir::new("nproc-killed-zero");
    let lost = run_dir(&dir, "lost", &two_rank_manifest(""));
    let out: Run = fe_host()
        .current_dir(&lost)
        .args(["run", "m.toml", "--nproc", "2"])
        .env("FE_TEST_KILL", "0:10")
        .output_within();
    assert_eq!(out.code, 128 + 9, "{}{}", out.stdout, out.stderr);
    // Nor does the survivor, asked to stop by the launcher, promise a checkpoint it cannot
    // save with a rank gone.
    for noise in [
        "frame #",
        "Exception raised",
        "[W",
        "c10d",
        "stopping after this step",
    ] {
        assert!(!out.stderr.contains(noise), "{noise}:\n{}", out.stderr);
    }
    assert_contains!(out.stderr, "[rank 1] error: rank 1 of 2: ");
}

#[test]
fn a_mistake_every_rank_would_make_is_reported_once_before_any_starts() {
    let dir = TempDir::new("nproc-precheck");
    let path = run_dir(&dir, "run", &two_rank_manifest(""));
    for (args, expected) in [
        (vec!["--nproc", "3"], "does not divide among 3 ranks"),
        (
            vec!["--nproc", "2", "--set", "run.epochs=three"],
            "run.epochs",
        ),
    ] {
        let out = run_in(&path, &args);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert_eq!(out.stderr.trim_end().lines().count(), 1, "{}", out.stderr);
        assert_contains!(out.stderr, expected);
        assert!(!out.stderr.contains("[rank"), "{}", out.stderr);
        assert!(!out.stdout.contains("fe-host launch"), "{}", out.stdout);
    }
}

#[test]
fn a_killed_rank_ends_the_others_and_sets_the_launchers_exit_code() {
    let dir = TempDir::new("nproc-killed");
    let lost = run_dir(&dir, "lost", &two_rank_manifest(""));
    let out: Run = fe_host()
        .current_dir(&lost)
        .args(["run", "m.toml", "--nproc", "2"])
        .env("FE_TEST_KILL", "1:10")
        .output_within();
    assert_eq!(out.code, 128 + 9, "{}{}", out.stdout, out.stderr);
    assert_contains!(out.stderr, "[rank 0] error: rank 0 of 2: ");
    assert_eq!(
        out.stderr.trim_end().lines().last().unwrap(),
        "error: rank 1 of 2 was killed by signal 9 (SIGKILL), the first to fail; any still running were stopped"
    );
    let verify = crate::util::run(&["checkpoint", "verify", &lost.join("ckpt").to_string_lossy()]);
    assert_eq!(verify.code, 0, "{}", verify.stderr);
}

#[test]
fn torchrun_max_restarts_with_resume_auto_ends_with_the_uninterrupted_weights() {
    let dir = TempDir::new("elastic");
    let text = two_rank_manifest("\nresume = \"auto\"");
    let whole = run_dir(&dir, "whole", &text);
    let out = run_in(&whole, &["--nproc", "2", "--save-weights", "weights"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    // Rank 1 dies at step 10 in the first attempt only (a fault, not a property of the run);
    // torchrun restarts both ranks with the same command line, which continues by itself.
    let restarted = run_dir(&dir, "restarted", &text);
    let once = restarted.join("kill-once.sh");
    std::fs::write(
        &once,
        format!(
            "#!/bin/sh\n[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && export FE_TEST_KILL=1:10\nexec {} \"$@\"\n",
            env!("CARGO_BIN_EXE_fe-host")
        ),
    )
    .unwrap();
    let out: Run = Command::new("timeout")
        .arg("300")
        .arg(root().join(".venv/bin/torchrun"))
        .args([
            "--standalone",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "1",
        ])
        .args(["--no-python", "sh"])
        .arg(&once)
        .args(["run", "m.toml", "--save-weights", "weights"])
        .current_dir(&restarted)
        .env("FE_PLUGIN_PATH", crate::util::fixture_plugin())
        .output_within();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert_contains!(all, "rank 1 is lost");
    assert_contains!(all, "ckpt-8: step 8, inside epoch 2 (2 batches done);");
    assert!(
        weights(&whole) == weights(&restarted),
        "the restarted job ends elsewhere"
    );
}

#[test]
fn sigterm_to_the_launcher_reaches_every_rank_which_checkpoint_and_stop_resumable() {
    preempt_launched_ranks("nproc-sigterm", false);
}

#[test]
fn sigterm_to_the_launcher_and_its_ranks_at_once_is_one_request_not_two() {
    // What a scheduler that signals every process of a job does: each rank hears it directly
    // and forwarded by the launcher, and must still checkpoint rather than stop at once.
    preempt_launched_ranks("nproc-sigterm-all", true);
}

/// Ctrl-C to the launcher while a rank hangs: the healthy rank cannot agree on the stop, fails
/// naming the lost rank, and the launcher then ends the hung one as after any failure instead of
/// waiting for it for good.
#[test]
fn ctrl_c_while_a_rank_hangs_still_ends_the_launcher() {
    let dir = TempDir::new("nproc-int-hung");
    let text = two_rank_manifest("")
        .replace("process_group_timeout = 60", "process_group_timeout = 10")
        .replace("epochs = 3", "epochs = 30");
    let path = run_dir(&dir, "run", &text);
    let launcher = fe_host()
        .current_dir(&path)
        .args(["run", "m.toml", "--nproc", "2"])
        .env("FE_TEST_KILL", "1:3:STOP")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = launcher.id() as libc::pid_t;
    let deadline = std::time::Instant::now() + crate::util::PROCESSES_LIMIT;
    while !children_of(pid)
        .into_iter()
        .any(|rank| state_of(rank) == Some('T'))
    {
        assert!(std::time::Instant::now() < deadline, "rank 1 never stopped");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // SAFETY: kill(2) on the child this test started.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let out = crate::util::wait_all_within(vec![launcher]).remove(0);
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    assert_contains!(out.stderr, "[rank 0] error: rank 0 of 2: ");
    assert_contains!(out.stderr, "rank 1 is lost");
}

/// The state letter of process `pid` (`T`: stopped), if it still exists.
fn state_of(pid: libc::pid_t) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The processes whose parent is `parent`.
fn children_of(parent: libc::pid_t) -> Vec<libc::pid_t> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            entry
                .ok()?
                .file_name()
                .to_str()?
                .parse::<libc::pid_t>()
                .ok()
        })
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    // The fields after the parenthesised command: state, then the parent.
                    let after = stat.rsplit_once(')')?.1.to_owned();
                    after.split_whitespace().nth(1)?.parse::<libc::pid_t>().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// SIGTERM to a `--nproc 2` launcher mid-run (and with `also_ranks`, to its ranks too): every
/// rank checkpoints and stops with 75, and the run resumes.
fn preempt_launched_ranks(name: &str, also_ranks: bool) {
    let dir = TempDir::new(name);
    // Long enough that the signal always arrives mid-run.
    let text = two_rank_manifest("").replace("epochs = 3", "epochs = 30");
    let path = run_dir(&dir, "run", &text);
    let mut launcher = fe_host()
        .current_dir(&path)
        .args(["run", "m.toml", "--nproc", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The launcher's stderr is drained on its own thread (a full pipe would stall it), and a
    // watchdog kills it after the limit other multi-process tests have, so a hang fails.
    let stderr = launcher.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    let pid = launcher.id() as libc::pid_t;
    let finished = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let finished = finished.clone();
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + crate::util::PROCESSES_LIMIT;
            while !finished.load(std::sync::atomic::Ordering::SeqCst) {
                if std::time::Instant::now() > deadline {
                    // SAFETY: kill(2) on the child this test started.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            false
        })
    };
    let stdout = launcher.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let started = line.starts_with("[rank 0] fe-host train: step: 4;");
        seen.push(line);
        if started {
            break;
        }
    }
    let ranks = if also_ranks {
        children_of(pid)
    } else {
        Vec::new()
    };
    assert_eq!(ranks.len(), usize::from(also_ranks) * 2, "{ranks:?}");
    // SAFETY: kill(2) on the child this test started and on its children.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    for rank in ranks {
        // SAFETY: as above.
        unsafe { libc::kill(rank, libc::SIGTERM) };
    }
    seen.extend(lines.map(Result::unwrap));
    let status = launcher.wait().unwrap();
    finished.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        !watchdog.join().unwrap(),
        "killed after {:?}",
        crate::util::PROCESSES_LIMIT
    );
    let out = Run {
        code: status.code().unwrap_or(-1),
        stdout: String::new(),
        stderr: stderr.join().unwrap(),
    };
    let stdout = seen.join("\n");
    assert_eq!(out.code, 75, "{stdout}\n{}", out.stderr);
    assert_contains!(out.stderr, "[rank 0] fe-host stopped: SIGTERM after step ");
    // The command it suggests starts the same ranks again.
    assert_contains!(
        out.stderr,
        "continue with: fe-host run m.toml --nproc 2 --resume"
    );
    assert_contains!(
        out.stderr.trim_end().lines().last().unwrap(),
        "fe-host stopped: every rank stopped once rank 0 had saved a checkpoint (rank "
    );
    assert!(!out.stderr.contains("error:"), "{}", out.stderr);
    // The launcher says once what the stop will do; rank 1, which writes no checkpoint, says
    // nothing about one.
    let promises = out.stderr.matches("fe-host: stopping every rank (").count();
    assert_eq!(promises, 1, "{}", out.stderr);
    assert!(!out.stderr.contains("[rank 1] fe-host:"), "{}", out.stderr);
    if !also_ranks {
        assert!(
            !out.stderr.contains("[rank 0] fe-host: stopping"),
            "{}",
            out.stderr
        );
    }
    let resumed = run_in(&path, &["--nproc", "2", "--resume", "-q"]);
    assert_eq!(resumed.code, 0, "{}{}", resumed.stdout, resumed.stderr);
}
