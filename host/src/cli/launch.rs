//! `fe-host run|evaluate MANIFEST --nproc N`: N ranks of this same binary on this machine, started the
//! way torchrun starts them (its environment variables, a rendezvous on a free loopback port),
//! so a one-machine data-parallel run needs no Python. Multi-node runs use torchrun itself.
//!
//! The launcher only starts, watches and stops processes: every line a rank prints comes out
//! prefixed `[rank R] `; the first rank that fails ends the others (SIGTERM, then SIGKILL after
//! [`GRACE`]) and its exit code becomes the launcher's; SIGINT and SIGTERM sent to the launcher
//! go to every rank once, so each one checkpoints and stops as it would alone.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::manifest::Manifest;

/// How long ranks asked to stop (because another failed) get before they are killed: torchrun's
/// grace, enough for a rank to finish a step and write its checkpoint.
pub const GRACE: Duration = Duration::from_secs(30);

/// Variables that make this process a rank already: with them set, `--nproc` would start ranks
/// inside a rank.
const RANK_VARIABLES: [&str; 5] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",
];

/// Signals the launcher received and has not forwarded yet, counted per kind.
static PENDING_INT: AtomicU32 = AtomicU32::new(0);
static PENDING_TERM: AtomicU32 = AtomicU32::new(0);

/// What differs between the commands `--nproc` launches (`run`, `evaluate`).
pub struct Launch<F> {
    /// No launcher banner.
    pub quiet: bool,
    /// Loads the manifest the ranks will run, as they will load it: a mistake every rank would
    /// make is reported once, before any rank starts.
    pub manifest: F,
    /// Rank 0's standard output is the command's result (`evaluate --json`): it passes through
    /// as one process would print it, without the `[rank 0] ` prefix.
    pub plain_rank0_stdout: bool,
}

/// Starts `nproc` ranks running this command line without `--nproc`, waits for them and
/// returns the outcome: `Ok` when every rank succeeded, else the first failure.
pub fn launch<F: FnOnce() -> Result<Manifest>>(nproc: usize, how: Launch<F>) -> Result<()> {
    let quiet = how.quiet;
    let vars: Vec<(String, String)> = std::env::vars().collect();
    check(nproc, &vars)?;
    // A manifest or override that does not load, a batch the ranks cannot share.
    let manifest = (how.manifest)()?;
    crate::pipeline::check_batch_divides(&manifest, nproc)?;
    let args = without_nproc(std::env::args_os().skip(1).collect());
    let program = std::env::current_exe()
        .map_err(|e| Error::Internal(format!("cannot find fe-host's own executable: {e}")))?;
    let port = crate::dist::free_port().map_err(|e| {
        Error::Usage(format!(
            "no free TCP port on 127.0.0.1 for the rendezvous: {e}"
        ))
    })?;
    let run_id = format!("fe-host-{}-{port}", std::process::id());
    let threads = threads_per_rank(nproc, &vars);
    if !quiet {
        println!(
            "fe-host launch: {nproc} rank{} on this machine, rendezvous at 127.0.0.1:{port}{};",
            if nproc == 1 { "" } else { "s" },
            threads
                .map(|t| format!(", {t} libtorch thread(s) each (OMP_NUM_THREADS)"))
                .unwrap_or_default()
        );
    }
    install_forwarding();
    let (exits, exited) = mpsc::channel();
    let mut ranks = Vec::with_capacity(nproc);
    let mut printers = Vec::new();
    let mut early = Vec::new();
    for rank in 0..nproc {
        // A rank that already failed (a manifest every rank refuses) or a signal ends the
        // launch: starting the rest would only repeat the failure, or delay the stop.
        early.extend(exited.try_iter());
        let failed = early
            .iter()
            .any(|(r, status)| Failure::of(*r, *status).is_some());
        if failed || PENDING_INT.load(Ordering::SeqCst) + PENDING_TERM.load(Ordering::SeqCst) > 0 {
            break;
        }
        let mut command = Command::new(&program);
        command
            .args(&args)
            .envs(rank_environment(rank, nproc, port, &run_id))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(threads) = threads {
            command.env("OMP_NUM_THREADS", threads.to_string());
        }
        isolate(&mut command);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                terminate(&ranks, libc::SIGKILL);
                return Err(Error::Internal(format!(
                    "cannot start rank {rank} ({}): {e}",
                    program.display()
                )));
            }
        };
        if let Some(out) = child.stdout.take() {
            let prefix = !(how.plain_rank0_stdout && rank == 0);
            printers.push(prefix_lines(out, prefix.then_some(rank), false));
        }
        if let Some(err) = child.stderr.take() {
            printers.push(prefix_lines(err, Some(rank), true));
        }
        ranks.push(Rank {
            pid: child.id() as libc::pid_t,
            running: true,
        });
        let exits = exits.clone();
        std::thread::spawn(move || wait_for(child, rank, exits));
    }
    drop(exits);
    let failure = supervise(&mut ranks, early, &exited);
    for printer in printers {
        let _ = printer.join();
    }
    match failure {
        None => Ok(()),
        Some(failure) => Err(Error::RankFailed {
            rank: failure.rank,
            world: nproc,
            code: failure.code,
            signal: failure.signal,
        }),
    }
}

