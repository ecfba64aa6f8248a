//! Slicers in the network (FastEstimator's `fe.network.BaseNetwork` documentation): forward and reverse slicing, the checks around it, and
//! sliced batches matching whole ones. Driven through the library with the real plugins.

use std::collections::BTreeSet;

use fe_host::network::Batch;
use fe_plugin_api::Mode;
use tch::{Device, Kind, Tensor};

use crate::network::{batch, build, random, step, LINEAR};

/// The linear model with its loss and gradient, optionally sliced along the batch.
fn sliced(slicers: &str) -> String {
    format!(
        "{LINEAR}\n[[network.ops]]\nop = \"GradientOp\"\nfinals = \"mse\"\nmodel = \"lin\"\noutputs = \"g\"\n{slicers}"
    )
}

fn run_once(text: &str, wanted: &[&str], x: &Tensor, y: &Tensor) -> Result<Batch, String> {
    let (mut network, keys) = build(text).map_err(|e| e.to_string())?;
    let desired: BTreeSet<_> = wanted.iter().map(|k| keys.get(k).unwrap()).collect();
    let plan = network.plan(Mode::Train, 1, "", &desired)?;
    let mut b = batch(&keys, &[("x", x.shallow_clone()), ("y", y.shallow_clone())]);
    network
        .run_step(&plan, &mut b, &step(Mode::Train, 1))
        .map_err(|e| e.to_string())?;
    let mut out = Batch::with_keys(0);
    for name in wanted {
        if let Some(value) = b.get(keys.get(name).unwrap()) {
            out.set(
                fe_host::network::KeyId(out_index(name)),
                value.shallow_clone(),
            );
        }
    }
    Ok(out)
}

fn out_index(name: &str) -> u32 {
    ["mse", "g", "y_pred", "x"]
        .iter()
        .position(|n| *n == name)
        .unwrap() as u32
}

#[test]
fn sliced_batch_gives_the_same_loss_and_gradients_as_the_whole_batch() {
    let x = random(&[8, 3], 9);
    let y = random(&[8, 2], 10);
    let whole = run_once(&sliced(""), &["mse", "g", "y_pred"], &x, &y).unwrap();
    let slicers = "\n[[network.slicers]]\nslicer = \"AxisSlicer\"\nslice = [\"x\", \"y\"]\nunslice = [\"y_pred\"]\naxis = 0\nminibatch_size = 2\n\
                   [[network.slicers]]\nslicer = \"MeanUnslicer\"\nunslice = [\"mse\", \"g\"]\n";
    let parts = run_once(&sliced(slicers), &["mse", "g", "y_pred"], &x, &y).unwrap();
    for name in ["mse", "g", "y_pred"] {
        let key = fe_host::network::KeyId(out_index(name));
        let (a, b) = (whole.get(key).unwrap(), parts.get(key).unwrap());
        assert_eq!(a.size(), b.size(), "{name}: shape restored");
        assert!(a.allclose(b, 1e-5, 1e-5, false), "{name}: {a:?} vs {b:?}");
    }
}

#[test]
fn a_wanted_key_that_was_sliced_but_not_unsliced_is_an_error() {
    let slicers = "\n[[network.slicers]]\nslicer = \"AxisSlicer\"\nslice = [\"x\", \"y\"]\nunslice = [\"y_pred\"]\naxis = 0\nminibatch_size = 2\n";
    let x = Tensor::zeros([4, 3], (Kind::Float, Device::Cpu));
    let y = Tensor::zeros([4, 2], (Kind::Float, Device::Cpu));
    let err = run_once(&sliced(slicers), &["mse"], &x, &y).unwrap_err();
    assert!(
        err.starts_with("since you are using slicers, you must say how to unslice these keys in train (epoch 1): mse"),
        "{err}"
    );
}

#[test]
fn a_deleted_key_needs_no_unslicing() {
    let text = format!(
        "{LINEAR}\n[[network.ops]]\nop = \"Delete\"\ninputs = \"mse\"\n\
         [[network.slicers]]\nslicer = \"AxisSlicer\"\nslice = [\"x\", \"y\"]\nunslice = [\"y_pred\"]\naxis = 0\nminibatch_size = 2\n"
    );
    let x = Tensor::ones([4, 3], (Kind::Float, Device::Cpu));
    let y = Tensor::ones([4, 2], (Kind::Float, Device::Cpu));
    let out =
        run_once(&text, &["mse", "y_pred"], &x, &y).expect("no unslicing needed for a deleted key");
    assert!(out.get(fe_host::network::KeyId(out_index("mse"))).is_none());
    assert_eq!(
        out.get(fe_host::network::KeyId(out_index("y_pred")))
            .unwrap()
            .size(),
        [4, 2]
    );
}

