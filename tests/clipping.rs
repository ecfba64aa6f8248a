//! Gradient clipping on `UpdateOp` (`clip_norm`, `norm_type`, `clip_value`) through the real
//! binary: it trains and changes what training ends with, it clips the gradient averaged over
//! the ranks (so two ranks end as one process does), and values that cannot be meant are
//! refused at their key. Bit-exactness against torch's `clip_grad_*_`: `optim::parity`.

use fe_host::network::precision::GradScaler;
use fe_host::network::{Keys, Network};
use tch::Tensor;

use crate::dist::{last, manifest, max_difference, train, SGD};
use crate::network::{build, data, weights, LINEAR};
use crate::updates::{overflowing_batch, scale_of, train_step};
use crate::util::{run_failing, TempDir};

/// The LeNet manifest of `dist` with `fields` added to its UpdateOp.
fn clipped(optimizer: &str, fields: &str) -> String {
    let text = manifest(optimizer, 32, 1, "");
    let update = "op = \"UpdateOp\"\nmodel = \"lenet\"\nloss = \"ce\"\n";
    assert!(text.contains(update));
    text.replace(update, &format!("{update}{fields}\n"))
}

#[test]
fn clipped_runs_train_and_end_elsewhere_than_unclipped_ones() {
    let runs: Vec<_> = ["", "clip_norm = 0.25", "clip_value = 0.005"]
        .into_iter()
        .map(|fields| {
            let dir = TempDir::new("clip-run");
            let (summary, weights) = train(&dir, 1, &clipped(SGD, fields));
            let ce = crate::util::values(&summary, "train", "ce");
            (fields, ce, last(&summary, "eval", "accuracy"), weights)
        })
        .collect();
    for (fields, ce, accuracy, _) in &runs {
        let (first, last) = (ce[0], ce[ce.len() - 1]);
        assert!(last < first, "`{fields}` did not train: ce {ce:?}");
        assert!(*accuracy > 0.2, "`{fields}`: eval accuracy {accuracy}");
    }
    let unclipped = &runs[0].3;
    for (fields, _, _, weights) in &runs[1..] {
        let difference = max_difference(unclipped, weights);
        assert!(
            difference > 1e-3,
            "`{fields}` changed nothing ({difference})"
        );
    }
    assert!(max_difference(&runs[1].3, &runs[2].3) > 1e-3);
}

#[test]
fn two_ranks_clip_the_averaged_gradient_and_end_as_one_process() {
    // Clipping each rank's own gradient before averaging would scale the ranks differently
    // and end elsewhere than one process on the global batch.
    let text = clipped(SGD, "clip_norm = 0.25");
    let (one, two) = (TempDir::new("clip-dp-one"), TempDir::new("clip-dp-two"));
    let (_, single) = train(&one, 1, &text);
    let (_, parallel) = train(&two, 2, &text);
    let difference = max_difference(&single, &parallel);
    assert!(difference <= 1e-5, "weights differ by {difference}");
    let unclipped = TempDir::new("clip-dp-none");
    let (_, plain) = train(&unclipped, 1, &manifest(SGD, 32, 1, ""));
    assert!(
        max_difference(&single, &plain) > 1e-3,
        "clip_norm clipped nothing"
    );
}

#[test]
fn clipping_values_that_cannot_be_meant_are_refused_at_their_key() {
    for (fields, expected) in [
        (
            "clip_norm = -1.0",
            "network.ops[2].clip_norm: must be a positive, finite number (got -1)",
        ),
        (
            "clip_value = nan",
            "network.ops[2].clip_value: must be a positive, finite number (got NaN)",
        ),
        (
            "clip_norm = 1.0\nclip_value = 1.0",
            "network.ops[2].clip_value: set either `clip_norm` or `clip_value`, not both",
        ),
        (
            "clip_norm = 1.0\nnorm_type = 0.5",
            "network.ops[2].norm_type: must be a number of at least 1, or inf (got 0.5)",
        ),
        (
            "norm_type = 2.0",
            "network.ops[2].norm_type: needs `clip_norm`",
        ),
    ] {
        let dir = TempDir::new("clip-bad");
        let path = dir.write("m.toml", &clipped(SGD, fields));
        let out = run_failing(&["run", &path.to_string_lossy()], 2);
        assert!(out.stderr.contains(expected), "{fields}: {}", out.stderr);
    }
}

#[test]
fn updates_of_one_model_that_clip_differently_are_refused() {
    let second = "\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lenet\"\nloss = \"ce\"\nclip_value = 1.0\n";
    let text = manifest(SGD, 32, 1, second);
    let dir = TempDir::new("clip-two-updates");
    let path = dir.write("m.toml", &text);
    let out = run_failing(&["run", &path.to_string_lossy()], 2);
    assert!(
        out.stderr.contains(
            "clip_value: model `lenet` is clipped differently by another UpdateOp (no clipping)"
        ),
        "{}",
        out.stderr
    );
}

