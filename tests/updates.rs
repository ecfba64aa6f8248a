//! UpdateOp semantics that decide what the weights become (FastEstimator's UpdateOp and
//! TorchNetwork): the refusal of a non-deferred update another model's backward still needs,
//! one step per model for deferred updates, mixed-precision overflow under `merge_grad`, and
//! gradients given per parameter. Driven through the library with the real plugins.

use std::collections::BTreeSet;

use fe_host::network::precision::GradScaler;
use fe_host::network::Network;
use fe_plugin_api::Mode;
use tch::Tensor;

use crate::network::{batch, build, data, random, step, weights, LINEAR};

/// Runs one train step of `network` on `values`.
pub(crate) fn train_step(
    network: &mut Network,
    keys: &fe_host::network::Keys,
    values: &[(&str, Tensor)],
    call: u64,
) -> Result<(), String> {
    let mut b = batch(keys, values);
    let plan = network.plan(Mode::Train, 1, "", &BTreeSet::new())?;
    network
        .run_step(&plan, &mut b, &step(Mode::Train, call))
        .map_err(|e| e.to_string())
}

fn flat(tensors: &[Tensor]) -> Tensor {
    Tensor::cat(
        &tensors.iter().map(|t| t.flatten(0, -1)).collect::<Vec<_>>(),
        0,
    )
}

fn optimizer_step_count(network: &Network) -> u64 {
    network.models[0].optimizer().unwrap().hyper_state()["step"]
        .as_u64()
        .unwrap()
}

const OPTIMIZERS: [&str; 9] = [
    "{ type = \"sgd\", lr = 0.1 }",
    "{ type = \"sgd\", lr = 0.1, momentum = 0.9 }",
    "{ type = \"rmsprop\", lr = 0.01 }",
    "{ type = \"adam\", lr = 0.01 }",
    "{ type = \"adam\", lr = 0.01, fused = true }",
    "{ type = \"adam\", lr = 0.01, fused = false }",
    "{ type = \"adamw\", lr = 0.01, fused = true }",
    "{ type = \"adamw\", lr = 0.01, fused = false }",
    "{ type = \"adam\", lr = 0.01, amsgrad = true, weight_decay = 0.1 }",
];

#[test]
fn a_non_deferred_update_that_a_later_backward_needs_is_refused_for_every_optimizer() {
    // `other` reads `lin`'s output. Updating `other` in place first changes weights that the
    // backward pass of `mse2` into `lin` goes through: FastEstimator refuses this ("consider
    // setting defer=True"); a silently stale gradient would be a wrong result.
    for optimizer in OPTIMIZERS {
        let text = format!(
            "{}\n[[models]]\nname = \"other\"\narchitecture = \"MLP\"\ninputs = 2\nhidden = []\nclasses = 2\noptimizer = {optimizer}\n\
             [[network.ops]]\nop = \"ModelOp\"\nmodel = \"other\"\ninputs = \"y_pred\"\noutputs = \"z\"\n\
             [[network.ops]]\nop = \"MeanSquaredError\"\ninputs = [\"z\", \"y\"]\noutputs = \"mse2\"\n\
             [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"other\"\nloss = \"mse2\"\n\
             [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse2\"\n\
             [[network.ops]]\nop = \"MeanSquaredError\"\ninputs = [\"z\", \"y\"]\noutputs = \"after\"\n",
            LINEAR.replace("{ type = \"sgd\", lr = 0.1 }", optimizer)
        );
        let (mut network, keys) = build(&text).unwrap();
        let (x, y) = data(11);
        let err = train_step(&mut network, &keys, &[("x", x), ("y", y)], 1)
            .expect_err(&format!("{optimizer}: the stale backward must be refused"));
        assert!(
            err.contains("when computing gradients for `lin`, some variables it relied on during the forward pass had been updated; consider setting defer = true"),
            "{optimizer}: {err}"
        );
    }
}

/// `lin` trained on two losses by two UpdateOps, both deferred.
fn two_deferred_updates(optimizer: &str) -> String {
    format!(
        "{}\n[[network.ops]]\nop = \"MeanSquaredError\"\ninputs = [\"y_pred\", \"y2\"]\noutputs = \"mse_b\"\n\
         [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\ndefer = true\n\
         [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse_b\"\ndefer = true\n",
        LINEAR.replace("{ type = \"sgd\", lr = 0.1 }", optimizer)
    )
}