#[test]
fn two_slicers_may_not_slice_the_same_key() {
    let slicers = "\n[[network.slicers]]\nslicer = \"AxisSlicer\"\nslice = [\"x\"]\naxis = 0\nminibatch_size = 2\n\
                   [[network.slicers]]\nslicer = \"AxisSlicer\"\nslice = [\"x\", \"y\"]\nunslice = [\"y_pred\"]\naxis = 0\nminibatch_size = 2\n";
    let x = Tensor::zeros([4, 3], (Kind::Float, Device::Cpu));
    let y = Tensor::zeros([4, 2], (Kind::Float, Device::Cpu));
    let err = run_once(&sliced(slicers), &["y_pred"], &x, &y).unwrap_err();
    assert!(
        err.starts_with("several slicers try to slice `x` at the same time"),
        "{err}"
    );
}

#[test]
fn two_slicers_may_not_unslice_the_same_key() {
    let slicers = "\n[[network.slicers]]\nslicer = \"AxisSlicer\"\nslice = [\"x\"]\nunslice = [\"y_pred\"]\naxis = 0\nminibatch_size = 2\n\
                   [[network.slicers]]\nslicer = \"AxisSlicer\"\nslice = [\"y\"]\nunslice = [\"y_pred\"]\naxis = 0\nminibatch_size = 2\n";
    let x = Tensor::zeros([4, 3], (Kind::Float, Device::Cpu));
    let y = Tensor::zeros([4, 2], (Kind::Float, Device::Cpu));
    let err = run_once(&sliced(slicers), &["y_pred"], &x, &y).unwrap_err();
    assert!(
        err.starts_with("several slicers try to unslice `y_pred` at the same time"),
        "{err}"
    );
}

#[test]
fn unslicing_without_any_slicing_is_an_error() {
    let slicers = "\n[[network.slicers]]\nslicer = \"MeanUnslicer\"\nunslice = [\"mse\"]\n";
    let x = Tensor::zeros([4, 3], (Kind::Float, Device::Cpu));
    let y = Tensor::zeros([4, 2], (Kind::Float, Device::Cpu));
    let err = run_once(&sliced(slicers), &["mse"], &x, &y).unwrap_err();
    assert!(
        err.starts_with("slicers unslice keys but none slices anything"),
        "{err}"
    );
}

#[test]
fn slices_of_different_counts_across_slicers_are_an_error() {
    let slicers = "\n[[network.slicers]]\nslicer = \"AxisSlicer\"\nslice = [\"x\"]\nunslice = [\"y_pred\"]\naxis = 0\nminibatch_size = 2\n\
                   [[network.slicers]]\nslicer = \"AxisSlicer\"\nslice = [\"y\"]\nunslice = []\naxis = 0\nminibatch_size = 1\n";
    let x = Tensor::zeros([4, 3], (Kind::Float, Device::Cpu));
    let y = Tensor::zeros([4, 2], (Kind::Float, Device::Cpu));
    let err = run_once(&sliced(slicers), &["y_pred"], &x, &y).unwrap_err();
    assert!(
        err.contains("slicers disagree on the number of slices: 2 vs 4"),
        "{err}"
    );
}

/// Runs a network without models on `x` (and `one` = 1.0), returning `x` after the step.
fn run_meta(ops: &str, steps: u64) -> Vec<f64> {
    let (mut network, keys) = build(ops).unwrap();
    let desired: BTreeSet<_> = [keys.get("x").unwrap()].into_iter().collect();
    let plan = network.plan(Mode::Train, 1, "", &desired).unwrap();
    (1..=steps)
        .map(|s| {
            let mut b = batch(
                &keys,
                &[
                    ("x", Tensor::zeros([1], (Kind::Float, Device::Cpu))),
                    ("one", Tensor::ones([1], (Kind::Float, Device::Cpu))),
                ],
            );
            network
                .run_step(&plan, &mut b, &step(Mode::Train, s))
                .unwrap();
            b.get(keys.get("x").unwrap()).unwrap().double_value(&[0])
        })
        .collect()
}

/// x <- (x + 1) / 2
const HALFWAY: &str = "{ op = \"Average\", inputs = [\"x\", \"one\"], outputs = \"x\" }";

#[test]
fn repeat_runs_its_op_n_times() {
    let x = run_meta(
        &format!("[[network.ops]]\nop = \"Repeat\"\nrepeat = 3\nwrap = {HALFWAY}\n"),
        1,
    );
    assert_eq!(x, [0.875]);
}