/// `lin` (sgd, lr 1) updated on `mse` with `fields` added to its UpdateOp.
fn linear(fields: &str) -> (Network, Keys) {
    let text = format!(
        "{}\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\n{fields}\n",
        LINEAR.replace("lr = 0.1", "lr = 1.0")
    );
    build(&text).unwrap()
}

/// The L2 norm of how far the weights moved from `start`.
fn moved(network: &Network, start: &[Tensor]) -> f64 {
    weights(network)
        .iter()
        .zip(start)
        .map(|(now, then)| {
            (now - then)
                .square()
                .sum(tch::Kind::Double)
                .double_value(&[])
        })
        .sum::<f64>()
        .sqrt()
}

#[test]
fn a_loss_scale_is_taken_off_before_clipping_and_an_overflow_stays_skipped() {
    // With a scale of 1024 (exact in binary), gradients unscaled before clipping give the very
    // weights of an unscaled run; clipped while scaled they would be 1024 times further off.
    for optimizer in [
        "{ type = \"sgd\", lr = 1.0 }",
        "{ type = \"sgd\", lr = 1.0, momentum = 0.9 }",
    ] {
        let text = format!(
            "{}\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\nclip_norm = 0.01\n",
            LINEAR.replace("{ type = \"sgd\", lr = 0.1 }", optimizer)
        );
        let (mut plain, keys) = build(&text).unwrap();
        let (mut scaled, _) = build(&text).unwrap();
        scaled.models[0].scaler = Some(GradScaler::with_scale(1024.0));
        let start = weights(&scaled);
        let (x, y) = data(5);
        let values = [("x", x), ("y", y)];
        train_step(&mut plain, &keys, &values, 1).unwrap();
        train_step(&mut scaled, &keys, &values, 1).unwrap();
        assert!((moved(&scaled, &start) - 0.01).abs() < 1e-6, "{optimizer}");
        let (a, b) = (weights(&plain), weights(&scaled));
        assert!(a.iter().zip(&b).all(|(a, b)| a.equal(b)), "{optimizer}");
        let (x, y) = overflowing_batch();
        train_step(&mut scaled, &keys, &[("x", x), ("y", y)], 2).unwrap();
        assert!(
            weights(&scaled).iter().zip(&b).all(|(a, b)| a.equal(b)),
            "{optimizer}"
        );
        assert_eq!(scale_of(&scaled), (512.0, 1), "{optimizer}");
    }
}

#[test]
fn the_fused_adam_path_clips_before_deciding_on_the_device() {
    let text = format!(
        "{}\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\nclip_value = 1e-4\n",
        LINEAR.replace("{ type = \"sgd\", lr = 0.1 }", "{ type = \"adam\", lr = 0.1 }")
    );
    let (mut plain, keys) = build(&text).unwrap();
    let (mut scaled, _) = build(&text).unwrap();
    scaled.models[0].scaler = Some(GradScaler::with_scale(1024.0));
    let start = weights(&scaled);
    let (x, y) = overflowing_batch();
    train_step(&mut scaled, &keys, &[("x", x), ("y", y)], 1).unwrap();
    assert!(weights(&scaled).iter().zip(&start).all(|(a, b)| a.equal(b)));
    assert_eq!(scale_of(&scaled), (512.0, 1));
    // Clamped to 1e-4 and unscaled, the first Adam step is the same with and without a scale.
    for network in [&mut plain, &mut scaled] {
        let (x, y) = data(5);
        train_step(network, &keys, &[("x", x), ("y", y)], 2).unwrap();
    }
    let (a, b) = (weights(&plain), weights(&scaled));
    assert!(a.iter().zip(&b).all(|(a, b)| a.equal(b)));
}

#[test]
fn merge_grad_clips_the_mean_of_its_calls() {
    // SGD with lr 1 moves the weights by exactly the clipped gradient: the clipped mean has
    // norm 0.01, while clipping each call before averaging would move them less (the two
    // calls' gradients point different ways).
    let (mut network, keys) = linear("merge_grad = 2\nclip_norm = 0.01");
    let start = weights(&network);
    for call in 1..=2 {
        let (x, y) = data(call as i64 + 40);
        train_step(&mut network, &keys, &[("x", x), ("y", y)], call).unwrap();
    }
    let distance = moved(&network, &start);
    assert!((distance - 0.01).abs() < 1e-6, "moved {distance}");
}
