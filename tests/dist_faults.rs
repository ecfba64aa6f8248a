//! Data-parallel runs that lose a rank: one killed (named, and a restart resumes to the
//! uninterrupted weights), one hung (rank 0 with the rendezvous store too), a rendezvous port
//! that never answers, and a rank preempted by SIGTERM.

use crate::dist::{
    last_step, manifest, max_difference, spawn_ranks, summary, train, wait_all, weights, SGD,
};
use crate::util::{fe_host, wait_all_within, OutputWithin, Run, TempDir};

const CHECKPOINTS: &str = "\n[checkpoint]\ndir = \"ckpts\"\nevery_steps = 10\nkeep_last = 5\n";
const KILL_TRACE: &str = "\n[[traces]]\ntrace = \"KillRank\"\n";

#[test]
fn a_lost_rank_is_named_and_a_restart_resumes_to_the_uninterrupted_weights() {
    let reference = TempDir::new("dp-reference");
    let text = manifest(SGD, 32, 2, &format!("{CHECKPOINTS}{KILL_TRACE}"));
    let (_, expected) = train(&reference, 2, &text);

    let dir = TempDir::new("dp-lost");
    let path = dir.write("m.toml", &text);
    let path = path.to_string_lossy();
    // Rank 1 dies at step 25 of 40, after the checkpoint of step 20.
    let runs = wait_all(spawn_ranks(
        &dir,
        2,
        &["run", &path],
        &[("FE_TEST_KILL", "1:25")],
    ));
    assert_eq!(runs[1].code, -1, "rank 1 was killed:\n{}", runs[1].stderr);
    assert_eq!(runs[0].code, 1, "{}\n{}", runs[0].stdout, runs[0].stderr);
    assert_contains!(
        runs[0].stderr,
        "rank 0 of 2: all-reduce failed: rank 1 is lost"
    );
    assert_eq!(
        runs[0].stderr.trim_end().lines().count(),
        1,
        "{}",
        runs[0].stderr
    );

    let verify: Run = fe_host()
        .args([
            "checkpoint",
            "verify",
            &dir.path().join("ckpts").to_string_lossy(),
        ])
        .output_within();
    assert_eq!(verify.code, 0, "{}", verify.stderr);

    let args = ["run", &*path, "--resume", "--save-weights", "weights"];
    for (rank, run) in wait_all(spawn_ranks(&dir, 2, &args, &[]))
        .iter()
        .enumerate()
    {
        assert_eq!(run.code, 0, "rank {rank}:\n{}\n{}", run.stdout, run.stderr);
    }
    let difference = max_difference(&expected, &weights(&dir.path().join("weights")));
    assert_eq!(difference, 0.0, "the resumed run ends elsewhere");
}

/// Two ranks with `process_group_timeout = timeout`, rank `hung` stopping itself (SIGSTOP)
/// after step 3: the other rank's run, once it ended (the hung one is then killed).
fn with_a_hung_rank(tag: &str, timeout: u32, hung: usize) -> Run {
    let dir = TempDir::new(tag);
    let text = manifest(SGD, 32, 1, KILL_TRACE).replace(
        "process_group_timeout = 60",
        &format!("process_group_timeout = {timeout}"),
    );
    let path = dir.write("m.toml", &text);
    let path = path.to_string_lossy();
    let kill = format!("{hung}:3:STOP");
    let mut children = spawn_ranks(&dir, 2, &["run", &path], &[("FE_TEST_KILL", &kill)]);
    let hung = children.remove(hung);
    let other = wait_all_within(children).remove(0);
    // SAFETY: kill(2) on a child we started and have not reaped.
    unsafe { libc::kill(hung.id() as libc::pid_t, libc::SIGKILL) };
    let _ = hung.wait_with_output();
    other
}

#[test]
fn a_hung_rank_is_named_within_the_timeout() {
    let rank0 = with_a_hung_rank("dp-hung", 20, 1);
    assert_eq!(rank0.code, 1, "{}\n{}", rank0.stdout, rank0.stderr);
    // It waited the whole timeout, and says which setting that was.
    assert_contains!(
        rank0.stderr,
        "rank 0 of 2: all-reduce failed: rank 1 is lost (no answer within run.process_group_timeout, 20 s)"
    );
}

/// Rank 0 hangs (stopped, its sockets open) while hosting the rendezvous store: rank 1's
/// collective, and the roll call on the store after it, get no answer, and rank 1 still ends
/// (exit 1, one line) instead of waiting for good.
#[test]
fn a_hung_rank_zero_does_not_hang_the_others() {
    let rank1 = with_a_hung_rank("dp-hung-zero", 10, 0);
    assert_eq!(rank1.code, 1, "{}\n{}", rank1.stdout, rank1.stderr);
    let errors: Vec<&str> = rank1
        .stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{}", rank1.stderr);
    assert_contains!(errors[0], "error: rank 1 of 2: ");
}

/// Something that accepts connections at MASTER_PORT but never answers (another service, or a
/// store whose host froze): the rank gives up past its timeout, saying so, instead of waiting
/// for good.
#[test]
fn a_rendezvous_port_that_never_answers_does_not_hang_the_rank() {
    let dir = TempDir::new("dp-silent-store");
    let text =
        manifest(SGD, 32, 1, "").replace("process_group_timeout = 60", "process_group_timeout = 3");
    let path = dir.write("m.toml", &text);
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let held = std::thread::spawn(move || {
        let mut connections = Vec::new();
        while let Ok((connection, _)) = listener.accept() {
            connections.push(connection);
            if connections.len() == 4 {
                break;
            }
        }
        connections
    });
    let rank: Run = fe_host()
        .current_dir(dir.path())
        .args(["run", &*path.to_string_lossy()])
        .envs([
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
        ])
        .env("MASTER_PORT", &port)
        .output_within();
    assert_eq!(rank.code, 1, "{}\n{}", rank.stdout, rank.stderr);
    assert_contains!(
        rank.stderr,
        "error: rank 1 of 2: joining the process group (is what listens at MASTER_ADDR:MASTER_PORT a rendezvous store?) has waited"
    );
    drop(held);
}