/// Refuses what `--nproc` cannot do: no ranks, or ranks inside a rank.
fn check(nproc: usize, vars: &[(String, String)]) -> Result<()> {
    if nproc == 0 {
        return Err(Error::Usage(
            "--nproc must be at least 1 (the number of ranks to start on this machine)".into(),
        ));
    }
    if let Some((name, value)) = vars
        .iter()
        .find(|(name, _)| RANK_VARIABLES.contains(&name.as_str()))
    {
        return Err(Error::Usage(format!(
            "--nproc starts ranks itself, but this process already is one ({name}={value} is set, as torchrun sets it): drop --nproc, or unset torchrun's variables"
        )));
    }
    Ok(())
}

/// The command line again, less `--nproc N` / `--nproc=N`: each rank runs it as one rank.
fn without_nproc(args: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--nproc" {
            args.next();
        } else if !arg.to_string_lossy().starts_with("--nproc=") {
            out.push(arg);
        }
    }
    out
}

/// Tells a rank `--nproc N` started it, so the commands it suggests (resume, train longer)
/// start the same ranks again: the launcher takes `--nproc` out of the ranks' command line.
pub const LAUNCHED_BY: &str = "FE_HOST_NPROC";

/// torchrun's variables for local rank `rank` of `world` on a single node, and [`LAUNCHED_BY`].
fn rank_environment(rank: usize, world: usize, port: u16, run_id: &str) -> Vec<(String, String)> {
    let (rank, world) = (rank.to_string(), world.to_string());
    [
        ("RANK", rank.as_str()),
        ("WORLD_SIZE", world.as_str()),
        ("LOCAL_RANK", rank.as_str()),
        ("LOCAL_WORLD_SIZE", world.as_str()),
        ("GROUP_RANK", "0"),
        ("GROUP_WORLD_SIZE", "1"),
        ("ROLE_NAME", "default"),
        ("ROLE_RANK", rank.as_str()),
        ("ROLE_WORLD_SIZE", world.as_str()),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", &port.to_string()),
        ("TORCHELASTIC_RUN_ID", run_id),
        ("TORCHELASTIC_RESTART_COUNT", "0"),
        ("TORCHELASTIC_MAX_RESTARTS", "0"),
        (LAUNCHED_BY, world.as_str()),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value.to_owned()))
    .collect()
}