/// The flat gradient of `loss` with respect to `lin` at its starting weights.
fn gradient_at_start(loss: &str, x: &Tensor, y: &Tensor, y2: &Tensor) -> Tensor {
    let text = format!(
        "{LINEAR}\n[[network.ops]]\nop = \"MeanSquaredError\"\ninputs = [\"y_pred\", \"y2\"]\noutputs = \"mse_b\"\n\
         [[network.ops]]\nop = \"GradientOp\"\nfinals = \"{loss}\"\nmodel = \"lin\"\noutputs = \"g\"\n"
    );
    let (mut probe, keys) = build(&text).unwrap();
    let g = keys.get("g").unwrap();
    let wanted: BTreeSet<_> = [g].into_iter().collect();
    let plan = probe.plan(Mode::Train, 1, "", &wanted).unwrap();
    let mut b = batch(
        &keys,
        &[
            ("x", x.shallow_clone()),
            ("y", y.shallow_clone()),
            ("y2", y2.shallow_clone()),
        ],
    );
    probe
        .run_step(&plan, &mut b, &step(Mode::Train, 1))
        .unwrap();
    b.get(g).unwrap().shallow_clone()
}

#[test]
fn deferred_updates_of_one_model_sum_their_gradients_and_step_once() {
    // FastEstimator's update_model accumulates into `.grad` and registers one deferred step
    // per model. With Adam, one step on g1 + g2 moves each weight by lr * sign(g1 + g2); two
    // steps would move it by about twice that.
    let (x, y) = data(21);
    let y2 = random(&[4, 2], 77);
    for adam in [
        "{ type = \"adam\", lr = 0.01 }",
        "{ type = \"adam\", lr = 0.01, fused = false }",
    ] {
        let (mut network, keys) = build(&two_deferred_updates(adam)).unwrap();
        let start = flat(&weights(&network));
        let values = [
            ("x", x.shallow_clone()),
            ("y", y.shallow_clone()),
            ("y2", y2.shallow_clone()),
        ];
        train_step(&mut network, &keys, &values, 1).unwrap();
        assert_eq!(optimizer_step_count(&network), 1, "{adam}: one step");
        let sum = gradient_at_start("mse", &x, &y, &y2) + gradient_at_start("mse_b", &x, &y, &y2);
        let expected = &start - (&sum / (sum.abs() + 1e-8)) * 0.01;
        let now = flat(&weights(&network));
        assert!(
            now.allclose(&expected, 1e-5, 1e-6, false),
            "{adam}: {now:?} vs {expected:?}"
        );
    }
}

/// `lin` with a loss scaler of scale 1 (what float16 mixed precision gives it on CUDA), so a
/// batch with huge inputs overflows on the CPU too.
fn scaled_linear(optimizer: &str, merge_grad: u32) -> (Network, fe_host::network::Keys) {
    let text = format!(
        "{}\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\nmerge_grad = {merge_grad}\n",
        LINEAR.replace("{ type = \"sgd\", lr = 0.1 }", optimizer)
    );
    let (mut network, keys) = build(&text).unwrap();
    network.models[0].scaler = Some(GradScaler::with_scale(1.0));
    (network, keys)
}

pub(crate) fn overflowing_batch() -> (Tensor, Tensor) {
    let (x, y) = data(31);
    (x * 1e30, y)
}

pub(crate) fn scale_of(network: &Network) -> (f64, u64) {
    let scaler = network.models[0]
        .scaler
        .as_ref()
        .unwrap()
        .snapshot()
        .unwrap();
    (scaler.scale, scaler.skipped_steps)
}

#[test]
fn an_overflowing_micro_step_skips_the_merged_step_and_backs_the_scale_off() {
    let (mut network, keys) = scaled_linear("{ type = \"sgd\", lr = 0.1 }", 2);
    let start = weights(&network);
    let (x, y) = data(30);
    train_step(&mut network, &keys, &[("x", x), ("y", y)], 1).unwrap();
    let (x, y) = overflowing_batch();
    train_step(&mut network, &keys, &[("x", x), ("y", y)], 2).unwrap();
    let now = weights(&network);
    assert!(
        now.iter().zip(&start).all(|(a, b)| a.equal(b)),
        "the merged step had an overflowing micro-step: it must be skipped"
    );
    assert_eq!(
        scale_of(&network),
        (0.5, 1),
        "backed off once, one step skipped"
    );
    // The next merged step starts clean and applies.
    for call in 3..=4 {
        let (x, y) = data(call as i64);
        train_step(&mut network, &keys, &[("x", x), ("y", y)], call).unwrap();
    }
    assert!(weights(&network)
        .iter()
        .zip(&start)
        .any(|(a, b)| !a.equal(b)));
    assert_eq!(scale_of(&network), (0.5, 1));
}

