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

/// Set in the child process a loader benchmark starts for each fe-host measurement: the
/// manifest whose pipeline it runs.
const CHILD: &str = "FE_BENCH_LOADER_MANIFEST";

/// In a loader benchmark's child process (see [`fe_host_epoch`]): runs one epoch of the
/// manifest's training pipeline, prints `samples seconds` and returns true.
pub fn run_child_if_asked() -> bool {
    use std::sync::Arc;
    use std::time::Instant;

    use fe_host::components::load_registry;
    use fe_host::manifest::Manifest;
    use fe_host::network::Keys;
    use fe_host::pipeline::Pipeline;
    use fe_host::plugins::search_path;
    use fe_plugin_api::Mode;

    let Some(path) = std::env::var_os(CHILD) else {
        return false;
    };
    // As the fe-host binary does at start.
    fe_host::runtime::tune_malloc();
    let start = Instant::now();
    let manifest = Manifest::load(std::path::Path::new(&path)).expect("manifest");
    let plugins = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug");
    let search = search_path(&[], &[plugins], None, None);
    let registry = load_registry(&search, &Default::default()).expect("plugins");
    let mut keys = Keys::default();
    let pipeline = Pipeline::build(&manifest, &registry, &mut keys).expect("pipeline");
    let wanted = pipeline.available_keys(Mode::Train, 1, "");
    let keys = Arc::new(keys);
    let mut samples = 0;
    for batch in pipeline
        .epoch(Mode::Train, 1, "", &wanted, None, &keys)
        .unwrap()
    {
        samples += batch.unwrap().size;
    }
    println!("{samples} {}", start.elapsed().as_secs_f64());
    true
}

/// Samples/s and peak PSS (MiB) of a measured process that printed `samples seconds`.
pub fn epoch_rate(measured: &Measured, expected: usize) -> (f64, f64) {
    let mut words = measured.stdout.split_whitespace();
    let samples: usize = words.next().unwrap().parse().unwrap();
    let seconds: f64 = words.next().unwrap().parse().unwrap();
    assert_eq!(samples, expected, "an epoch is every sample once");
    (
        samples as f64 / seconds,
        measured.peak_bytes as f64 / (1 << 20) as f64,
    )
}

/// One epoch of the pipeline `manifest` describes, in a child process of this benchmark
/// (which must call [`run_child_if_asked`] first thing): its samples/s, timed from building
/// the pipeline to the last batch, and the process's peak PSS in MiB.
pub fn fe_host_epoch(
    dir: &std::path::Path,
    name: &str,
    manifest: &str,
    expected: usize,
) -> (f64, f64) {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, manifest).unwrap();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.env(CHILD, &path).current_dir(dir);
    epoch_rate(&run_measured(command), expected)
}

/// `.venv`'s python running `script` (a path under host/benches) with `args` in `dir`; it
/// prints `samples seconds`. Its samples/s and its process tree's peak PSS in MiB.
pub fn python_epoch(
    dir: &std::path::Path,
    script: &str,
    args: &[String],
    expected: usize,
) -> (f64, f64) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut command = Command::new(root.join(".venv/bin/python"));
    command
        .arg(root.join("host/benches").join(script))
        .args(args)
        .current_dir(dir);
    epoch_rate(&run_measured(command), expected)
}

/// The batch size both sides of a loader benchmark use.
pub const BATCH: usize = 32;

/// A one-epoch manifest whose training pipeline reads `data` (the lines of a
/// `[pipeline.data.train]` table) through `ops` (`[[pipeline.ops]]` tables) on `workers`
/// workers, shuffled, in batches of [`BATCH`]; the network is there only because a manifest
/// needs one, the child never builds it.
pub fn pipeline_manifest(data: &str, ops: &str, workers: usize) -> String {
    format!(
        r#"[run]
epochs = 1

[pipeline]
batch_size = {BATCH}
shuffle = true
workers = {workers}

[pipeline.data.train]
{data}
{ops}
[[models]]
name = "lenet"
architecture = "LeNet"
optimizer = "adam"

[[network.ops]]
op = "ModelOp"
model = "lenet"
inputs = "x"
outputs = "y_pred"
"#
    )
}