/// libtorch threads per rank when nothing else says: the cores shared out, so N ranks do not
/// each start one thread per core (torchrun sets OMP_NUM_THREADS=1 for the same reason).
/// `--threads` and `run.threads` still win inside each rank; a set OMP_NUM_THREADS is kept.
fn threads_per_rank(nproc: usize, vars: &[(String, String)]) -> Option<usize> {
    if nproc < 2 || vars.iter().any(|(name, _)| name == "OMP_NUM_THREADS") {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    Some((cores / nproc).max(1))
}

/// Each rank in a process group of its own, so a Ctrl-C at the terminal reaches the launcher
/// alone and each rank hears it once, forwarded; and killed with the launcher should it die,
/// so no rank outlives it waiting for peers.
fn isolate(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    command.process_group(0);
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Copies `stream` line by line to the launcher's stdout (or stderr), each line prefixed
/// `[rank R] ` (`None`: as it is); a line is written whole, so ranks never interleave inside one.
fn prefix_lines(
    stream: impl Read + Send + 'static,
    rank: Option<usize>,
    to_stderr: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let prefix = rank.map_or(String::new(), |rank| format!("[rank {rank}] "));
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if !line.ends_with(b"\n") {
                line.push(b'\n');
            }
            let mut whole = Vec::with_capacity(prefix.len() + line.len());
            whole.extend_from_slice(prefix.as_bytes());
            whole.extend_from_slice(&line);
            // A closed launcher output (`| head`) must not stop the rank: keep draining its pipe.
            let _ = if to_stderr {
                std::io::stderr().lock().write_all(&whole)
            } else {
                std::io::stdout().lock().write_all(&whole)
            };
        }
    })
}

fn wait_for(mut child: Child, rank: usize, exits: mpsc::Sender<(usize, Option<ExitStatus>)>) {
    let status = child.wait().ok();
    let _ = exits.send((rank, status));
}

/// One started rank as the supervisor tracks it.
struct Rank {
    pid: libc::pid_t,
    running: bool,
}

/// The rank whose exit decides the launcher's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Failure {
    rank: usize,
    code: i32,
    signal: Option<i32>,
}

impl Failure {
    /// `None` for a rank that succeeded.
    fn of(rank: usize, status: Option<ExitStatus>) -> Option<Self> {
        use std::os::unix::process::ExitStatusExt;
        let Some(status) = status else {
            // wait(2) itself failed: the rank's fate is unknown, which is no success.
            return Some(Failure {
                rank,
                code: 70,
                signal: None,
            });
        };
        match (status.code(), status.signal()) {
            (Some(0), _) => None,
            (Some(code), _) => Some(Failure {
                rank,
                code,
                signal: None,
            }),
            (None, Some(signal)) => Some(Failure {
                rank,
                code: 128 + signal,
                signal: Some(signal),
            }),
            (None, None) => Some(Failure {
                rank,
                code: 70,
                signal: None,
            }),
        }
    }
}

