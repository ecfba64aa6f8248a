//! The Network's semantics (seeds 000, 001, 003), driven through the library with real plugins
//! loaded by the real loader: key resolution, filters, slicers, UpdateOp, mixed precision.

use std::collections::BTreeSet;
use std::path::Path;

use fe_host::manifest::Manifest;
use fe_host::network::{Batch, Keys, Network};
use fe_host::plugins::{load_registry, search_path, Registry};
use fe_plugin_api::{Mode, StepContext};
use tch::{Device, Kind, Tensor};

use crate::util::{ensure_plugins, plugin_dir};

fn registry() -> Registry {
    ensure_plugins();
    let search = search_path(&[], &[plugin_dir()], None, None);
    load_registry(&search, &Default::default()).expect("plugins load")
}

const PIPELINE: &str = "[pipeline]\nbatch_size = 4\n";

/// A network built from manifest `text` (a pipeline section is added).
fn build(text: &str) -> Result<(Network, Keys), fe_host::Error> {
    let manifest = Manifest::parse(Path::new("net.toml"), format!("{PIPELINE}{text}"))?;
    let registry = registry();
    let mut keys = Keys::default();
    tch::manual_seed(3);
    let network = fe_host::network::build::build(&manifest, &registry, &mut keys, Device::Cpu)?;
    Ok((network, keys))
}

fn labels(network: &Network, mode: Mode, ds_id: &str) -> Vec<String> {
    let plan = network
        .plan(mode, 1, ds_id, &BTreeSet::new())
        .expect("plan");
    plan.ops
        .iter()
        .map(|&i| network.ops[i].label.clone())
        .collect()
}

fn step(mode: Mode, global_step: u64) -> StepContext<'static> {
    StepContext {
        mode,
        epoch: 1,
        global_step,
        batch_idx: global_step,
        ds_id: "".into(),
        warmup: false,
        seed: global_step,
    }
}

fn batch(keys: &Keys, values: &[(&str, Tensor)]) -> Batch {
    let mut batch = Batch::with_keys(keys.len());
    for (name, value) in values {
        let key = keys.get(name).unwrap_or_else(|| panic!("no key {name}"));
        batch.size = value.size()[0];
        batch.set(key, value.shallow_clone());
    }
    batch
}

const FILTERED_OPS: &str = r#"
[[network.ops]]
op = "MeanSquaredError"
inputs = ["a", "b"]
outputs = "train_only"
mode = "train"

[[network.ops]]
op = "MeanSquaredError"
inputs = ["a", "b"]
outputs = "not_train"
mode = "!train"

[[network.ops]]
op = "MeanSquaredError"
inputs = ["a", "b"]
outputs = "ds1_only"
ds_id = "ds1"

[[network.ops]]
op = "MeanSquaredError"
inputs = ["a", "b"]
outputs = "not_ds1"
ds_id = "!ds1"

[[network.ops]]
op = "MeanSquaredError"
inputs = ["a", "b"]
outputs = "ds1_or_ds2"
ds_id = ["ds1", "ds2"]

[[network.ops]]
op = "CrossEntropy"
inputs = ["a", "b"]
outputs = "loss"
"#;

fn outputs_of(network: &Network, keys: &Keys, mode: Mode, ds_id: &str) -> Vec<String> {
    let plan = network
        .plan(mode, 1, ds_id, &BTreeSet::new())
        .expect("plan");
    plan.ops
        .iter()
        .flat_map(|&i| {
            network.ops[i]
                .outputs
                .iter()
                .map(|k| keys.name(*k).to_owned())
        })
        .collect()
}

#[test]
fn mode_filters_whitelist_and_negation() {
    let (network, keys) = build(FILTERED_OPS).unwrap();
    let train = outputs_of(&network, &keys, Mode::Train, "");
    assert_eq!(train, ["train_only", "not_ds1", "loss"]);
    let eval = outputs_of(&network, &keys, Mode::Eval, "");
    assert_eq!(eval, ["not_train", "not_ds1", "loss"]);
}

