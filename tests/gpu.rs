//! GPU checks: what only shows on a CUDA device (asynchronous copies, the float16 loss scaler,
//! fused kernels on device tensors). Built with the `cuda-tests` feature and run where a GPU is:
//! `cargo test -p fe-host --features cuda-tests --test tests gpu::`. Without a GPU they fail
//! at their first line rather than pass vacuously.

use std::collections::BTreeSet;

use fe_host::network::{Keys, Network};
use fe_plugin_api::Mode;
use tch::{Device, Tensor};

use crate::network::{batch, build_on, data, random, step, weights, LINEAR};
use crate::util::OutputWithin;

fn cuda() -> Device {
    assert!(
        tch::Cuda::is_available(),
        "the cuda-tests feature needs a CUDA device"
    );
    Device::Cuda(0)
}

fn train(
    network: &mut Network,
    keys: &Keys,
    values: &[(&str, Tensor)],
    wanted: &[&str],
    call: u64,
) -> fe_host::network::Batch {
    let mut b = batch(keys, values);
    let desired: BTreeSet<_> = wanted.iter().map(|k| keys.get(k).unwrap()).collect();
    let plan = network.plan(Mode::Train, 1, "", &desired).unwrap();
    network
        .run_step(&plan, &mut b, &step(Mode::Train, call))
        .unwrap();
    b
}

fn on_cpu(tensors: &[Tensor]) -> Vec<Tensor> {
    tensors.iter().map(|t| t.to_device(Device::Cpu)).collect()
}

#[test]
fn outputs_read_on_the_host_right_after_the_step_hold_what_the_device_computed() {
    // The step's outputs come back with asynchronous copies into pinned memory; read at once
    // without a wait they can hold what the memory held before. Large outputs, read at once,
    // every step, against the forward pass recomputed on the CPU from the weights it used.
    let device = cuda();
    let update = "\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\n";
    let (mut network, keys) = build_on(&format!("{LINEAR}{update}"), device).unwrap();
    for call in 1..=20u64 {
        let x = random(&[1 << 16, 3], call);
        let y = random(&[1 << 16, 2], 100 + call);
        let before = on_cpu(&weights(&network));
        let (bias, weight) = (&before[0], &before[1]);
        let out = train(
            &mut network,
            &keys,
            &[("x", x.shallow_clone()), ("y", y.shallow_clone())],
            &["y_pred", "mse"],
            call,
        );
        let y_pred = out.get(keys.get("y_pred").unwrap()).unwrap();
        assert_eq!(y_pred.device(), Device::Cpu);
        let expected = x.matmul(&weight.tr()) + bias;
        assert!(
            y_pred.allclose(&expected, 1e-4, 1e-4, false),
            "step {call}: the host read something else than the device computed"
        );
        let mse = out.get(keys.get("mse").unwrap()).unwrap().double_value(&[]);
        let expected_mse = (expected - &y)
            .square()
            .mean(tch::Kind::Double)
            .double_value(&[]);
        assert!(
            (mse - expected_mse).abs() < 1e-4 * expected_mse.max(1.0),
            "{mse} vs {expected_mse}"
        );
    }
}

#[test]
fn fused_adam_on_the_device_matches_the_unfused_path() {
    let device = cuda();
    let run = |optimizer: &str| {
        let text = format!(
            "{}\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\n",
            LINEAR.replace("{ type = \"sgd\", lr = 0.1 }", optimizer)
        );
        let (mut network, keys) = build_on(&text, device).unwrap();
        for call in 1..=10u64 {
            let (x, y) = data(call as i64);
            train(&mut network, &keys, &[("x", x), ("y", y)], &[], call);
        }
        let step = network.models[0].optimizer().unwrap().hyper_state()["step"].as_u64();
        (on_cpu(&weights(&network)), step)
    };
    let (fused, fused_steps) = run("{ type = \"adamw\", lr = 0.01, fused = true }");
    let (unfused, unfused_steps) = run("{ type = \"adamw\", lr = 0.01, fused = false }");
    assert_eq!((fused_steps, unfused_steps), (Some(10), Some(10)));
    for (a, b) in fused.iter().zip(&unfused) {
        assert!(a.allclose(b, 1e-5, 1e-6, false), "{a:?} vs {b:?}");
    }
}