#[test]
fn repeat_while_a_condition_holds_and_stops_at_max_iter() {
    let until = "while = { key = \"x\", compare = \"lt\", value = 0.9 }";
    let x = run_meta(
        &format!("[[network.ops]]\nop = \"Repeat\"\n{until}\nwrap = {HALFWAY}\n"),
        1,
    );
    assert_eq!(x, [0.9375], "0.5, 0.75, 0.875, 0.9375: four passes");
    let x = run_meta(
        &format!("[[network.ops]]\nop = \"Repeat\"\n{until}\nmax_iter = 2\nwrap = {HALFWAY}\n"),
        1,
    );
    assert_eq!(x, [0.75]);
}

#[test]
fn sometimes_runs_with_its_probability_and_otherwise_leaves_the_value() {
    let never = run_meta(
        &format!("[[network.ops]]\nop = \"Sometimes\"\nprob = 0.0\nwrap = {HALFWAY}\n"),
        20,
    );
    assert!(never.iter().all(|&v| v == 0.0));
    let always = run_meta(
        &format!("[[network.ops]]\nop = \"Sometimes\"\nprob = 1.0\nwrap = {HALFWAY}\n"),
        20,
    );
    assert!(always.iter().all(|&v| v == 0.5));
    let half = run_meta(
        &format!("[[network.ops]]\nop = \"Sometimes\"\nprob = 0.5\nwrap = {HALFWAY}\n"),
        400,
    );
    let ran = half.iter().filter(|&&v| v == 0.5).count();
    assert!((150..250).contains(&ran), "{ran}/400 runs");
    assert!(half.iter().all(|&v| v == 0.0 || v == 0.5));
    // Seeded by the step: the same steps make the same choices.
    assert_eq!(
        half,
        run_meta(
            &format!("[[network.ops]]\nop = \"Sometimes\"\nprob = 0.5\nwrap = {HALFWAY}\n"),
            400
        )
    );
}

#[test]
fn one_of_picks_one_alternative_per_step() {
    let twice = "{ op = \"Repeat\", repeat = 2, wrap = { op = \"Average\", inputs = [\"x\", \"one\"], outputs = \"x\" } }";
    let x = run_meta(
        &format!("[[network.ops]]\nop = \"OneOf\"\nops = [{HALFWAY}, {twice}]\n"),
        200,
    );
    let (once, two) = (
        x.iter().filter(|&&v| v == 0.5).count(),
        x.iter().filter(|&&v| v == 0.75).count(),
    );
    assert_eq!(once + two, 200);
    assert!(once > 60 && two > 60, "{once} / {two}");
}

#[test]
fn one_of_alternatives_must_share_keys() {
    let other = "{ op = \"Average\", inputs = [\"x\", \"one\"], outputs = \"y\" }";
    let err = build(&format!(
        "[[network.ops]]\nop = \"OneOf\"\nops = [{HALFWAY}, {other}]\n"
    ))
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("all ops of a OneOf must share the same inputs and outputs"),
        "{err}"
    );
}

#[test]
fn fuse_runs_its_ops_in_order_as_one() {
    let x = run_meta(
        &format!("[[network.ops]]\nop = \"Fuse\"\nops = [{HALFWAY}, {HALFWAY}]\n"),
        1,
    );
    assert_eq!(x, [0.75]);
    let (network, keys) = build(&format!(
        "[[network.ops]]\nop = \"Fuse\"\nops = [{HALFWAY}, {HALFWAY}]\n"
    ))
    .unwrap();
    let names: Vec<&str> = network.ops[0]
        .inputs
        .iter()
        .map(|k| keys.name(*k))
        .collect();
    assert_eq!(names, ["x", "one"]);
}

#[test]
fn modes_go_on_the_meta_op_not_inside_it() {
    let inner =
        "{ op = \"Average\", inputs = [\"x\", \"one\"], outputs = \"x\", mode = \"train\" }";
    let err = build(&format!(
        "[[network.ops]]\nop = \"Sometimes\"\nwrap = {inner}\n"
    ))
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("network.ops[0].wrap: set `mode` and `ds_id` on the Sometimes around this op, not inside it"), "{err}");
}

#[test]
fn a_slicer_whose_keys_the_batch_lacks_is_refused_before_training() {
    // `image` is a typo for `x`: today nothing would be sliced, so no op and no update runs.
    let dir = crate::util::TempDir::new("slicer-typo");
    let slicer = "\n[[network.slicers]]\nslicer = \"AxisSlicer\"\nslice = [\"image\"]\nunslice = [\"y_pred\", \"ce\"]\naxis = 0\nminibatch_size = 8\n";
    let path = dir.write("m.toml", &crate::util::lenet_manifest(1, slicer));
    let out = crate::util::run_failing(&["run", &path.to_string_lossy()], 2);
    for part in [
        "AxisSlicer (network.slicers[0])",
        "`image`",
        "train (epoch 1)",
    ] {
        assert_contains!(out.stderr, part);
    }
    assert!(!out.stdout.contains("fe-host train"), "{}", out.stdout);
}
