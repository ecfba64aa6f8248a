//! Collective check mode (`run.check_collectives`, `FE_CHECK_COLLECTIVES`): ranks whose code
//! took different paths fail together at the first collective that differs, naming both call
//! sites; ranks that agree train exactly as without it.

use crate::dist::{manifest, max_difference, spawn_ranks, train, wait_all, SGD};
use crate::util::TempDir;

/// A plugin trace that may stop training: the ranks then agree after every step in an
/// all-reduce of their own, the collective the test hook skips on rank 1.
const MAY_STOP: &str = "\n[[traces]]\ntrace = \"KillRank\"\n";

#[test]
fn check_mode_catches_a_collective_skipped_on_rank_1_and_names_both_call_sites() {
    let dir = TempDir::new("dp-check-skip");
    let path = dir.write("m.toml", &manifest(SGD, 32, 1, MAY_STOP));
    let runs = wait_all(spawn_ranks(
        &dir,
        2,
        &["run", &path.to_string_lossy()],
        &[
            ("FE_CHECK_COLLECTIVES", "1"),
            ("FE_TEST_SKIP_COLLECTIVE", "1:5"),
        ],
    ));
    let mut lines = Vec::new();
    for (rank, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 1, "rank {rank}:\n{}\n{}", run.stdout, run.stderr);
        let errors: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.starts_with("error: "))
            .collect();
        assert_eq!(errors.len(), 1, "rank {rank}:\n{}", run.stderr);
        lines.push(errors[0].to_owned());
    }
    // Rank 1 skipped step 5's first skippable collective, the averaging of the logged loss
    // (log_steps = 5), so its next one (the agreement after the step) met rank 0's
    // averaging: both call sites, from both ranks.
    let expected = "collective mismatch at step 5: rank 0 at host/src/estimator/essential.rs:";
    assert_contains!(lines[0], &format!("error: rank 0 of 2: {expected}"));
    assert_contains!(lines[1], &format!("error: rank 1 of 2: {expected}"));
    // The collective's number is where both ranks stood in the sequence (it counts the
    // start-up's collectives too, so it is not pinned here): the same on both sides.
    for line in &lines {
        let number = line
            .split("(all-reduce sum f64[1], collective #")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .unwrap_or_else(|| panic!("no numbered averaging in {line}"));
        assert_contains!(
            line,
            &format!(
                "(all-reduce sum f64[1], collective #{number}) but rank 1 at host/src/estimator/epoch.rs:"
            )
        );
        assert_contains!(
            line,
            &format!("(all-reduce max f64[2], collective #{number})")
        );
    }
    assert_eq!(
        lines[0].replace("rank 0 of 2", ""),
        lines[1].replace("rank 1 of 2", "")
    );
}

#[test]
fn ranks_that_agree_train_the_same_weights_with_check_mode_on() {
    let off = TempDir::new("dp-check-off");
    let (summary, expected) = train(&off, 2, &manifest(SGD, 32, 1, MAY_STOP));
    assert!(summary["data_parallel"]["checked_collectives"].is_null());
    let on = TempDir::new("dp-check-on");
    let text = manifest(SGD, 32, 1, MAY_STOP).replace(
        "process_group_timeout = 60",
        "process_group_timeout = 60\ncheck_collectives = true",
    );
    let (summary, weights) = train(&on, 2, &text);
    assert_eq!(max_difference(&expected, &weights), 0.0);
    // 20 steps, each with its gradient all-reduce and the agreement after it, were compared.
    let checked = summary["data_parallel"]["checked_collectives"].as_u64();
    assert!(checked.is_some_and(|n| n > 40), "{summary}");
}
