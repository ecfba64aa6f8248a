//! Data-parallel runs refused before they train: ranks that disagree (data, overrides, world
//! size), a batch the ranks cannot share, malformed rank variables, `--smoke` as a rank.

use crate::dist::{
    data, free_port, manifest, rank_command, spawn_ranks, spawn_ranks_each, wait_all, SGD,
};
use crate::util::{fe_host, OutputWithin, Run, TempDir};

/// The same manifest reading other files on each rank (a data directory that is not really
/// shared): refused on every rank before training, naming the datasets and their counts.
#[test]
fn ranks_reading_different_data_are_refused_naming_the_counts() {
    let dir = TempDir::new("dp-other-data");
    let text = manifest(SGD, 16, 1, "").replace(&data().display().to_string(), "data");
    for (name, train) in [("a", "64"), ("b", "48")] {
        let data = dir.path().join(name).join("data");
        let out: Run = fe_host()
            .args(["datagen", "digits", "--out", &data.to_string_lossy()])
            .args(["--train", train, "--eval", "32", "--test", "0"])
            .output_within();
        assert_eq!(out.code, 0, "{}", out.stderr);
        std::fs::write(dir.path().join(name).join("m.toml"), &text).unwrap();
    }
    let runs = wait_all(spawn_ranks_each(
        &dir,
        2,
        |rank| vec!["run".to_owned(), format!("{}/m.toml", ["a", "b"][rank])],
        &[],
    ));
    for run in &runs {
        assert_eq!(run.code, 5, "{}\n{}", run.stdout, run.stderr);
        assert_contains!(
            run.stderr,
            "rank 1 reads other data than rank 0 through the same manifest"
        );
        assert_contains!(run.stderr, "train: 64 samples on rank 0, 48 on rank 1");
    }
}

#[test]
fn a_batch_that_does_not_divide_among_the_ranks_is_refused_at_its_key() {
    let dir = TempDir::new("dp-indivisible");
    let path = dir.write("m.toml", &manifest(SGD, 33, 1, ""));
    let path = path.to_string_lossy();
    let runs = wait_all(spawn_ranks(&dir, 2, &["run", &path], &[]));
    for run in &runs {
        assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
        assert_contains!(run.stderr, "pipeline.batch_size");
        assert_contains!(
            run.stderr,
            "batch size 33 (epoch 1) does not divide among 2 ranks: each rank would read 16.50 samples a step; use a multiple of 2"
        );
    }
}

#[test]
fn smoke_is_refused_as_one_rank_of_several() {
    let dir = TempDir::new("dp-smoke");
    let path = dir.write("m.toml", &manifest(SGD, 32, 1, ""));
    let out: Run = fe_host()
        .env("RANK", "0")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "29999")
        .args(["run", &path.to_string_lossy(), "--smoke"])
        .output_within();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_contains!(
        out.stderr,
        "--smoke checks a manifest in one process, but this is rank 0 of 2"
    );
}

#[test]
fn a_malformed_rank_variable_is_named() {
    let dir = TempDir::new("dist-malformed");
    let path = dir.write("m.toml", &manifest(SGD, 32, 1, ""));
    let out: Run = fe_host()
        .env("RANK", "first")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "29999")
        .args(["run", &path.to_string_lossy()])
        .output_within();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_eq!(
        out.stderr.trim(),
        "error: environment variable RANK=\"first\" is not a non-negative integer"
    );
}

#[test]
fn ranks_started_with_different_overrides_are_refused_together() {
    let dir = TempDir::new("dp-different-ranks");
    let path = dir.write("m.toml", &manifest(SGD, 32, 1, ""));
    let path = path.to_string_lossy().into_owned();
    let runs = wait_all(spawn_ranks_each(
        &dir,
        2,
        |rank| {
            let mut args = vec!["run".to_owned(), path.clone()];
            if rank == 1 {
                args.extend(["--set".into(), "models.lenet.optimizer.lr=0.01".into()]);
            }
            args
        },
        &[],
    ));
    for (rank, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 2, "rank {rank}: {}", run.stderr);
        assert_contains!(
            run.stderr,
            "rank 1 was started with another manifest than rank 0"
        );
        assert_contains!(run.stderr, "lr");
        assert!(!run.stdout.contains("fe-host train:"), "{}", run.stdout);
    }
}

#[test]
fn ranks_started_with_different_world_sizes_say_so_instead_of_a_lost_rank() {
    let dir = TempDir::new("dp-world-sizes");
    let path = dir.write("m.toml", &manifest(SGD, 32, 1, ""));
    // Either way round: rank 0 compares every rank that came, the others compare rank 0.
    for (zero, one) in [(2, 4), (4, 2)] {
        let port = free_port();
        let children = [(0, zero), (1, one)].map(|(rank, world)| {
            rank_command(&dir, rank, world, port)
                .args(["run", &*path.to_string_lossy()])
                .spawn()
                .unwrap()
        });
        let runs = wait_all(children.into());
        for (rank, run) in runs.iter().enumerate() {
            assert_ne!(run.code, 0, "rank {rank}: {}", run.stderr);
            assert!(!run.stderr.contains("lost"), "rank {rank}: {}", run.stderr);
            assert_eq!(run.stderr.trim_end().lines().count(), 1, "{}", run.stderr);
        }
        assert_contains!(
            runs[0].stderr,
            format!("rank 1 was started with WORLD_SIZE={one}, rank 0 with WORLD_SIZE={zero}")
        );
        assert_contains!(
            runs[1].stderr,
            format!(
                "rank 0 was started with WORLD_SIZE={zero}, this rank (1) with WORLD_SIZE={one}"
            )
        );
    }
}