#[test]
fn float16_overflow_under_merge_grad_skips_the_merged_step_and_backs_off() {
    let device = cuda();
    let text = format!(
        "{}\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\nmerge_grad = 2\n",
        LINEAR.replace("classes = 2\n", "classes = 2\nmixed_precision = true\n")
    );
    let (mut network, keys) = build_on(&text, device).unwrap();
    let scale = network.models[0]
        .scaler
        .as_ref()
        .expect("float16 on CUDA has a scaler")
        .scale;
    let start = on_cpu(&weights(&network));
    let (x, y) = data(1);
    train(&mut network, &keys, &[("x", x), ("y", y)], &[], 1);
    let (x, y) = data(2);
    train(&mut network, &keys, &[("x", x * 1e30), ("y", y)], &[], 2);
    let now = on_cpu(&weights(&network));
    assert!(now.iter().zip(&start).all(|(a, b)| a.equal(b)));
    let scaler = network.models[0]
        .scaler
        .as_ref()
        .unwrap()
        .snapshot()
        .unwrap();
    assert_eq!((scaler.scale, scaler.skipped_steps), (scale / 2.0, 1));
}

/// The LeNet data-parallel manifest (`crate::dist::manifest`) on CUDA, deterministic.
fn gpu_manifest(epochs: u32, extra: &str) -> String {
    crate::dist::manifest(crate::dist::SGD, 32, epochs, extra).replacen(
        "[run]\n",
        "[run]\ndevice = \"cuda\"\ndeterministic = true\n",
        1,
    )
}

/// Data parallel over NCCL on every GPU this machine has, a rank each (a single GPU makes a
/// group of one, which still joins NCCL, broadcasts rank 0's weights and averages every
/// update's gradients through it): the ranks' 32 / GPUs samples a step end with the weights of
/// one process × 32 on cuda:0, and the same evaluation accuracy.
#[test]
fn a_rank_per_gpu_over_nccl_ends_with_the_weights_of_one_gpu_process() {
    cuda();
    let gpus = usize::try_from(tch::Cuda::device_count()).unwrap();
    let text = gpu_manifest(1, "");
    let one = crate::util::TempDir::new("gpu-dp-one");
    let ranks = crate::util::TempDir::new("gpu-dp-ranks");
    let (single, single_weights) = crate::dist::train(&one, 1, &text);
    let (parallel, parallel_weights) = crate::dist::train_ranks(&ranks, gpus, &text);
    let difference = crate::dist::max_difference(&single_weights, &parallel_weights);
    assert!(
        difference <= 1e-4,
        "{gpus} ranks: weights differ by {difference}"
    );
    assert_eq!(
        crate::dist::last(&parallel, "eval", "accuracy"),
        crate::dist::last(&single, "eval", "accuracy")
    );
    // Every update's buckets went through NCCL during its backward pass; a lone rank trains
    // without a group (an_nccl_group_of_one_... checks NCCL there).
    let averages = if gpus > 1 {
        serde_json::json!({ "during_backward": 20, "after_backward": 0 })
    } else {
        serde_json::Value::Null
    };
    assert_eq!(parallel["data_parallel"]["gradient_averages"], averages);
}

