//! The kill harness: runs that checkpoint every other step are SIGKILLed at random moments,
//! over and over. After every kill the newest checkpoint must verify and the run must resume;
//! every run that reaches the end must end with the weights of an uninterrupted run, bit for
//! bit. Two tests of 26 kills run in parallel (52 per suite run); `FE_KILL_SOAK=N` asks for N
//! kills per test instead.

use std::path::Path;
use std::time::Duration;

use crate::util::{fe_host, kill_after_line, lenet_manifest, OutputWithin, Run, TempDir};

fn manifest(checkpoint: &str) -> String {
    lenet_manifest(8, checkpoint)
        .replace(
            "architecture = \"LeNet\"",
            "architecture = \"MLP\"\ninputs = 784\nhidden = [32]\nsoftmax = true",
        )
        .replace(
            "log_steps = 50",
            "log_steps = 0\ntrain_steps_per_epoch = 25\neval_steps_per_epoch = 2",
        )
}

const CHECKPOINTS: &str = "\n[checkpoint]\ndir = \"ckpt\"\nevery_steps = 2\nkeep_last = 2\n";

/// xorshift64*: reproducible kill times from the test's seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn weights(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("weights/lenet.safetensors")).unwrap()
}

fn verify_latest(dir: &Path, context: &str) {
    if !dir.join("ckpt/latest").exists() {
        return;
    }
    let out: Run = fe_host()
        .args(["checkpoint", "verify", &dir.join("ckpt").to_string_lossy()])
        .output()
        .unwrap()
        .into();
    assert_eq!(
        out.code, 0,
        "{context}: latest does not verify: {}",
        out.stderr
    );
}

fn kill_loop(tag: &str, seed: u64) {
    let kills_wanted: usize = std::env::var("FE_KILL_SOAK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(26);
    let dir = TempDir::new(tag);
    // The reference: the same training without checkpoints, never interrupted.
    let reference = dir.path().join("reference");
    std::fs::create_dir_all(&reference).unwrap();
    std::fs::write(reference.join("m.toml"), manifest("")).unwrap();
    let out: Run = fe_host()
        .current_dir(&reference)
        .args(["run", "m.toml", "-q", "--save-weights", "weights"])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let expected = weights(&reference);

    let killed = dir.path().join("killed");
    std::fs::create_dir_all(&killed).unwrap();
    std::fs::write(killed.join("m.toml"), manifest(CHECKPOINTS)).unwrap();
    let mut rng = Rng(seed);
    let (mut kills, mut completions) = (0, 0);
    while kills < kills_wanted {
        let mut command = fe_host();
        command
            .current_dir(&killed)
            .args(["run", "m.toml", "-q", "--save-weights", "weights"]);
        if killed.join("ckpt/latest").exists() {
            command.arg("--resume");
        }
        let mut child = command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100 + rng.below(1400)));
        match child.try_wait().unwrap() {
            None => {
                child.kill().unwrap();
                child.wait().unwrap();
                kills += 1;
                verify_latest(&killed, &format!("after kill {kills}"));
            }
            Some(status) => {
                let output = child.wait_with_output().unwrap();
                assert!(
                    status.success(),
                    "a resumed run failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
                // A run that got to the end: it must match the uninterrupted one. Start over.
                assert!(
                    weights(&killed) == expected,
                    "weights differ after {kills} kills"
                );
                completions += 1;
                std::fs::remove_dir_all(killed.join("ckpt")).unwrap();
                std::fs::remove_dir_all(killed.join("weights")).unwrap();
            }
        }
    }
    // Finish the interrupted run and compare.
    let mut args = vec!["run", "m.toml", "-q", "--save-weights", "weights"];
    if killed.join("ckpt/latest").exists() {
        args.push("--resume");
    }
    let out: Run = fe_host()
        .current_dir(&killed)
        .args(&args)
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        weights(&killed) == expected,
        "weights differ after {kills} kills"
    );
    let leftovers: Vec<String> = crate::util::file_names(&killed.join("ckpt"))
        .into_iter()
        .filter(|n| n.starts_with('.') || n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
    eprintln!("{tag}: {kills} kills, {completions} runs completed between kills, all consistent");
}

#[test]
fn killed_runs_always_resume_to_the_same_weights_a() {
    kill_loop("kill-a", 0x9e37_79b9_7f4a_7c15);
}

#[test]
fn killed_runs_always_resume_to_the_same_weights_b() {
    kill_loop("kill-b", 0xd1b5_4a32_d192_ed03);
}

/// The rows of the first run version's `log.jsonl` under `dir/logs`, as (mode, step, ce).
fn logged_losses(dir: &Path) -> Vec<(String, u64, String)> {
    let log = dir.join("logs/version_0/log.jsonl");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    text.lines()
        .map(|line| {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                row["mode"].as_str().unwrap_or_default().to_owned(),
                row["step"].as_u64().unwrap_or_default(),
                row["values"]["ce"].to_string(),
            )
        })
        .collect()
}

/// The log on disk reaches every step the newest checkpoint does: a run killed after a
/// mid-epoch checkpoint (before its epoch's end flushed anything) resumes with every row an
/// uninterrupted run writes, the losses bit for bit.
#[test]
fn a_run_killed_after_a_mid_epoch_checkpoint_resumes_with_every_log_row() {
    let dir = TempDir::new("kill-log");
    let text = manifest("\n[checkpoint]\nevery_steps = 5\n")
        .replace("log_steps = 0", "log_steps = 1")
        .replace("epochs = 8", "epochs = 2");
    let run = |name: &str, args: &[&str]| {
        let at = dir.path().join(name);
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(at.join("m.toml"), &text).unwrap();
        let mut command = fe_host();
        command
            .current_dir(&at)
            .args(["run", "m.toml", "--log-dir", "logs"])
            .args(args);
        (at, command)
    };
    let (reference, mut command) = run("reference", &["-q"]);
    let out = command.output_within();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let expected = logged_losses(&reference);
    // 25 steps, an epoch row and an evaluation per epoch.
    assert_eq!(expected.len(), 2 * (25 + 2), "{expected:?}");

    let (killed, mut command) = run("killed", &[]);
    // Step 12 is logged after the checkpoint at step 10 was taken, and the one at step 5
    // (written in the background) waited for.
    kill_after_line(&mut command, "train: step: 12;");
    let before_resume = logged_losses(&killed);
    assert!(
        before_resume.len() >= 10 && before_resume[..10] == expected[..10],
        "{before_resume:?}"
    );
    let out = fe_host()
        .current_dir(&killed)
        .args(["run", "m.toml", "--log-dir", "logs", "-q", "--resume"])
        .output_within();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(logged_losses(&killed), expected);
}