#[test]
fn ds_id_filters_follow_fastestimator_rules() {
    let (network, keys) = build(FILTERED_OPS).unwrap();
    // The unnamed dataset fails every whitelist and passes every blacklist.
    assert!(!outputs_of(&network, &keys, Mode::Train, "").contains(&"ds1_only".to_owned()));
    assert!(outputs_of(&network, &keys, Mode::Train, "").contains(&"not_ds1".to_owned()));
    let ds1 = outputs_of(&network, &keys, Mode::Train, "ds1");
    assert_eq!(ds1, ["train_only", "ds1_only", "ds1_or_ds2", "loss"]);
    let ds2 = outputs_of(&network, &keys, Mode::Train, "ds2");
    assert_eq!(ds2, ["train_only", "not_ds1", "ds1_or_ds2", "loss"]);
    let ds3 = outputs_of(&network, &keys, Mode::Train, "ds3");
    assert_eq!(ds3, ["train_only", "not_ds1", "loss"]);
}

#[test]
fn infer_never_runs_losses() {
    let (network, keys) = build(FILTERED_OPS).unwrap();
    let infer = outputs_of(&network, &keys, Mode::Infer, "");
    assert!(!infer.contains(&"loss".to_owned()), "{infer:?}");
    assert_eq!(
        labels(&network, Mode::Test, "").last().map(String::as_str),
        Some("CrossEntropy (network.ops[5])")
    );
}

#[test]
fn mixing_mode_forms_is_rejected_at_the_key() {
    let err = build("[[network.ops]]\nop = \"MeanSquaredError\"\ninputs = [\"a\", \"b\"]\noutputs = \"c\"\nmode = [\"train\", \"!eval\"]\n")
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("network.ops[0].mode: cannot mix `!mode` with `mode`"),
        "{err}"
    );
}

#[test]
fn only_needed_keys_go_to_the_device_and_only_wanted_ones_come_back() {
    let (network, keys) = build(
        "[[network.ops]]\nop = \"MeanSquaredError\"\ninputs = [\"a\", \"b\"]\noutputs = \"mse\"\n\
         [[network.ops]]\nop = \"MeanSquaredError\"\ninputs = [\"mse\", \"c\"]\noutputs = \"unwanted\"\n",
    )
    .unwrap();
    let desired: BTreeSet<_> = [keys.get("mse").unwrap()].into_iter().collect();
    let plan = network.plan(Mode::Train, 1, "", &desired).unwrap();
    let names = |ids: &[fe_host::network::KeyId]| {
        ids.iter()
            .map(|k| keys.name(*k).to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&plan.device_inputs), ["a", "b", "c"]);
    assert_eq!(names(&plan.outputs), ["mse"]);
}

#[test]
fn models_must_be_all_mixed_precision_or_none() {
    let err = build(
        "[[models]]\nname = \"a\"\narchitecture = \"MLP\"\ninputs = 2\nmixed_precision = true\n\
         [[models]]\nname = \"b\"\narchitecture = \"MLP\"\ninputs = 2\n",
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains(
            "models[0].mixed_precision: cannot mix full-precision and mixed-precision models"
        ),
        "{err}"
    );
}

#[test]
fn mixed_precision_with_gradients_input_is_rejected() {
    let err = build(
        "[[models]]\nname = \"a\"\narchitecture = \"MLP\"\ninputs = 2\nmixed_precision = true\noptimizer = \"sgd\"\n\
         [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"a\"\ngradients = \"g\"\n",
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains(
            "network.ops[0].gradients: mixed-precision training cannot take input gradients"
        ),
        "{err}"
    );
}

/// One linear layer y = Wx + b trained with SGD on MSE.
const LINEAR: &str = r#"
[[models]]
name = "lin"
architecture = "MLP"
inputs = 3
hidden = []
classes = 2
optimizer = { type = "sgd", lr = 0.1 }

[[network.ops]]
op = "ModelOp"
model = "lin"
inputs = "x"
outputs = "y_pred"

[[network.ops]]
op = "MeanSquaredError"
inputs = ["y_pred", "y"]
outputs = "mse"
"#;

fn weights(network: &Network) -> Vec<Tensor> {
    network.models[0]
        .params
        .iter()
        .map(|p| p.detach().copy())
        .collect()
}

fn data(seed: i64) -> (Tensor, Tensor) {
    tch::manual_seed(seed);
    (
        Tensor::randn([4, 3], (Kind::Float, Device::Cpu)),
        Tensor::randn([4, 2], (Kind::Float, Device::Cpu)),
    )
}