/// An NCCL group of one in this process, the whole data-parallel path on it (the join, rank 0's
/// weights broadcast, every update's gradient buckets averaged during backward): it trains
/// exactly as a lone process does. Runs on any GPU machine; fe-host itself trains a lone rank
/// without a group, so this is what checks the NCCL path where only one GPU is.
#[test]
fn an_nccl_group_of_one_trains_as_a_lone_gpu_process_does() {
    use fe_host::dist::{membership, ProcessGroup, SharedGroup};
    use fe_host::estimator::{Estimator, RunOptions};

    let device = cuda();
    fe_host::runtime::set_determinism(true, false).unwrap();
    let dir = crate::util::TempDir::new("gpu-nccl-one");
    let path = dir.write(
        "m.toml",
        &crate::dist::manifest(crate::dist::SGD, 32, 1, ""),
    );
    let manifest = fe_host::manifest::Manifest::load(&path).unwrap();
    let registry = crate::network::registry();
    let build = || {
        let options = RunOptions {
            quiet: true,
            out: Box::new(std::io::sink()),
            progress: false,
        };
        Estimator::build(&manifest, &registry, device, options).unwrap()
    };
    let (mut alone, mut grouped) = (build(), build());
    {
        // The same start, whatever else drew from libtorch's generator in between.
        let _no_grad = tch::no_grad_guard();
        for (from, to) in alone.network.models[0]
            .params
            .iter()
            .zip(&grouped.network.models[0].params)
        {
            to.shallow_clone().copy_(from);
        }
    }
    let port = fe_host::dist::free_port().unwrap().to_string();
    let vars = [
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", &port),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .into_iter()
    .collect();
    let membership = membership(&vars).unwrap().unwrap();
    let group = ProcessGroup::join(&membership, std::time::Duration::from_secs(60), Some(0))
        .expect("an NCCL group of one on cuda:0");
    grouped.pipeline.shard(0, 1, &manifest).unwrap();
    grouped.join(SharedGroup::new(group), &manifest).unwrap();
    alone.fit().unwrap();
    grouped.fit().unwrap();
    let difference = alone.network.models[0]
        .params
        .iter()
        .zip(&grouped.network.models[0].params)
        .map(|(a, b)| (a - b).abs().max().double_value(&[]))
        .fold(0.0, f64::max);
    assert!(difference <= 1e-6, "weights differ by {difference}");
    let averages = grouped.network.group.as_ref().unwrap().gradient_averages();
    assert_eq!((averages.during_backward, averages.after_backward), (20, 0));
}

/// NCCL needs a GPU per rank: with one rank more than the machine has GPUs, the rank left
/// without one (on a one-GPU machine, every rank) is refused before joining (exit 2), saying how
/// many ranks fit; no rank trains.
#[test]
fn more_ranks_than_gpus_are_refused_before_joining() {
    cuda();
    let gpus = usize::try_from(tch::Cuda::device_count()).unwrap();
    let dir = crate::util::TempDir::new("gpu-dp-too-many");
    let path = dir.write("m.toml", &gpu_manifest(1, ""));
    let path = path.to_string_lossy();
    let runs = crate::dist::wait_all(crate::dist::spawn_ranks(
        &dir,
        gpus + 1,
        &["run", &path],
        &[],
    ));
    let expected = if gpus == 1 {
        "the 2 ranks on this machine would share its one GPU, and NCCL needs a GPU per rank"
            .to_owned()
    } else {
        format!("start at most {gpus} ranks per machine")
    };
    for (rank, run) in runs.iter().enumerate() {
        if gpus == 1 || rank == gpus {
            assert_eq!(run.code, 2, "rank {rank}: {}\n{}", run.stdout, run.stderr);
            crate::assert_contains!(run.stderr, expected);
        } else {
            assert_ne!(run.code, 0, "rank {rank} trained without rank {gpus}");
        }
    }
}

/// Exact resume on the GPU: CUDA's random state, the optimizer's device tensors and the data
/// cursor come back from a checkpoint, so one epoch, then a resume to the second, ends bit for
/// bit where two epochs straight do.
#[test]
fn a_resumed_gpu_run_ends_bit_for_bit_where_an_uninterrupted_one_does() {
    cuda();
    let checkpoints = "\n[checkpoint]\ndir = \"ckpts\"\nevery_epochs = 1\n";
    let straight = crate::util::TempDir::new("gpu-straight");
    let (_, straight_weights) = crate::dist::train(&straight, 1, &gpu_manifest(2, checkpoints));
    let resumed = crate::util::TempDir::new("gpu-resumed");
    let path = resumed.write("m.toml", &gpu_manifest(2, checkpoints));
    let path = path.to_string_lossy();
    for args in [
        vec!["run", &*path, "--epochs", "1"],
        vec![
            "run",
            &*path,
            "--resume",
            "--summary",
            "summary.json",
            "--save-weights",
            "weights",
        ],
    ] {
        let out: crate::util::Run = crate::util::fe_host()
            .current_dir(resumed.path())
            .args(&args)
            .output_within();
        assert_eq!(out.code, 0, "{args:?}\n{}\n{}", out.stdout, out.stderr);
    }
    let (_, resumed_weights) = crate::dist::train_result(&resumed);
    assert_eq!(
        crate::dist::max_difference(&straight_weights, &resumed_weights),
        0.0,
        "the resumed GPU run ends elsewhere"
    );
}

#[test]
fn float16_with_fused_adam_skips_an_overflow_on_the_device_without_reading_the_flag() {
    // The fused path decides on the device: the host's copy of the scale stays as it was
    // (nothing read it), the device's state has backed off, and the skipped step is neither
    // applied nor counted.
    let device = cuda();
    let text = format!(
        "{}\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\n",
        LINEAR
            .replace("classes = 2\n", "classes = 2\nmixed_precision = true\n")
            .replace(
                "{ type = \"sgd\", lr = 0.1 }",
                "{ type = \"adam\", lr = 0.01 }"
            )
    );
    let (mut network, keys) = build_on(&text, device).unwrap();
    let scale = network.models[0].scaler.as_ref().unwrap().scale;
    let start = on_cpu(&weights(&network));
    let (x, y) = data(2);
    train(&mut network, &keys, &[("x", x * 1e30), ("y", y)], &[], 1);
    let now = on_cpu(&weights(&network));
    assert!(now.iter().zip(&start).all(|(a, b)| a.equal(b)));
    let scaler = network.models[0].scaler.as_ref().unwrap();
    assert_eq!(scaler.scale, scale, "the host's copy was not read back");
    let read = scaler.snapshot().unwrap();
    assert_eq!((read.scale, read.skipped_steps), (scale / 2.0, 1));
    // A step that cannot overflow in float16, even at the backed-off scale.
    let (x, y) = data(3);
    train(
        &mut network,
        &keys,
        &[("x", x * 1e-3), ("y", y * 1e-3)],
        &[],
        2,
    );
    let read = network.models[0]
        .scaler
        .as_ref()
        .unwrap()
        .snapshot()
        .unwrap();
    assert_eq!(read.skipped_steps, 1, "the second step overflowed too");
    let steps = network.models[0].optimizer().unwrap().hyper_state()["step"].as_u64();
    assert_eq!(steps, Some(1));
    assert!(on_cpu(&weights(&network))
        .iter()
        .zip(&start)
        .any(|(a, b)| !a.equal(b)));
}

/// The zoo's LSTM on cuDNN trains from one flat weight buffer: with its weights allocated apart,
/// cuDNN copies them into one at every call and libtorch warns each time ("not part of single
/// contiguous chunk of memory"). Also under float16 mixed precision.
#[test]
fn the_zoo_lstm_on_cuda_runs_from_one_flat_weight_buffer() {
    cuda();
    let dir = crate::util::TempDir::new("gpu-lstm");
    let tokens = dir.path().join("tokens");
    let out: crate::util::Run = crate::util::fe_host()
        .args(["datagen", "tokens", "--out", &tokens.to_string_lossy()])
        .args(["--train", "256", "--eval", "64", "--test", "0"])
        .output_within();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let example = std::fs::read_to_string(crate::util::root().join("examples/lstm.toml")).unwrap();
    let text = example
        .replace("../data/tokens", &tokens.to_string_lossy())
        .replace("../runs/lstm", "runs");
    let path = dir.write("lstm.toml", &text);
    for precision in ["false", "true"] {
        let out: crate::util::Run = crate::util::fe_host()
            .current_dir(dir.path())
            .args([
                "run",
                &*path.to_string_lossy(),
                "--device",
                "cuda",
                "--epochs",
                "1",
            ])
            .args(["--set", &format!("models.lstm.mixed_precision={precision}")])
            .output_within();
        assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
        assert!(
            !out.stderr.contains("contiguous chunk"),
            "mixed_precision = {precision}:\n{}",
            out.stderr
        );
    }
}