/// Waits for every rank; returns the first failure. After it, the others are asked to stop
/// and killed after [`GRACE`]. While the user's stop is being carried out they are not asked
/// again (a second signal would end them at once, without their checkpoint), but the kill still
/// comes: a rank that exited has either seen the checkpoint written (the ranks leave together,
/// after it) or left the others unable to write one, and a hung rank would otherwise keep the
/// launcher waiting for good.
fn supervise(
    ranks: &mut [Rank],
    early: Vec<(usize, Option<ExitStatus>)>,
    exited: &mpsc::Receiver<(usize, Option<ExitStatus>)>,
) -> Option<Failure> {
    let mut failure: Option<Failure> = None;
    let mut stop_forwarded = false;
    let mut kill_at: Option<Instant> = None;
    let mut early = early.into_iter();
    while ranks.iter().any(|r| r.running) {
        let next = match early.next() {
            Some(exit) => Ok(exit),
            None => exited.recv_timeout(Duration::from_millis(50)),
        };
        match next {
            Ok((rank, status)) => {
                ranks[rank].running = false;
                let this = Failure::of(rank, status);
                if failure.is_none() && this.is_some() {
                    failure = this;
                    if !stop_forwarded {
                        terminate(ranks, libc::SIGTERM);
                    }
                    kill_stopped(ranks);
                    kill_at = Some(Instant::now() + GRACE);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        for (pending, signal) in [(&PENDING_INT, libc::SIGINT), (&PENDING_TERM, libc::SIGTERM)] {
            for _ in 0..pending.swap(0, Ordering::SeqCst) {
                // The ranks say nothing of a signal their launcher passes on: it is said here,
                // once for the run.
                if !stop_forwarded && failure.is_none() {
                    eprintln!("\nfe-host: stopping every rank (training ranks after their step, saving a checkpoint; ranks still setting up at once); signal again to stop at once");
                }
                terminate(ranks, signal);
                stop_forwarded = true;
            }
        }
        if kill_at.is_some_and(|at| Instant::now() >= at) {
            terminate(ranks, libc::SIGKILL);
            kill_at = None;
        }
    }
    failure
}

/// Sends `signal` to every rank still running.
fn terminate(ranks: &[Rank], signal: libc::c_int) {
    for rank in ranks.iter().filter(|r| r.running) {
        // SAFETY: kill(2) on a child we started. Its waiter thread may have reaped it an
        // instant ago (the message not read yet); a pid is not reused that fast in practice.
        unsafe {
            libc::kill(rank.pid, signal);
        }
    }
}

/// Kills the ranks that are stopped (SIGSTOP, a debugger's breakpoint) once another failed: a
/// stopped rank cannot act on the request to stop, so the grace would only delay the end.
fn kill_stopped(ranks: &[Rank]) {
    let stopped = |pid: libc::pid_t| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().to_owned())
            })
            .is_some_and(|rest| rest.starts_with('T') || rest.starts_with('t'))
    };
    for rank in ranks.iter().filter(|r| r.running && stopped(r.pid)) {
        // SAFETY: as in `terminate`.
        unsafe {
            libc::kill(rank.pid, libc::SIGKILL);
        }
    }
}

extern "C" fn on_signal(signal: libc::c_int) {
    let pending = if signal == libc::SIGINT {
        &PENDING_INT
    } else {
        &PENDING_TERM
    };
    pending.fetch_add(1, Ordering::SeqCst);
}

/// Routes SIGINT and SIGTERM to the supervisor loop, which forwards them to the ranks.
fn install_forwarding() {
    // SAFETY: the handler only touches atomics.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn nproc_is_taken_out_of_the_rank_command_line() {
        assert_eq!(
            without_nproc(os(&["run", "m.toml", "--nproc", "2", "--threads", "1"])),
            os(&["run", "m.toml", "--threads", "1"])
        );
        assert_eq!(
            without_nproc(os(&["run", "--nproc=4", "m.toml"])),
            os(&["run", "m.toml"])
        );
    }

    #[test]
    fn every_rank_gets_torchruns_variables() {
        let env: std::collections::HashMap<String, String> =
            rank_environment(1, 2, 29400, "id").into_iter().collect();
        let membership = crate::dist::membership(&env).unwrap().unwrap();
        assert_eq!(
            (membership.rank, membership.world, membership.local_rank),
            (1, 2, 1)
        );
        assert_eq!(membership.master_port, 29400);
        assert_eq!(env["GROUP_RANK"], "0");
        assert_eq!(env["TORCHELASTIC_RUN_ID"], "id");
    }

    #[test]
    fn zero_ranks_and_ranks_inside_a_rank_are_refused() {
        assert!(check(0, &[]).is_err());
        let error = check(2, &[("LOCAL_RANK".into(), "0".into())]).unwrap_err();
        assert!(error.to_string().contains("LOCAL_RANK=0"), "{error}");
        assert!(check(2, &[("PATH".into(), "/bin".into())]).is_ok());
    }

    #[test]
    fn a_set_thread_count_is_kept() {
        assert_eq!(threads_per_rank(1, &[]), None);
        assert_eq!(
            threads_per_rank(2, &[("OMP_NUM_THREADS".into(), "3".into())]),
            None
        );
        assert!(threads_per_rank(2, &[]).is_some_and(|t| t >= 1));
    }
}
