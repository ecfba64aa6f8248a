//! Two real processes (this test binary run again as rank 0 and rank 1) on Gloo over loopback.

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use tch::{Kind, Tensor};

use super::*;

/// Set in the children: which rank this process plays.
const ROLE: &str = "FE_DIST_TEST_ROLE";

/// Runs the test `name` as `world` ranks of a fresh group and returns their outputs; or, in a
/// child, returns `None` so the test body plays its rank.
fn spawn_ranks(
    name: &str,
    world: usize,
    extra: &[(&str, &str)],
) -> Option<Vec<std::process::Output>> {
    if std::env::var_os(ROLE).is_some() {
        return None;
    }
    let exe = std::env::current_exe().unwrap();
    let port = free_port().unwrap().to_string();
    let children: Vec<_> = (0..world)
        .map(|rank| {
            let mut command = Command::new(&exe);
            command
                .args([name, "--exact", "--nocapture", "--test-threads", "1"])
                .env(ROLE, "rank")
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("LOCAL_WORLD_SIZE", world.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port);
            for (key, value) in extra {
                command.env(key, value);
            }
            command
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    Some(
        children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect(),
    )
}

fn join(timeout: Duration) -> ProcessGroup {
    let vars: HashMap<String, String> = std::env::vars().collect();
    let membership = membership(&vars).unwrap().unwrap();
    ProcessGroup::join(&membership, timeout, None).unwrap()
}

fn assert_all_passed(outputs: &[std::process::Output]) {
    for (rank, output) in outputs.iter().enumerate() {
        assert!(
            output.status.success(),
            "rank {rank} failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn two_ranks_all_reduce_broadcast_gather_and_barrier() {
    if let Some(outputs) = spawn_ranks(
        "dist::tests::two_ranks_all_reduce_broadcast_gather_and_barrier",
        2,
        &[],
    ) {
        return assert_all_passed(&outputs);
    }
    let mut group = join(Duration::from_secs(60));
    let rank = group.rank() as f64;
    assert_eq!(group.world(), 2);

    // Sum over two dtypes and shapes (two buckets); each rank contributes rank + 1.
    let floats = [
        Tensor::full([2, 3], rank + 1.0, (Kind::Float, tch::Device::Cpu)),
        Tensor::full([4], 10.0 * (rank + 1.0), (Kind::Float, tch::Device::Cpu)),
    ];
    let longs = [Tensor::full(
        [3],
        (rank as i64) + 1,
        (Kind::Int64, tch::Device::Cpu),
    )];
    group.all_reduce(&floats, ReduceOp::Sum).unwrap();
    group.all_reduce(&longs, ReduceOp::Sum).unwrap();
    assert_eq!(
        floats[0],
        Tensor::full([2, 3], 3.0, (Kind::Float, tch::Device::Cpu))
    );
    assert_eq!(
        floats[1],
        Tensor::full([4], 30.0, (Kind::Float, tch::Device::Cpu))
    );
    assert_eq!(
        longs[0],
        Tensor::full([3], 3i64, (Kind::Int64, tch::Device::Cpu))
    );

    let flag = [Tensor::from_slice(&[rank as f32])];
    group.all_reduce(&flag, ReduceOp::Max).unwrap();
    assert_eq!(flag[0].double_value(&[0]), 1.0);

    // Rank 0's values reach rank 1, including a non-contiguous view.
    let weights = Tensor::arange(6, (Kind::Float, tch::Device::Cpu)).reshape([2, 3]) * (rank + 1.0);
    let transposed = weights.tr();
    group.broadcast(&[transposed.shallow_clone()], 0).unwrap();
    assert_eq!(
        weights,
        Tensor::arange(6, (Kind::Float, tch::Device::Cpu)).reshape([2, 3])
    );

    let gathered = group
        .all_gather(&Tensor::from_slice(&[rank, rank * 2.0]))
        .unwrap();
    assert_eq!(gathered, Tensor::from_slice2(&[[0.0, 0.0], [1.0, 2.0]]));

    group.barrier(false).unwrap();
    group.barrier(true).unwrap();
}

#[test]
fn a_lost_rank_is_an_error_within_the_timeout_not_a_hang() {
    if let Some(outputs) = spawn_ranks(
        "dist::tests::a_lost_rank_is_an_error_within_the_timeout_not_a_hang",
        2,
        &[],
    ) {
        return assert_all_passed(&outputs);
    }
    let mut group = join(Duration::from_secs(5));
    if group.rank() == 1 {
        group.barrier(false).unwrap();
        // Leave without a word: what a killed rank looks like to the others.
        std::process::exit(0);
    }
    group.barrier(false).unwrap();
    let started = Instant::now();
    let error = group
        .all_reduce(
            &[Tensor::ones([4], (Kind::Float, tch::Device::Cpu))],
            ReduceOp::Sum,
        )
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        error.starts_with("rank 0 of 2: all-reduce failed: "),
        "{error}"
    );
}

#[test]
fn a_missing_peer_fails_the_join_within_the_timeout() {
    // Only rank 0 of 2 ever starts: the join must give up, saying so, not wait forever.
    let port = free_port().unwrap();
    let membership = Membership {
        rank: 0,
        world: 2,
        local_rank: 0,
        local_world: 2,
        master_addr: "127.0.0.1".into(),
        master_port: port,
        hosts_store: true,
        store_prefix: "/test".into(),
        gloo_device: GlooDevice::Address("127.0.0.1".into()),
        cluster: crate::dist::Cluster::Torchrun,
    };
    let started = Instant::now();
    let error = ProcessGroup::join(&membership, Duration::from_secs(2), None)
        .err()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        error.starts_with("rank 0 of 2: cannot join the process group at 127.0.0.1:"),
        "{error}"
    );
}

#[test]
fn the_gradient_all_reduce_carries_the_ranks_overflow_and_signals() {
    if let Some(outputs) = spawn_ranks(
        "dist::tests::the_gradient_all_reduce_carries_the_ranks_overflow_and_signals",
        2,
        &[],
    ) {
        return assert_all_passed(&outputs);
    }
    let group = SharedGroup::new(join(Duration::from_secs(60)));
    let rank = group.rank();
    let params = [
        Tensor::zeros([2, 2], (Kind::Float, tch::Device::Cpu)),
        Tensor::zeros([3], (Kind::Float, tch::Device::Cpu)),
    ];
    // Rank 1 never computed the second gradient (an unused parameter): it counts as zeros.
    let grads = [
        Tensor::full([2, 2], (rank + 1) as f64, (Kind::Float, tch::Device::Cpu)),
        if rank == 0 {
            Tensor::full([3], 4.0, (Kind::Float, tch::Device::Cpu))
        } else {
            Tensor::new()
        },
    ];

    // Nothing averaged yet: nothing carried.
    assert_eq!(group.take_carried_signal(), None);
    let quiet = group.average_gradients(&params, &grads, false).unwrap();
    assert_eq!(
        quiet.grads[0],
        Tensor::full([2, 2], 1.5, (Kind::Float, tch::Device::Cpu))
    );
    assert_eq!(
        quiet.grads[1],
        Tensor::full([3], 2.0, (Kind::Float, tch::Device::Cpu))
    );
    assert!(!quiet.overflow);
    assert_eq!(group.take_carried_signal(), Some(None));
    assert_eq!(group.take_carried_signal(), None, "a take clears it");

    // Rank 0 overflowed; rank 1 received SIGTERM: both ranks learn both.
    if rank == 1 {
        crate::stop::install();
        // SAFETY: raising a signal whose handler only sets an atomic and writes a line.
        unsafe { libc::raise(libc::SIGTERM) };
    }
    let loud = group.average_gradients(&params, &grads, rank == 0).unwrap();
    assert!(loud.overflow);
    assert_eq!(
        group.take_carried_signal(),
        Some(Some(crate::stop::Signal::Terminate))
    );
    assert_eq!(
        loud.grads.len(),
        2,
        "the flags are not returned as a gradient"
    );
}

/// What averaging after backward gives for `grads` (one per parameter of `params`, undefined
/// where backward did not reach it) over the 2 ranks: the reference for the hooked averages.
fn averaged_after_backward(
    group: &mut ProcessGroup,
    grads: &[Tensor],
    params: &[Tensor],
) -> Vec<Tensor> {
    let sums: Vec<Tensor> = grads
        .iter()
        .zip(params)
        .map(|(g, p)| {
            if g.defined() {
                g.copy()
            } else {
                p.zeros_like()
            }
        })
        .collect();
    group.all_reduce(&sums, ReduceOp::Sum).unwrap();
    sums.iter().map(|g| g / 2.0).collect()
}

#[test]
fn gradients_averaged_during_backward_equal_those_averaged_after_it() {
    if let Some(outputs) = spawn_ranks(
        "dist::tests::gradients_averaged_during_backward_equal_those_averaged_after_it",
        2,
        &[],
    ) {
        return assert_all_passed(&outputs);
    }
    let mut group = join(Duration::from_secs(60));
    let rank = group.rank() as f64;
    let cpu = (Kind::Float, tch::Device::Cpu);
    // Backward reaches them last to first, so the buckets go out as 3, 2, 1 (while backward
    // runs, on rank 0), then 0, which is held to the end anyway.
    let params = [
        // Used by no rank.
        Tensor::zeros([5], cpu).set_requires_grad(true),
        Tensor::arange(12, cpu)
            .reshape([4, 3])
            .set_requires_grad(true),
        Tensor::ones([3], cpu).set_requires_grad(true),
        Tensor::full([2, 2], 0.5, cpu).set_requires_grad(true),
    ];
    let x = Tensor::arange(8, cpu).reshape([2, 4]) * (rank + 1.0);
    // Rank 1 leaves the last parameter out of its loss: it counts as zeros there, and rank 1
    // sends the first bucket only once backward has ended.
    let loss = || {
        let mut loss = (x.matmul(&params[1]) + &params[2])
            .square()
            .sum(Kind::Float);
        if rank == 0.0 {
            loss += (&params[3] * &params[3] * 3.0).sum(Kind::Float);
        }
        loss
    };
    let backward = || Tensor::run_backward(&[loss()], &params, false, false);

    // 16-byte buckets: one per parameter, so order and hold-back both matter.
    let mut overlap = Overlap::new(&group, &params, 16, 16).unwrap();
    assert_eq!(overlap.buckets(), Ok(4));

    // Unarmed, the hooks change nothing: the plain gradients, averaged after backward.
    let expected = averaged_after_backward(&mut group, &backward(), &params);

    let extra = [rank as f32, 1.0, 0.0];
    let (averaged, sums, _) = overlap
        .around(&mut group, || Ok::<_, String>(backward()), extra)
        .unwrap();
    assert_eq!(sums, [1.0, 2.0, 0.0]);
    assert_eq!(averaged.len(), params.len());
    for (i, (got, want)) in averaged.iter().zip(&expected).enumerate() {
        assert_eq!(got.size(), params[i].size(), "parameter {i}");
        assert!(
            got.allclose(want, 1e-6, 1e-6, false),
            "parameter {i}: {got:?} vs {want:?}"
        );
    }
    assert_eq!(averaged[0], Tensor::zeros([5], cpu));

    // A failed backward disarms: the next one passes through untouched again.
    let failed = overlap.around(&mut group, || Err::<(), _>("boom".to_owned()), extra);
    assert_eq!(failed.err().as_deref(), Some("boom"));
    let plain = backward();
    assert!(!plain[0].defined());
    drop(overlap);
    let after_drop = backward();
    assert!(after_drop[1].allclose(&plain[1], 0.0, 0.0, false));
}

#[test]
fn buckets_follow_rank_zeros_order_of_arrival_after_the_first_backward() {
    if let Some(outputs) = spawn_ranks(
        "dist::tests::buckets_follow_rank_zeros_order_of_arrival_after_the_first_backward",
        2,
        &[],
    ) {
        return assert_all_passed(&outputs);
    }
    let mut group = join(Duration::from_secs(60));
    let rank = group.rank();
    let cpu = (Kind::Float, tch::Device::Cpu);
    // Four floats each: with 16-byte buckets every parameter is a bucket of its own.
    let params: Vec<Tensor> = (0..4)
        .map(|i| Tensor::full([4], 1.0 + i as f64, cpu).set_requires_grad(true))
        .collect();
    let x = Tensor::full([4], 0.5 + rank as f64, cpu);
    // A chain: backward reaches the parameter applied last first. Rank 0 applies 3, 2, 1, so
    // its gradients arrive as 1, 2, 3 — the declared order, not the reverse one the first
    // cut assumes; rank 1 applies 1, 2, 3 (gradients 3, 2, 1), but must take rank 0's order.
    // Parameter 0 is used by no rank.
    let chain: [usize; 3] = if rank == 0 { [3, 2, 1] } else { [1, 2, 3] };
    let loss = || {
        let y = chain.iter().fold(x.shallow_clone(), |y, &i| y * &params[i]);
        y.sum(Kind::Float)
    };
    let backward = || Tensor::run_backward(&[loss()], &params, false, false);
    // The plain gradients, averaged after backward (no hooks yet).
    let want = averaged_after_backward(&mut group, &backward(), &params);

    let mut overlap = Overlap::new(&group, &params, 16, 16).unwrap();
    let single = |order: &[usize]| order.iter().map(|&i| vec![i]).collect::<Vec<_>>();
    assert_eq!(
        overlap.layout(),
        Ok(single(&[3, 2, 1, 0])),
        "first cut: reverse"
    );
    for step in 0..3 {
        let (averaged, _, _) = overlap
            .around(&mut group, || Ok::<_, String>(backward()), [0.0; 3])
            .unwrap();
        for (i, (got, want)) in averaged.iter().zip(&want).enumerate() {
            assert!(
                got.allclose(want, 1e-6, 1e-6, false),
                "step {step}, parameter {i}: {got:?} vs {want:?}"
            );
        }
        // Rebuilt once, after the first backward, in rank 0's order of arrival; the unused
        // parameter last. The same on both ranks.
        assert_eq!(
            overlap.layout(),
            Ok(single(&[1, 2, 3, 0])),
            "rank {rank}, after step {step}"
        );
    }
}

#[test]
fn a_failed_join_is_said_in_ranks() {
    let timeout =
        super::explain_join_failure("wait timeout after 3000ms, keys: //worker/attempt_0/0/1");
    assert!(
        timeout.starts_with(
            "rank 1 did not join in time (the first rank still awaited; c10d: wait timeout"
        ),
        "{timeout}"
    );
    let hung_up = super::explain_join_failure(
        "Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?",
    );
    assert!(
        hung_up.starts_with("the rendezvous store hung up"),
        "{hung_up}"
    );
    assert_eq!(
        super::explain_join_failure("anything else"),
        "anything else"
    );
}

#[test]
fn the_roll_call_comes_out_of_the_timeout() {
    use std::time::Duration;
    assert_eq!(
        super::census_wait(Duration::from_secs(1800)),
        Duration::from_secs(5)
    );
    assert_eq!(
        super::census_wait(Duration::from_secs(8)),
        Duration::from_secs(2)
    );
}

#[test]
fn an_absent_store_is_reported_within_the_wait() {
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = super::wait_for_store("127.0.0.1", port, std::time::Duration::from_millis(300))
        .unwrap_err();
    assert!(
        error.starts_with("nothing accepted a connection there within 0.3 s"),
        "{error}"
    );
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    assert!(super::wait_for_store("127.0.0.1", port, std::time::Duration::from_secs(5)).is_ok());
}

#[test]
fn failed_collectives_are_told_from_other_errors_by_their_message() {
    assert!(super::is_collective_failure(
        "rank 1 of 2: all-gather failed: rank 0, which hosts the rendezvous store, is likely lost"
    ));
    assert!(super::is_collective_failure(
        "rank 0 of 4: all-reduce failed: ranks 2 and 3 lost (no answer within 5.0 s of the failure); x"
    ));
    // A rank that left its own failure, and check mode's mismatch: the ranks together.
    assert!(super::is_collective_failure(
        "rank 0 of 2: stopped because rank 1 failed (x failed in forward: y)"
    ));
    assert!(super::is_collective_failure(
        "rank 1 of 2: collective mismatch at step 5: rank 0 at a.rs:1 (...) but rank 1 at b.rs:2 (...)"
    ));
    for other in [
        // The failing rank's own line is its own failure, not the group's.
        "rank 1 of 2 failed: x failed in forward: y",
        "Accuracy: rank 1 of 2 is not a number",
        "rank 1 of 2: nothing failed here",
        "rank one of 2: all-gather failed: x",
        "cannot save the state of Accuracy (traces[0]): rank 1 of 2: all-gather failed: x",
    ] {
        assert!(!super::is_collective_failure(other), "{other}");
    }
}
