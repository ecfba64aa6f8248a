//! Peak memory of a process tree, measured from outside: fe-host's workers are threads of one
//! process, a PyTorch DataLoader's are forked processes, so only the tree's sum compares them.
//! PSS (proportional set size) counts a page shared by n processes as 1/n in each, so the
//! libraries a forked worker shares with its parent are not counted twice.

use std::collections::BTreeSet;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How often the tree is sampled: a peak shorter than this can be missed, which is why the
/// figure is labelled "sampled".
const EVERY: Duration = Duration::from_millis(20);

/// What a measured command printed and the most memory its process tree held at once.
pub struct Measured {
    pub stdout: String,
    pub peak_bytes: u64,
}

/// Runs `command` to its end, sampling its process tree's summed PSS; panics when it fails.
pub fn run_measured(mut command: Command) -> Measured {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the measured command");
    let mut pipe = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        pipe.read_to_string(&mut text).expect("read stdout");
        text
    });
    let mut peak_bytes = 0;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        peak_bytes = peak_bytes.max(tree_pss_bytes(child.id()));
        std::thread::sleep(EVERY);
    };
    let stdout = reader.join().expect("stdout reader");
    assert!(status.success(), "measured command failed: {status}");
    Measured { stdout, peak_bytes }
}

/// The summed PSS of `root` and every process descended from it.
fn tree_pss_bytes(root: u32) -> u64 {
    let mut tree = BTreeSet::from([root]);
    // Parents are listed before their children often enough, but not always: repeat until
    // the set stops growing.
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|pid| Some((pid, parent_of(pid)?)))
                .collect()
        })
        .unwrap_or_default();
    loop {
        let before = tree.len();
        for &(pid, parent) in &parents {
            if tree.contains(&parent) {
                tree.insert(pid);
            }
        }
        if tree.len() == before {
            break;
        }
    }
    tree.into_iter().map(pss_bytes).sum()
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: fields start after its last ')'.
    let after = &stat[stat.rfind(')')? + 2..];
    after.split(' ').nth(1)?.parse().ok()
}

fn pss_bytes(pid: u32) -> u64 {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) else {
        return 0;
    };
    text.lines()
        .find_map(|line| line.strip_prefix("Pss:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib * 1024)
}
