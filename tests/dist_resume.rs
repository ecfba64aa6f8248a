//! One resume for every rank of a data-parallel run: rank 0 picks the checkpoint, every rank
//! restores that very one or all refuse (exit 6) naming the rank, its host, the path and what
//! differs. A checkpoint folder that is not shared is simulated on rank 1 with a test hook
//! (`FE_TEST_CHECKPOINTS_SEEN_AS=<from>=<to>`: rank 1 reads `<from>/...` under `<to>`).

use std::path::Path;

use crate::dist::{manifest, rank_command, spawn_ranks, spawn_ranks_each, wait_all, SGD};
use crate::util::{copy_dir, fe_host, OutputWithin, Run, TempDir};

const CHECKPOINTS: &str = "\n[checkpoint]\ndir = \"ckpts\"\nevery_epochs = 1\n";

/// A manifest trained 2 epochs in one process, a checkpoint after each: the manifest's path
/// and the two checkpoint names, oldest first.
fn two_checkpoints(dir: &TempDir) -> (String, Vec<String>) {
    let path = dir.write("m.toml", &manifest(SGD, 32, 2, CHECKPOINTS));
    let path = path.to_string_lossy().into_owned();
    let first: Run = fe_host()
        .current_dir(dir.path())
        .args(["run", &path])
        .output_within();
    assert_eq!(first.code, 0, "{}", first.stderr);
    let mut names: Vec<String> = std::fs::read_dir(dir.path().join("ckpts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("ckpt"))
        .collect();
    names.sort_by_key(|name| name.trim_start_matches("ckpt-").parse::<u64>().unwrap_or(0));
    assert_eq!(names.len(), 2, "{names:?}");
    (path, names)
}

/// 2 ranks resuming `--resume latest` for a third epoch, rank 1 reading the checkpoint root
/// `ckpts` under `seen_as` (when given).
fn resume_two_ranks(dir: &TempDir, path: &str, seen_as: Option<&Path>) -> Vec<Run> {
    let shared = std::fs::canonicalize(dir.path().join("ckpts")).unwrap();
    let port = crate::dist::free_port();
    let children = (0..2)
        .map(|rank| {
            let mut command = rank_command(dir, rank, 2, port);
            command.args(["run", path, "--resume", "latest", "--epochs", "3"]);
            if let (1, Some(local)) = (rank, seen_as) {
                let spec = format!("{}={}", shared.display(), local.display());
                command.env("FE_TEST_CHECKPOINTS_SEEN_AS", spec);
            }
            command.spawn().unwrap()
        })
        .collect();
    wait_all(children)
}

/// Rank 1's checkpoint folder holds, under the name of the newest checkpoint rank 0 resumes
/// from, the older one (a copy out of date): every rank refuses before any restores, naming
/// rank 1, its host, the path, and the step and hash that differ.
#[test]
fn a_rank_that_sees_another_checkpoint_at_rank_0s_path_is_refused() {
    let dir = TempDir::new("dp-resume-other");
    let (path, names) = two_checkpoints(&dir);
    let (older, newer) = (&names[0], &names[1]);
    let local = dir.path().join("local-ckpts");
    copy_dir(&dir.path().join("ckpts"), &local);
    std::fs::remove_dir_all(local.join(newer)).unwrap();
    std::fs::rename(local.join(older), local.join(newer)).unwrap();
    let runs = resume_two_ranks(&dir, &path, Some(&local));
    let step = |name: &str| name.trim_start_matches("ckpt-").to_owned();
    for (rank, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 6, "rank {rank}:\n{}\n{}", run.stdout, run.stderr);
        let errors: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.starts_with("error: "))
            .collect();
        assert_eq!(errors.len(), 1, "rank {rank}: {}", run.stderr);
        let line = errors[0];
        crate::assert_contains!(line, format!("ckpts/{newer}: rank 1 (on "));
        crate::assert_contains!(line, "reads another checkpoint there than rank 0 (on ");
        crate::assert_contains!(
            line,
            format!(
                "step {} (write 1) vs step {} (write 0)",
                step(newer),
                step(older)
            )
        );
        crate::assert_contains!(line, "MANIFEST.json sha256 ");
        assert!(!run.stdout.contains("fe-host resume:"), "{}", run.stdout);
    }
}

/// Rank 1 cannot read the checkpoint at all (its folder is empty): every rank refuses, naming
/// rank 1, its host and the path it could not read.
#[test]
fn a_rank_that_cannot_read_rank_0s_checkpoint_is_refused_naming_it() {
    let dir = TempDir::new("dp-resume-missing");
    let (path, names) = two_checkpoints(&dir);
    let local = dir.path().join("empty");
    std::fs::create_dir_all(&local).unwrap();
    let runs = resume_two_ranks(&dir, &path, Some(&local));
    for (rank, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 6, "rank {rank}:\n{}\n{}", run.stdout, run.stderr);
        crate::assert_contains!(run.stderr, format!("ckpts/{}: rank 1 (on ", names[1]));
        crate::assert_contains!(run.stderr, "cannot read the checkpoint rank 0 (on ");
        crate::assert_contains!(run.stderr, "is not a checkpoint directory");
        assert!(!run.stdout.contains("fe-host resume:"), "{}", run.stdout);
    }
    // The shared folder, seen alike by both ranks, resumes from the newest checkpoint.
    let runs = resume_two_ranks(&dir, &path, None);
    for (rank, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 0, "rank {rank}:\n{}\n{}", run.stdout, run.stderr);
    }
    crate::assert_contains!(runs[0].stdout, format!("fe-host resume: "));
    crate::assert_contains!(runs[0].stdout, format!("{}: step", names[1]));
}

/// Ranks started with different `--resume` checkpoints: refused on every rank before any
/// restores, naming the rank, its host and both checkpoints.
#[test]
fn ranks_asked_to_resume_from_different_checkpoints_are_refused_naming_both() {
    let dir = TempDir::new("dp-other-checkpoint");
    let (path, checkpoints) = two_checkpoints(&dir);
    let resume_from = |rank: usize| format!("ckpts/{}", checkpoints[rank]);
    let runs = wait_all(spawn_ranks_each(
        &dir,
        2,
        |rank| {
            [
                "run",
                &path,
                "--resume",
                &resume_from(rank),
                "--epochs",
                "3",
            ]
            .map(str::to_owned)
            .to_vec()
        },
        &[],
    ));
    for (rank, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 6, "rank {rank}:\n{}\n{}", run.stdout, run.stderr);
        crate::assert_contains!(run.stderr, "rank 1 (on ");
        crate::assert_contains!(run.stderr, &checkpoints[0]);
        crate::assert_contains!(run.stderr, &checkpoints[1]);
        crate::assert_contains!(run.stderr, "every rank must restore the same checkpoint");
        assert!(!run.stdout.contains("fe-host resume:"), "{}", run.stdout);
    }
    // The same checkpoint on both ranks resumes.
    let runs = wait_all(spawn_ranks(
        &dir,
        2,
        &["run", &path, "--resume", &resume_from(1), "--epochs", "3"],
        &[],
    ));
    for (rank, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 0, "rank {rank}:\n{}\n{}", run.stdout, run.stderr);
    }
}
