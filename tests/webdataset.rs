//! `type = "webdataset"`: 40 generated tar shards (Python's `tarfile`, as WebDataset's own
//! writers produce them) read through the real pipeline — every sample once per epoch in one
//! process and across 2 ranks × 2 workers, seeded shuffles, resuming mid-epoch, the same
//! samples over `python -m http.server` and `pipe:cat`, and a corrupt shard named.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use fe_host::manifest::Manifest;
use fe_host::network::Keys;
use fe_host::pipeline::Pipeline;
use fe_plugin_api::Mode;

use crate::util::{root, OutputWithin, TempDir};

/// Shard `i` holds `3 + i % 4` samples: shards of unequal size, 180 samples in all.
const TOTAL: usize = 180;

/// Writes the shards as `s-000.tar` … `s-039.tar`: sample `s{shard}-{j}` has its global id as
/// `.cls`, a text and `[id, -id]` as float32 `.npy`.
fn write_shards(dir: &Path) {
    let script = r#"
import io, sys, tarfile, numpy as np
out, gid = sys.argv[1], 0
for i in range(40):
    with tarfile.open(f"{out}/s-{i:03d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for j in range(3 + i % 4):
            key = f"s{i:03d}-{j}"
            npy = io.BytesIO(); np.save(npy, np.array([gid, -gid], dtype=np.float32))
            for ext, data in (("cls", str(gid).encode()), ("txt", f"sample {gid:03d}".encode()), ("npy", npy.getvalue())):
                info = tarfile.TarInfo(f"{key}.{ext}"); info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            gid += 1
"#;
    let status = Command::new(root().join(".venv/bin/python"))
        .args(["-c", script, &dir.to_string_lossy()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn shards() -> TempDir {
    let dir = TempDir::new("webdataset");
    write_shards(dir.path());
    dir
}

fn manifest(dir: &TempDir, urls: &str, extra: &str) -> Manifest {
    let text = format!(
        "[run]\nepochs = 2\nseed = 5\n\n[pipeline]\nbatch_size = 4\nworkers = 2\n{extra}\n\
         [pipeline.data.train]\ntype = \"webdataset\"\nurls = \"{urls}\"\nshuffle_buffer = 8\n\
         keys = {{ cls = \"y\", npy = \"x\" }}\n\n\
         [pipeline.data.eval]\ntype = \"webdataset\"\nurls = \"{urls}\"\n\
         keys = {{ cls = \"y\", npy = \"x\" }}\n"
    );
    let path = dir.write("m.toml", &text);
    Manifest::load(&path).unwrap()
}

fn pipeline(manifest: &Manifest) -> Result<(Pipeline, Arc<Keys>), fe_host::Error> {
    let registry = crate::network::registry();
    let mut keys = Keys::default();
    let pipeline = Pipeline::build(manifest, &registry, &mut keys)?;
    Ok((pipeline, Arc::new(keys)))
}

/// The ids (`.cls`) of every sample of one epoch, batch by batch, with each batch's `.npy`
/// and `.txt` checked against its id; from batch `skip` on.
fn ids(pipeline: &Pipeline, keys: &Arc<Keys>, mode: Mode, epoch: u32, skip: usize) -> Vec<i64> {
    let [y, x, txt] = ["y", "x", "txt"].map(|k| keys.get(k).unwrap());
    let wanted: BTreeSet<_> = [y, x, txt].into();
    let loader = pipeline
        .epoch_from(mode, epoch, "", &wanted, None, keys, skip)
        .unwrap();
    let mut out = Vec::new();
    for batch in loader {
        let batch = batch.unwrap();
        let labels = Vec::<i64>::try_from(batch.get(y).unwrap()).unwrap();
        let arrays = Vec::<f32>::try_from(batch.get(x).unwrap().flatten(0, -1)).unwrap();
        let texts = Vec::<u8>::try_from(batch.get(txt).unwrap().flatten(0, -1)).unwrap();
        for (n, id) in labels.iter().enumerate() {
            assert_eq!(arrays[2 * n..2 * n + 2], [*id as f32, -*id as f32]);
            assert_eq!(
                texts[10 * n..10 * n + 10],
                *format!("sample {id:03}").as_bytes()
            );
        }
        out.extend(labels);
    }
    out
}

fn sorted(mut ids: Vec<i64>) -> Vec<i64> {
    ids.sort();
    ids
}

fn every_sample() -> Vec<i64> {
    (0..TOTAL as i64).collect()
}

const LOCAL: &str = "s-{000..039}.tar";

#[test]
fn one_process_reads_every_sample_once_per_epoch_in_seeded_orders() {
    let dir = shards();
    let (p, keys) = pipeline(&manifest(&dir, LOCAL, "")).unwrap();
    assert_eq!(p.samples(Mode::Train, 1, ""), TOTAL as u64);
    let one = ids(&p, &keys, Mode::Train, 1, 0);
    let two = ids(&p, &keys, Mode::Train, 2, 0);
    assert_eq!(sorted(one.clone()), every_sample());
    assert_eq!(sorted(two.clone()), every_sample());
    assert_ne!(one, two, "each epoch reshuffles");
    assert_ne!(one, every_sample(), "training data is shuffled");
    // Evaluation reads the shards in order.
    assert_eq!(ids(&p, &keys, Mode::Eval, 1, 0), every_sample());

    // The same seed gives the same order in a new pipeline; another seed another order.
    let (again, keys_again) = pipeline(&manifest(&dir, LOCAL, "")).unwrap();
    assert_eq!(ids(&again, &keys_again, Mode::Train, 1, 0), one);
    let reseeded = Manifest::load(
        &dir.write(
            "m.toml",
            &std::fs::read_to_string(dir.path().join("m.toml"))
                .unwrap()
                .replace("seed = 5", "seed = 6"),
        ),
    )
    .unwrap();
    let (other, other_keys) = pipeline(&reseeded).unwrap();
    assert_ne!(ids(&other, &other_keys, Mode::Train, 1, 0), one);

    // Resuming at batch 17 reads exactly what the whole epoch reads from there.
    assert_eq!(ids(&p, &keys, Mode::Train, 2, 17), two[17 * 4..]);
}

#[test]
fn two_ranks_with_two_workers_each_split_every_epoch_between_them() {
    let dir = shards();
    let m = manifest(&dir, LOCAL, "");
    let (whole, whole_keys) = pipeline(&m).unwrap();
    for epoch in 1..=2 {
        let mut ranks = Vec::new();
        for rank in 0..2 {
            let (mut p, keys) = pipeline(&m).unwrap();
            p.shard(rank, 2, &m).unwrap();
            ranks.push(ids(&p, &keys, Mode::Train, epoch, 0));
        }
        assert_eq!(ranks[0].len(), TOTAL / 2);
        assert_eq!(ranks[1].len(), TOTAL / 2);
        let both: Vec<i64> = ranks.concat();
        assert_eq!(sorted(both), every_sample(), "epoch {epoch}");
        // Together the ranks' step-s batches are the single process's batch s.
        let single = ids(&whole, &whole_keys, Mode::Train, epoch, 0);
        for step in 0..TOTAL / 4 {
            let mut together = ranks[0][2 * step..2 * step + 2].to_vec();
            together.extend(&ranks[1][2 * step..2 * step + 2]);
            assert_eq!(
                sorted(together),
                sorted(single[4 * step..4 * step + 4].to_vec())
            );
        }
    }
}

/// `python -m http.server` from the project's `.venv`, serving `dir` on a free port.
struct Server(Child, u16);

impl Server {
    fn start(dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(root().join(".venv/bin/python"))
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .arg("--directory")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Held from here on, so that a server that never answers is still killed.
        let server = Server(child, port);
        // Wait until it accepts connections (it is ready within a second; 30 s is a bound).
        for _ in 0..300 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return server;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("http.server did not start on port {port}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn http_and_pipe_shards_give_the_same_samples_as_local_files() {
    let dir = shards();
    let (local, local_keys) = pipeline(&manifest(&dir, LOCAL, "")).unwrap();
    let expected: Vec<Vec<i64>> = (1..=2)
        .map(|epoch| ids(&local, &local_keys, Mode::Train, epoch, 0))
        .collect();
    let server = Server::start(dir.path());
    let http = format!("http://127.0.0.1:{}/s-{{000..039}}.tar", server.1);
    let pipe = format!("pipe:cat {}/s-{{000..039}}.tar", dir.path().display());
    for urls in [http, pipe] {
        let (p, keys) = pipeline(&manifest(&dir, &urls, "")).unwrap();
        for epoch in 1..=2u32 {
            let got = ids(&p, &keys, Mode::Train, epoch, 0);
            assert_eq!(got, expected[epoch as usize - 1], "{urls}, epoch {epoch}");
        }
        assert_eq!(
            ids(&p, &keys, Mode::Train, 2, 9),
            expected[1][36..],
            "{urls}"
        );
    }
}

#[test]
fn a_corrupt_or_truncated_shard_is_named_with_its_member() {
    let dir = shards();
    let shard = dir.path().join("s-007.tar");
    let bytes = std::fs::read(&shard).unwrap();
    // Cut inside the data of the third member (three 512-byte blocks per member).
    std::fs::write(&shard, &bytes[..512 * 5 + 100]).unwrap();
    let error = pipeline(&manifest(&dir, LOCAL, ""))
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("s-007.tar"), "{error}");
    assert!(error.contains("truncated"), "{error}");
    assert!(error.contains("s007-0.npy"), "{error}");
    // Through a pipe the stream just ends early; the error still names shard and member.
    let pipe = format!("pipe:cat {}/s-{{000..039}}.tar", dir.path().display());
    let error = pipeline(&manifest(&dir, &pipe, ""))
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("pipe:cat") && error.contains("s-007.tar"),
        "{error}"
    );
    assert!(error.contains("s007-0.npy"), "{error}");

    // The third member's header overwritten with garbage.
    let mut garbled = bytes.clone();
    garbled[512 * 4..512 * 4 + 100].fill(b'x');
    std::fs::write(&shard, garbled).unwrap();
    let error = pipeline(&manifest(&dir, LOCAL, ""))
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("s-007.tar"), "{error}");
    assert!(error.contains("after member `s007-0.txt`"), "{error}");
}

/// A training run over the shards, SIGKILLed mid-epoch after a checkpoint and resumed with
/// `--resume`, ends with the weights of the same run never interrupted, bit for bit: the
/// checkpoint carries the epoch's shard order, the shuffle buffer's draws and each worker's
/// position.
#[test]
fn a_run_killed_mid_epoch_resumes_to_the_weights_of_an_uninterrupted_run() {
    let dir = shards();
    let text = training_manifest(&dir, "");
    let run_in = |name: &str, extra: &[&str]| {
        let at = dir.path().join(name);
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(at.join("m.toml"), &text).unwrap();
        let mut command = crate::util::fe_host();
        command
            .current_dir(&at)
            .args([
                "run",
                "m.toml",
                "--save-weights",
                "weights",
                "--threads",
                "1",
            ])
            .args(extra);
        (at, command)
    };
    let weights = |at: &Path| std::fs::read(at.join("weights/mlp.safetensors")).unwrap();

    let (reference, mut command) = run_in("reference", &["-q"]);
    let out = command.output_within();
    assert_eq!(out.code, 0, "{}", out.stderr);

    // Step 12 is logged after the checkpoint at step 10: the kill lands mid-epoch, with a
    // checkpoint inside the epoch to resume from.
    let (killed, mut command) = run_in("killed", &[]);
    crate::util::kill_after_line(&mut command, "train: step: 12;");
    assert!(!killed.join("weights").exists(), "the killed run finished");
    let (_, mut command) = run_in("killed", &["--resume"]);
    let out = command.output_within();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_resumed_inside_epoch_1(&out.stdout);
    assert!(
        weights(&killed) == weights(&reference),
        "the resumed run's weights differ from the uninterrupted run's"
    );
}

/// A resumed run's output says it resumed inside epoch 1 (from the checkpoint of step 10 or
/// later) and does not show step 1: it did not start over.
fn assert_resumed_inside_epoch_1(stdout: &str) {
    let resumed = stdout
        .lines()
        .find(|l| l.starts_with("fe-host resume: "))
        .unwrap_or_else(|| panic!("no resume line:\n{stdout}"));
    assert_contains!(resumed, "epoch 1");
    assert!(
        !stdout.contains("train: step: 1;"),
        "the resumed run started over:\n{stdout}"
    );
}

/// A training run over the shards in `dir` (180 samples, batch 4: 45 steps an epoch, or 23 a
/// rank on 2), a checkpoint every 5 steps, `extra` appended.
fn training_manifest(dir: &TempDir, extra: &str) -> String {
    let urls = format!("{}/s-{{000..039}}.tar", dir.path().display());
    format!(
        "[run]\nepochs = 2\nseed = 5\nlog_steps = 1\n\n[pipeline]\nbatch_size = 4\nworkers = 2\n\n\
         [pipeline.data.train]\ntype = \"webdataset\"\nurls = \"{urls}\"\nshuffle_buffer = 8\n\
         keys = {{ cls = \"y\", npy = \"x\" }}\n\n\
         [[models]]\nname = \"mlp\"\narchitecture = \"MLP\"\ninputs = 2\nhidden = [8]\n\
         classes = 180\noptimizer = {{ type = \"sgd\", lr = 0.0001 }}\n\n\
         [[network.ops]]\nop = \"ModelOp\"\nmodel = \"mlp\"\ninputs = \"x\"\noutputs = \"y_pred\"\n\n\
         [[network.ops]]\nop = \"CrossEntropy\"\ninputs = [\"y_pred\", \"y\"]\noutputs = \"ce\"\n\
         from_logits = true\n\n\
         [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"mlp\"\nloss = \"ce\"\n\n\
         [checkpoint]\ndir = \"ckpt\"\nevery_steps = 5\n{extra}"
    )
}

/// The same on 2 ranks × 2 workers: rank 1 is SIGKILLed at step 12 (after the checkpoint of
/// step 10), rank 0 stops naming it, and both ranks restarted with `--resume` end with the
/// weights of the 2-rank run never interrupted, bit for bit: each rank's share of the
/// shards, its workers' positions and the shuffle buffers come back as they were.
#[test]
fn two_ranks_killed_mid_epoch_resume_to_the_weights_of_an_uninterrupted_run() {
    use crate::dist::{spawn_ranks, wait_all};
    let dir = shards();
    let text = training_manifest(&dir, "\n[[traces]]\ntrace = \"KillRank\"\n");
    let run_ranks = |name: &str, extra: &[&str], env: &[(&str, &str)]| {
        let at = TempDir::new(name);
        let path = at.write("m.toml", &text);
        let mut args = vec![
            "run".to_string(),
            path.to_string_lossy().into_owned(),
            "--save-weights".into(),
            "weights".into(),
            "--threads".into(),
            "1".into(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let runs = wait_all(spawn_ranks(&at, 2, &args, env));
        (at, runs)
    };
    let weights = |at: &TempDir| std::fs::read(at.path().join("weights/mlp.safetensors")).unwrap();

    let (reference, runs) = run_ranks("wds-dp-reference", &[], &[]);
    for (rank, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 0, "rank {rank}:\n{}", run.stderr);
    }

    let (killed, runs) = run_ranks("wds-dp-killed", &[], &[("FE_TEST_KILL", "1:12")]);
    assert_eq!(runs[1].code, -1, "rank 1 was killed:\n{}", runs[1].stderr);
    assert_eq!(runs[0].code, 1, "{}", runs[0].stderr);
    assert_contains!(runs[0].stderr, "rank 1 is lost");
    assert!(
        !killed.path().join("weights").exists(),
        "the killed run finished"
    );

    let path = killed.path().join("m.toml");
    let args = [
        "run",
        &*path.to_string_lossy(),
        "--resume",
        "--save-weights",
        "weights",
        "--threads",
        "1",
    ];
    let runs = wait_all(spawn_ranks(&killed, 2, &args, &[]));
    for (rank, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 0, "rank {rank}:\n{}", run.stderr);
    }
    assert_resumed_inside_epoch_1(&runs[0].stdout);
    assert!(
        weights(&killed) == weights(&reference),
        "the resumed 2-rank run's weights differ from the uninterrupted run's"
    );
}