#[test]
fn merge_grad_applies_minus_lr_times_the_mean_gradient_every_n_steps() {
    let update =
        "\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\nmerge_grad = 3\n";
    let (mut network, keys) = build(&format!("{LINEAR}{update}")).unwrap();
    // The gradient each batch gives at the starting weights, from a GradientOp network.
    let grads_op = "\n[[network.ops]]\nop = \"GradientOp\"\nfinals = \"mse\"\nmodel = \"lin\"\noutputs = \"g\"\n";
    let (mut probe, probe_keys) = build(&format!("{LINEAR}{grads_op}")).unwrap();
    let start = weights(&network);
    let mut expected_sum: Option<Tensor> = None;
    for call in 1..=6u64 {
        let (x, y) = data(call as i64);
        if call <= 3 {
            let mut b = batch(
                &probe_keys,
                &[("x", x.shallow_clone()), ("y", y.shallow_clone())],
            );
            let wanted: BTreeSet<_> = [probe_keys.get("g").unwrap()].into_iter().collect();
            let plan = probe.plan(Mode::Train, 1, "", &wanted).unwrap();
            probe
                .run_step(&plan, &mut b, &step(Mode::Train, call))
                .unwrap();
            let g = b.get(probe_keys.get("g").unwrap()).unwrap().shallow_clone();
            expected_sum = Some(match expected_sum {
                None => g,
                Some(sum) => sum + g,
            });
        }
        let mut b = batch(&keys, &[("x", x), ("y", y)]);
        let plan = network.plan(Mode::Train, 1, "", &BTreeSet::new()).unwrap();
        network
            .run_step(&plan, &mut b, &step(Mode::Train, call))
            .unwrap();
        let now = weights(&network);
        let changed = now.iter().zip(&start).any(|(a, b)| !a.equal(b));
        assert_eq!(
            changed,
            call >= 3,
            "weights changed at call {call}: {changed}"
        );
        if call == 3 {
            // weight' = weight - lr * mean(g1, g2, g3); params are [bias, weight] by name.
            let mean = expected_sum.take().unwrap() / 3.0;
            let flat_start = Tensor::cat(
                &start.iter().map(|t| t.flatten(0, -1)).collect::<Vec<_>>(),
                0,
            );
            let flat_now =
                Tensor::cat(&now.iter().map(|t| t.flatten(0, -1)).collect::<Vec<_>>(), 0);
            let expected = flat_start - mean * 0.1;
            assert!(
                flat_now.allclose(&expected, 1e-4, 1e-4, false),
                "{flat_now:?} vs {expected:?}"
            );
        }
    }
}

#[test]
fn merge_grad_equals_one_step_on_the_concatenated_batch() {
    let merged =
        "\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\nmerge_grad = 3\n";
    let single = "\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\n";
    let (mut a, keys_a) = build(&format!("{LINEAR}{merged}")).unwrap();
    let (mut b, keys_b) = build(&format!("{LINEAR}{single}")).unwrap();
    assert!(
        weights(&a)
            .iter()
            .zip(weights(&b))
            .all(|(x, y)| x.equal(&y)),
        "same seed, same start"
    );
    let parts: Vec<(Tensor, Tensor)> = (1..=3).map(data).collect();
    for (i, (x, y)) in parts.iter().enumerate() {
        let mut batch_a = batch(
            &keys_a,
            &[("x", x.shallow_clone()), ("y", y.shallow_clone())],
        );
        let plan = a.plan(Mode::Train, 1, "", &BTreeSet::new()).unwrap();
        a.run_step(&plan, &mut batch_a, &step(Mode::Train, i as u64 + 1))
            .unwrap();
    }
    let x = Tensor::cat(
        &parts
            .iter()
            .map(|(x, _)| x.shallow_clone())
            .collect::<Vec<_>>(),
        0,
    );
    let y = Tensor::cat(
        &parts
            .iter()
            .map(|(_, y)| y.shallow_clone())
            .collect::<Vec<_>>(),
        0,
    );
    let mut batch_b = batch(&keys_b, &[("x", x), ("y", y)]);
    let plan = b.plan(Mode::Train, 1, "", &BTreeSet::new()).unwrap();
    b.run_step(&plan, &mut batch_b, &step(Mode::Train, 1))
        .unwrap();
    for (p, q) in weights(&a).iter().zip(weights(&b)) {
        assert!(p.allclose(&q, 1e-5, 1e-5, false), "{p:?} vs {q:?}");
    }
}

