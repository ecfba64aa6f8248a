//! Data parallel where the data decides the epoch's length: a filter without replacement keeps
//! a different number of samples on each rank. The ranks join up at the epoch's end (the ones
//! out of data take part with zero weight) and together train on every kept sample once.

use std::collections::BTreeMap;
use std::process::Command;

use crate::dist::{data, spawn_ranks, wait_all, SGD};
use crate::util::{fe_host, root, OutputWithin, TempDir};

/// [`data`]'s 640 training samples as NPY files with an `id` column (the sample's index), in
/// `dir`.
fn npy_with_ids(dir: &TempDir) {
    let script = r#"
import sys, numpy as np
src, out = sys.argv[1], sys.argv[2]
x = np.frombuffer(open(src + "/train-images-idx3-ubyte", "rb").read()[16:], np.uint8).reshape(-1, 28, 28)
y = np.frombuffer(open(src + "/train-labels-idx1-ubyte", "rb").read()[8:], np.uint8).astype(np.int64)
np.save(out + "/x.npy", x)
np.save(out + "/y.npy", y)
np.save(out + "/id.npy", np.arange(len(y), dtype=np.int64))
"#;
    let status = Command::new(root().join(".venv/bin/python"))
        .args(["-c", script])
        .arg(data())
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
}

/// [`crate::dist::manifest`]'s LeNet trained on the NPY copy of its data (`id` included) and
/// only on the samples with a label of at least 5 (a `RemoveIf` without replacement), logging
/// each trained sample's id and label; `update` replaces its `UpdateOp`.
fn manifest(epochs: u32, update: &str) -> String {
    let d = data().display();
    let idx = format!(
        "type = \"idx\"\nfiles = {{ x = \"{d}/train-images-idx3-ubyte\", y = \"{d}/train-labels-idx1-ubyte\" }}"
    );
    let text = crate::dist::manifest(SGD, 32, epochs, FILTER_AND_LOG);
    assert!(text.contains(&idx) && text.contains(UPDATE));
    text.replace(
        &idx,
        "type = \"npy\"\nfiles = { x = \"x.npy\", y = \"y.npy\", id = \"id.npy\" }",
    )
    .replace(UPDATE, update)
}

const FILTER_AND_LOG: &str = r#"
[[pipeline.ops]]
op = "RemoveIf"
inputs = "y"
compare = "lt"
value = 5
replacement = false
mode = "train"

[[traces]]
trace = "JSONLLogger"
filename = "ids.jsonl"
mode = "train"
instance_id_key = "id"
instance_keys = ["y"]
"#;

const UPDATE: &str = "[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lenet\"\nloss = \"ce\"\n";

/// Per epoch, the ids of the samples trained on, in the order logged, with their labels; and
/// the steps of each row.
fn trained(dir: &TempDir) -> BTreeMap<u64, Vec<(i64, i64, u64)>> {
    let text = std::fs::read_to_string(dir.path().join("ids.jsonl")).unwrap();
    let mut epochs: BTreeMap<u64, Vec<(i64, i64, u64)>> = BTreeMap::new();
    for line in text.lines().filter(|l| l.contains("\"instance\"")) {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = row["instance"]["id"].as_i64().unwrap();
        let y = row["instance"]["values"]["y"].as_f64().unwrap() as i64;
        let step = row["step"].as_u64().unwrap();
        let epoch = row["epoch"].as_u64().unwrap();
        epochs.entry(epoch).or_default().push((id, y, step));
    }
    epochs
}

/// The rows of one epoch split at each point where the step goes back: the gathered rows come
/// rank by rank, each rank's in step order.
fn per_rank(rows: &[(i64, i64, u64)]) -> Vec<usize> {
    let mut counts = vec![0usize];
    for pair in rows.windows(2) {
        if pair[1].2 < pair[0].2 {
            counts.push(0);
        }
        *counts.last_mut().unwrap() += 1;
    }
    if !rows.is_empty() {
        counts[0] += 1;
    }
    counts
}

#[test]
fn a_filter_keeping_different_counts_per_rank_trains_every_kept_sample_once_per_epoch() {
    let one = TempDir::new("uneven-one");
    let two = TempDir::new("uneven-two");
    npy_with_ids(&one);
    npy_with_ids(&two);
    let text = manifest(2, UPDATE);
    let path = one.write("m.toml", &text);
    let single = fe_host()
        .current_dir(one.path())
        .args(["run", &*path.to_string_lossy()])
        .output_within();
    assert_eq!(single.code, 0, "{}", single.stderr);
    let path = two.write("m.toml", &text);
    let runs = wait_all(spawn_ranks(
        &two,
        2,
        &["run", &path.to_string_lossy(), "--threads", "1"],
        &[],
    ));
    for (rank, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 0, "rank {rank}:\n{}\n{}", run.stdout, run.stderr);
    }
    let (single, parallel) = (trained(&one), trained(&two));
    assert_eq!(parallel.keys().collect::<Vec<_>>(), [&1, &2]);
    let mut uneven_steps = false;
    for (epoch, rows) in &parallel {
        let ids = |rows: &[(i64, i64, u64)]| {
            let mut ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
            ids.sort();
            ids
        };
        let kept = ids(&single[epoch]);
        assert!(kept.len() > 250 && kept.len() < 390, "{}", kept.len());
        assert!(
            rows.iter().all(|&(_, y, _)| y >= 5),
            "only kept samples train"
        );
        assert_eq!(
            ids(rows),
            kept,
            "epoch {epoch}: the two ranks together train on each kept sample exactly once"
        );
        let counts = per_rank(rows);
        assert_eq!(counts.len(), 2, "rows of two ranks: {counts:?}");
        assert_eq!(counts.iter().sum::<usize>(), kept.len());
        uneven_steps |= counts[0].div_ceil(16) != counts[1].div_ceil(16);
    }
    assert!(
        uneven_steps,
        "the test's data must give the ranks different numbers of steps in some epoch"
    );
}

#[test]
fn an_update_repeated_while_a_condition_holds_is_refused_in_a_data_parallel_run() {
    let dir = TempDir::new("uneven-repeat-while");
    npy_with_ids(&dir);
    let repeat = "[[network.ops]]\nop = \"Repeat\"\nwhile = { key = \"ce\", compare = \"gt\", value = 0.5 }\nmax_iter = 3\nwrap = { op = \"UpdateOp\", model = \"lenet\", loss = \"ce\" }\n";
    let path = dir.write("m.toml", &manifest(1, repeat));
    let runs = wait_all(spawn_ranks(
        &dir,
        2,
        &["run", &path.to_string_lossy(), "--threads", "1"],
        &[],
    ));
    for (rank, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 2, "rank {rank}:\n{}", run.stderr);
        crate::assert_contains!(run.stderr, "network.ops[2]");
        crate::assert_contains!(run.stderr, "`Repeat` with `while` around an update");
    }
}
