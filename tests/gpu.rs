//! GPU checks: what only shows on a CUDA device (asynchronous copies, the float16 loss scaler,
//! fused kernels on device tensors). Built with the `cuda-tests` feature and run where a GPU is:
//! `cargo test -p fe-host --features cuda-tests --test tests gpu::`. Without a GPU they fail
//! at their first line rather than pass vacuously.

use std::collections::BTreeSet;

use fe_host::network::{Keys, Network};
use fe_plugin_api::Mode;
use tch::{Device, Tensor};

use crate::network::{batch, build_on, data, random, step, weights, LINEAR};

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

/// Data parallel over NCCL (needs two GPUs): 2 ranks × 16 on cuda:0 and cuda:1, their gradients
/// all-reduced during backward, end with the weights of one process × 32 on cuda:0, and the
/// same evaluation accuracy.
#[test]
fn two_gpu_ranks_over_nccl_end_with_the_weights_of_one_gpu_process() {
    cuda();
    assert!(
        tch::Cuda::device_count() >= 2,
        "data parallel over NCCL needs two GPUs"
    );
    let text = crate::dist::manifest(crate::dist::SGD, 32, 1, "").replacen(
        "[run]\n",
        "[run]\ndevice = \"cuda\"\ndeterministic = true\n",
        1,
    );
    let one = crate::util::TempDir::new("gpu-dp-one");
    let two = crate::util::TempDir::new("gpu-dp-two");
    let (single, single_weights) = crate::dist::train(&one, 1, &text);
    let (parallel, parallel_weights) = crate::dist::train(&two, 2, &text);
    let difference = crate::dist::max_difference(&single_weights, &parallel_weights);
    assert!(difference <= 1e-4, "weights differ by {difference}");
    assert_eq!(
        crate::dist::last(&parallel, "eval", "accuracy"),
        crate::dist::last(&single, "eval", "accuracy")
    );
    // Every update's buckets went through NCCL during its backward pass.
    assert_eq!(
        parallel["data_parallel"]["gradient_averages"],
        serde_json::json!({ "during_backward": 20, "after_backward": 0 })
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
    let (x, y) = data(3);
    train(&mut network, &keys, &[("x", x), ("y", y)], &[], 2);
    let steps = network.models[0].optimizer().unwrap().hyper_state()["step"].as_u64();
    assert_eq!(steps, Some(1));
    assert!(on_cpu(&weights(&network))
        .iter()
        .zip(&start)
        .any(|(a, b)| !a.equal(b)));
}