#[test]
fn update_in_warmup_changes_nothing() {
    let update = "\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\n";
    let (mut network, keys) = build(&format!("{LINEAR}{update}")).unwrap();
    let start = weights(&network);
    let (x, y) = data(1);
    let mut b = batch(&keys, &[("x", x), ("y", y)]);
    let plan = network.plan(Mode::Train, 1, "", &BTreeSet::new()).unwrap();
    let warm = StepContext {
        warmup: true,
        ..step(Mode::Train, 0)
    };
    network.run_step(&plan, &mut b, &warm).unwrap();
    assert!(weights(&network)
        .iter()
        .zip(&start)
        .all(|(a, b)| a.equal(b)));
}

#[test]
fn gradients_given_as_input_update_like_the_loss_would() {
    let via_loss = "\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\n";
    let via_grads = "\n[[network.ops]]\nop = \"GradientOp\"\nfinals = \"mse\"\nmodel = \"lin\"\noutputs = \"g\"\n\
                     [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\ngradients = \"g\"\n";
    let (mut a, keys_a) = build(&format!("{LINEAR}{via_loss}")).unwrap();
    let (mut b, keys_b) = build(&format!("{LINEAR}{via_grads}")).unwrap();
    for call in 1..=3u64 {
        let (x, y) = data(call as i64);
        let mut batch_a = batch(
            &keys_a,
            &[("x", x.shallow_clone()), ("y", y.shallow_clone())],
        );
        let mut batch_b = batch(&keys_b, &[("x", x), ("y", y)]);
        let plan_a = a.plan(Mode::Train, 1, "", &BTreeSet::new()).unwrap();
        let plan_b = b.plan(Mode::Train, 1, "", &BTreeSet::new()).unwrap();
        a.run_step(&plan_a, &mut batch_a, &step(Mode::Train, call))
            .unwrap();
        b.run_step(&plan_b, &mut batch_b, &step(Mode::Train, call))
            .unwrap();
    }
    for (p, q) in weights(&a).iter().zip(weights(&b)) {
        assert!(p.allclose(&q, 1e-6, 1e-6, false), "{p:?} vs {q:?}");
    }
}

#[test]
fn trailing_updates_are_deferred_and_retain_graph_is_set_on_all_but_the_last() {
    let text = format!(
        "{LINEAR}\n[[models]]\nname = \"other\"\narchitecture = \"MLP\"\ninputs = 2\nhidden = []\nclasses = 2\noptimizer = \"sgd\"\n\
         [[network.ops]]\nop = \"ModelOp\"\nmodel = \"other\"\ninputs = \"y_pred\"\noutputs = \"z\"\n\
         [[network.ops]]\nop = \"MeanSquaredError\"\ninputs = [\"z\", \"y\"]\noutputs = \"mse2\"\n\
         [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\n\
         [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"other\"\nloss = \"mse2\"\n"
    );
    let (network, _) = build(&text).unwrap();
    let plan = network.plan(Mode::Train, 1, "", &BTreeSet::new()).unwrap();
    assert_eq!(plan.defer, [false, false, false, false, true, true]);
    assert_eq!(plan.retain_graph, [false, false, false, false, true, false]);
    // In eval the updates do not run, so nothing needs gradients.
    let eval = network.plan(Mode::Eval, 1, "", &BTreeSet::new()).unwrap();
    assert!(!eval.requires_grad);
}

#[test]
fn deferred_two_model_updates_differentiate_against_the_forward_weights() {
    // Model `other` reads `lin`'s output: updating `lin` first without deferring would change
    // the weights `other`'s loss was computed with.
    let text = format!(
        "{LINEAR}\n[[models]]\nname = \"other\"\narchitecture = \"MLP\"\ninputs = 2\nhidden = []\nclasses = 2\noptimizer = \"sgd\"\n\
         [[network.ops]]\nop = \"ModelOp\"\nmodel = \"other\"\ninputs = \"y_pred\"\noutputs = \"z\"\n\
         [[network.ops]]\nop = \"MeanSquaredError\"\ninputs = [\"z\", \"y\"]\noutputs = \"mse2\"\n\
         [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse2\"\n\
         [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"other\"\nloss = \"mse2\"\n"
    );
    let (mut network, keys) = build(&text).unwrap();
    let (x, y) = data(5);
    let mut b = batch(&keys, &[("x", x), ("y", y)]);
    let plan = network.plan(Mode::Train, 1, "", &BTreeSet::new()).unwrap();
    network
        .run_step(&plan, &mut b, &step(Mode::Train, 1))
        .expect("deferred updates succeed");
}

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
    tch::manual_seed(9);
    let x = Tensor::randn([8, 3], (Kind::Float, Device::Cpu));
    let y = Tensor::randn([8, 2], (Kind::Float, Device::Cpu));
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