#[test]
fn when_every_micro_step_overflows_the_optimizer_does_not_move() {
    // AdamW decays the weights even for a zero gradient: a step that should have been skipped
    // but ran on an empty average would show.
    let (mut network, keys) = scaled_linear("{ type = \"adamw\", lr = 0.1 }", 3);
    let start = weights(&network);
    for call in 1..=3 {
        let (x, y) = overflowing_batch();
        train_step(&mut network, &keys, &[("x", x), ("y", y)], call).unwrap();
    }
    assert!(weights(&network)
        .iter()
        .zip(&start)
        .all(|(a, b)| a.equal(b)));
    assert_eq!(optimizer_step_count(&network), 0);
    assert_eq!(scale_of(&network), (0.5, 1));
}

#[test]
fn without_merge_grad_an_overflow_skips_the_step_and_backs_off() {
    let (mut network, keys) = scaled_linear("{ type = \"adam\", lr = 0.1 }", 1);
    let start = weights(&network);
    let (x, y) = overflowing_batch();
    train_step(&mut network, &keys, &[("x", x), ("y", y)], 1).unwrap();
    assert!(weights(&network)
        .iter()
        .zip(&start)
        .all(|(a, b)| a.equal(b)));
    assert_eq!(scale_of(&network), (0.5, 1));
    let (x, y) = data(1);
    train_step(&mut network, &keys, &[("x", x), ("y", y)], 2).unwrap();
    assert_eq!(optimizer_step_count(&network), 1);
}

#[test]
fn per_parameter_gradients_update_like_the_loss_and_the_loss_stays_the_models_loss() {
    // FastEstimator's `UpdateOp` documentation: `gradients` holds the model's gradients (FastEstimator's GradientOp with a model
    // gives one per trainable parameter); `loss` is still required, and is what the model's
    // loss is logged as.
    let via_loss = "\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\n";
    let via_grads = "\n[[network.ops]]\nop = \"GradientOp\"\nfinals = \"mse\"\nmodel = \"lin\"\noutputs = [\"g_bias\", \"g_weight\"]\n\
                     [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\ngradients = [\"g_bias\", \"g_weight\"]\n";
    let (mut a, keys_a) = build(&format!("{LINEAR}{via_loss}")).unwrap();
    let (mut b, keys_b) = build(&format!("{LINEAR}{via_grads}")).unwrap();
    let mse = keys_b.get("mse").unwrap();
    assert_eq!(b.loss_keys(), [mse]);
    assert_eq!(b.model_loss_keys(0), ["mse"]);
    for call in 1..=3u64 {
        let (x, y) = data(call as i64);
        train_step(
            &mut a,
            &keys_a,
            &[("x", x.shallow_clone()), ("y", y.shallow_clone())],
            call,
        )
        .unwrap();
        train_step(&mut b, &keys_b, &[("x", x), ("y", y)], call).unwrap();
    }
    for (p, q) in weights(&a).iter().zip(weights(&b)) {
        assert!(p.allclose(&q, 1e-6, 1e-6, false), "{p:?} vs {q:?}");
    }
}

#[test]
fn update_op_gradients_follow_the_seed_rules() {
    let err = |ops: &str| build(&format!("{LINEAR}{ops}")).err().unwrap().to_string();
    let no_loss = err("\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\ngradients = \"g\"\n");
    assert!(
        no_loss.contains("network.ops[2]: UpdateOp needs `loss`"),
        "{no_loss}"
    );
    let count = err("\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\ngradients = [\"a\", \"b\", \"c\"]\n");
    assert!(
        count.contains("network.ops[2].gradients: 3 keys for the 2 trainable parameters of model `lin` (fc1.bias, fc1.weight)"),
        "{count}"
    );
}

#[test]
fn a_per_parameter_gradient_of_the_wrong_shape_is_refused_naming_it() {
    let ops = "\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\ngradients = [\"g_bias\", \"g_weight\"]\n";
    let (mut network, keys) = build(&format!("{LINEAR}{ops}")).unwrap();
    let (x, y) = data(3);
    let err = train_step(
        &mut network,
        &keys,
        &[
            ("x", x),
            ("y", y),
            (
                "g_bias",
                Tensor::zeros([2], (tch::Kind::Float, tch::Device::Cpu)),
            ),
            (
                "g_weight",
                Tensor::zeros([3, 2], (tch::Kind::Float, tch::Device::Cpu)),
            ),
        ],
        1,
    )
    .unwrap_err();
    assert!(
        err.contains("gradient `g_weight` has shape [3, 2], but parameter `fc1.weight` of model `lin` has [2, 3]"),
        "{err}"
    );
}