/// Trains 2 ranks with `trace` appended and `FE_TEST_KILL=kill` (which makes rank 1 signal
/// itself); checks that both ranks stopped resumable (exit 75) with the one checkpoint
/// `ckpt-<step>`, then that resuming on 2 ranks completes the run's 20 steps.
fn preempted_rank_stops_every_rank_after(tag: &str, trace: &str, kill: &str, step: u64) {
    let dir = TempDir::new(tag);
    let text = manifest(SGD, 32, 1, &format!("{CHECKPOINTS}{trace}"));
    let path = dir.write("m.toml", &text);
    let path = path.to_string_lossy();
    let runs = wait_all(spawn_ranks(
        &dir,
        2,
        &["run", &path],
        &[("FE_TEST_KILL", kill)],
    ));
    for (rank, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 75, "rank {rank}:\n{}\n{}", run.stdout, run.stderr);
    }
    assert_contains!(runs[0].stderr, "SIGTERM");
    // Started as torchrun starts ranks: the command to continue starts them the same way.
    assert_contains!(
        runs[0].stderr,
        "continue with: torchrun --standalone --nproc-per-node 2 --no-python fe-host run "
    );
    let checkpoints: Vec<String> = crate::util::file_names(&dir.path().join("ckpts"))
        .into_iter()
        .filter(|name| name.starts_with("ckpt-"))
        .collect();
    assert_eq!(checkpoints, [format!("ckpt-{step}")], "{}", runs[0].stderr);
    let args = ["run", &*path, "--resume", "--summary", "summary.json"];
    for (rank, run) in wait_all(spawn_ranks(&dir, 2, &args, &[]))
        .iter()
        .enumerate()
    {
        assert_eq!(run.code, 0, "rank {rank}:\n{}\n{}", run.stdout, run.stderr);
    }
    assert_eq!(last_step(&summary(dir.path())), 20);
}

#[test]
fn sigterm_on_one_rank_checkpoints_every_rank_and_exits_resumable() {
    // KillRank is a plugin trace, which may stop training between steps: the ranks agree
    // after every step, so both stop after step 7, the step rank 1 was signalled in.
    preempted_rank_stops_every_rank_after("dp-preempted", KILL_TRACE, "1:7:TERM", 7);
}

#[test]
fn a_signal_rides_the_next_gradient_all_reduce_when_no_trace_can_stop() {
    // No trace here can stop between steps (a metric cannot ask), so the ranks agree on
    // signals inside the gradient all-reduce rather than in a collective of their own. A
    // signal raised on rank 1 after step 7's all-reduce travels with step 8's: both ranks
    // stop after step 8, checkpoint it, and exit resumable.
    let metric = "\n[[traces]]\ntrace = \"SignalRankMetric\"\ninputs = \"y\"\noutputs = \"signalled\"\nmode = \"train\"\n";
    preempted_rank_stops_every_rank_after("dp-carried-signal", metric, "1:7", 8);
}

/// Rank 1 fails by itself (a trace's error after step 4): rank 1 says the failure is its own,
/// and rank 0, which rank 1 left waiting in a collective, names rank 1 and its error rather
/// than reporting a lost peer.
#[test]
fn a_local_failure_on_rank_1_is_reported_by_rank_1_as_its_own() {
    a_local_failure_is_blamed_on_its_rank("dp-local-failure", 1);
}

/// Rank 0 fails by itself, and rank 0 hosts the rendezvous store that carries its failure: it
/// must keep the store up until rank 1 has read why (else rank 1 finds no store and reports
/// rank 0 "likely lost"), and rank 0 says the failure is its own.
#[test]
fn a_local_failure_on_rank_0_is_named_by_rank_1_while_the_store_lasts() {
    a_local_failure_is_blamed_on_its_rank("dp-local-failure-0", 0);
}

/// `failing` fails in a trace after step 4: it says so as its own failure; the other rank
/// names it and its error.
fn a_local_failure_is_blamed_on_its_rank(tag: &str, failing: usize) {
    let dir = TempDir::new(tag);
    let fail = format!("\n[[traces]]\ntrace = \"FailOnRank\"\nrank = {failing}\nstep = 4\n");
    let path = dir.write("m.toml", &manifest(SGD, 32, 1, &fail));
    let runs = wait_all(spawn_ranks(&dir, 2, &["run", &path.to_string_lossy()], &[]));
    let errors = |rank: usize| -> Vec<String> {
        let run = &runs[rank];
        assert_eq!(run.code, 1, "rank {rank}:\n{}\n{}", run.stdout, run.stderr);
        let lines = run.stderr.lines().filter(|l| l.starts_with("error: "));
        lines.map(str::to_owned).collect()
    };
    let failure = "fe-faulty::FailOnRank failed in on_batch_end (train epoch 1, step 4, batch 4): deliberate failure on this rank only";
    let other = 1 - failing;
    assert_eq!(
        errors(failing),
        [format!("error: rank {failing} of 2 failed: {failure}")],
        "{}",
        runs[failing].stderr
    );
    assert_eq!(
        errors(other),
        [format!(
            "error: rank {other} of 2: stopped because rank {failing} failed ({failure})"
        )],
        "{}",
        runs[other].stderr
    );
}