#[test]
fn fused_adam_under_a_scaler_decides_on_the_device_and_the_unfused_path_on_the_host() {
    // PyTorch's fused optimizers under GradScaler: the kernel skips an overflowing step and
    // `_amp_update_scale_` backs off, without the host reading the flag; the host's copy of
    // the scale is only refreshed when read (`snapshot`). Unfused Adam reads the flag each
    // step and keeps the host's copy current. Both give the same weights and scale.
    let mut results = Vec::new();
    for (adam, decided_on_device) in [
        ("{ type = \"adam\", lr = 0.1 }", true),
        ("{ type = \"adam\", lr = 0.1, fused = false }", false),
    ] {
        let (mut network, keys) = scaled_linear(adam, 1);
        let (x, y) = overflowing_batch();
        train_step(&mut network, &keys, &[("x", x), ("y", y)], 1).unwrap();
        for call in 2..=3 {
            let (x, y) = data(call as i64);
            train_step(&mut network, &keys, &[("x", x), ("y", y)], call).unwrap();
        }
        let host_copy = network.models[0].scaler.as_ref().unwrap().scale;
        assert_eq!(
            host_copy == 1.0,
            decided_on_device,
            "{adam}: host copy {host_copy}"
        );
        assert_eq!(scale_of(&network), (0.5, 1), "{adam}");
        assert_eq!(
            optimizer_step_count(&network),
            2,
            "{adam}: the skipped step is not counted"
        );
        results.push(flat(&weights(&network)));
    }
    assert!(
        results[0].allclose(&results[1], 1e-5, 1e-6, false),
        "{:?} vs {:?}",
        results[0],
        results[1]
    );
}

/// `lin` and `other` both read `x`; `mse_other` is computed from `other` alone.
fn update_of_lin_on_others_loss(update: &str) -> String {
    format!(
        "{LINEAR}\n[[models]]\nname = \"other\"\narchitecture = \"MLP\"\ninputs = 3\nhidden = []\nclasses = 2\noptimizer = {{ type = \"adam\", lr = 0.1 }}\n\
         [[network.ops]]\nop = \"ModelOp\"\nmodel = \"other\"\ninputs = \"x\"\noutputs = \"z\"\n\
         [[network.ops]]\nop = \"MeanSquaredError\"\ninputs = [\"z\", \"y\"]\noutputs = \"mse_other\"\n{update}"
    )
}

#[test]
fn an_update_whose_loss_does_not_reach_its_model_is_refused_naming_op_model_and_loss() {
    // The loss depends on a model, just not on the one updated: nothing would train `lin`
    // and the run would finish with its starting weights (PyTorch refuses such a backward).
    let cases = [
        ("plain", "[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse_other\"\n"),
        (
            "deferred, after another model's update",
            "[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"other\"\nloss = \"mse_other\"\n\
             [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse_other\"\n",
        ),
        (
            "merge_grad",
            "[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse_other\"\nmerge_grad = 2\n",
        ),
        (
            "given gradients computed by GradientOp",
            "[[network.ops]]\nop = \"GradientOp\"\nfinals = \"mse_other\"\nmodel = \"lin\"\noutputs = \"g\"\n\
             [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse_other\"\ngradients = \"g\"\n",
        ),
    ];
    for (case, update) in cases {
        let (mut network, keys) = build(&update_of_lin_on_others_loss(update)).unwrap();
        let before = weights(&network);
        let (x, y) = data(5);
        let err = train_step(&mut network, &keys, &[("x", x), ("y", y)], 1)
            .expect_err(&format!("{case}: an update that trains nothing must fail"));
        let target = if case.starts_with("given") {
            "finals `mse_other`"
        } else {
            "the loss `mse_other`"
        };
        assert!(
            err.contains(&format!(
                "{target} does not depend on any trainable parameter of model `lin`"
            )),
            "{case}: {err}"
        );
        assert!(err.contains("(network.ops["), "{case}: names the op: {err}");
        for (a, b) in before.iter().zip(weights(&network)) {
            assert!(a.equal(&b), "{case}: `lin` must not have moved");
        }
    }
}
