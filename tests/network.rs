//! The Network's semantics (FastEstimator's `fe.network` and `fe.op.tensorop.UpdateOp` documentation), driven through the library with real plugins
//! loaded by the real loader: key resolution, filters, slicers, UpdateOp, mixed precision.

use std::collections::BTreeSet;
use std::path::Path;

use fe_host::components::load_registry;
use fe_host::manifest::Manifest;
use fe_host::network::{Batch, Keys, Network};
use fe_host::plugins::{search_path, Registry};
use fe_plugin_api::{Mode, StepContext};
use tch::{Device, Kind, Tensor};

use crate::util::{ensure_plugins, plugin_dir};

pub(crate) fn registry() -> Registry {
    ensure_plugins();
    let search = search_path(&[], &[plugin_dir()], None, None);
    load_registry(&search, &Default::default()).expect("plugins load")
}

const PIPELINE: &str = "[pipeline]\nbatch_size = 4\n";

/// A network built from manifest `text` (a pipeline section is added). Every model's
/// parameters are then overwritten from a private generator: tests run in parallel and share
/// libtorch's process-wide one, so initialising from it would make "same start" depend on
/// which other test drew from it in between.
pub(crate) fn build(text: &str) -> Result<(Network, Keys), fe_host::Error> {
    build_on(text, Device::Cpu)
}

/// [`build`] with the models on `device`.
pub(crate) fn build_on(text: &str, device: Device) -> Result<(Network, Keys), fe_host::Error> {
    let manifest = Manifest::parse(Path::new("net.toml"), format!("{PIPELINE}{text}"))?;
    let registry = registry();
    let mut keys = Keys::default();
    let network = fe_host::network::build::build(&manifest, &registry, &mut keys, device)?;
    let _no_grad = tch::no_grad_guard();
    for (m, model) in network.models.iter().enumerate() {
        for (i, param) in model.params.iter().enumerate() {
            let values = random(&param.size(), 1000 + 100 * m as u64 + i as u64);
            let values = values.to_kind(param.kind()).to_device(param.device());
            param.shallow_clone().copy_(&values);
        }
    }
    Ok((network, keys))
}

/// Standard-normal-ish values of `shape` from `seed` alone (never libtorch's shared generator).
pub(crate) fn random(shape: &[i64], seed: u64) -> Tensor {
    use rand::Rng;
    use rand_chacha::rand_core::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let n: i64 = shape.iter().product();
    // The sum of 4 uniforms on [-sqrt(3), sqrt(3)] has variance 4; halve it for variance 1.
    let values: Vec<f32> = (0..n)
        .map(|_| {
            (0..4)
                .map(|_| rng.random_range(-1.732f32..1.732))
                .sum::<f32>()
                / 2.0
        })
        .collect();
    Tensor::from_slice(&values).reshape(shape)
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

pub(crate) fn step(mode: Mode, global_step: u64) -> StepContext<'static> {
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

pub(crate) fn batch(keys: &Keys, values: &[(&str, Tensor)]) -> Batch {
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
op = "MeanSquaredError"
inputs = ["a", "b"]
outputs = "neither_ds1_nor_ds2"
ds_id = ["!ds1", "!ds2"]

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
    assert_eq!(
        train,
        ["train_only", "not_ds1", "neither_ds1_nor_ds2", "loss"]
    );
    let eval = outputs_of(&network, &keys, Mode::Eval, "");
    assert_eq!(
        eval,
        ["not_train", "not_ds1", "neither_ds1_nor_ds2", "loss"]
    );
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
    assert_eq!(
        ds3,
        ["train_only", "not_ds1", "neither_ds1_nor_ds2", "loss"]
    );
}

#[test]
fn infer_never_runs_losses() {
    let (network, keys) = build(FILTERED_OPS).unwrap();
    let infer = outputs_of(&network, &keys, Mode::Infer, "");
    assert!(!infer.contains(&"loss".to_owned()), "{infer:?}");
    assert_eq!(
        labels(&network, Mode::Test, "").last().map(String::as_str),
        Some("CrossEntropy (network.ops[6])")
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
         [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"a\"\nloss = \"l\"\ngradients = \"g\"\n",
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
pub(crate) const LINEAR: &str = r#"
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

pub(crate) fn weights(network: &Network) -> Vec<Tensor> {
    network.models[0]
        .params
        .iter()
        .map(|p| p.detach().copy())
        .collect()
}

pub(crate) fn data(seed: i64) -> (Tensor, Tensor) {
    (
        random(&[4, 3], 2 * seed as u64),
        random(&[4, 2], 2 * seed as u64 + 1),
    )
}

#[test]
fn networks_built_while_other_threads_draw_from_libtorch_start_equal() {
    // Other tests of this binary seed and draw from libtorch's shared generator at any time.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let noise = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = Tensor::rand([64], (Kind::Float, Device::Cpu));
            }
        })
    };
    let starts: Vec<Vec<Tensor>> = (0..4).map(|_| weights(&build(LINEAR).unwrap().0)).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    noise.join().unwrap();
    for other in &starts[1..] {
        assert!(other.iter().zip(&starts[0]).all(|(a, b)| a.equal(b)));
    }
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
    let mut previous: Vec<Tensor> = start.iter().map(Tensor::copy).collect();
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
        // Against the weights before this call: only every third call updates.
        let changed = now.iter().zip(&previous).any(|(a, b)| !a.equal(b));
        assert_eq!(
            changed,
            call % 3 == 0,
            "weights changed at call {call}: {changed}"
        );
        previous = now.iter().map(Tensor::copy).collect();
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
                     [[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\ngradients = \"g\"\n";
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
    let params = |network: &Network, model: usize| -> Vec<Tensor> {
        network.models[model]
            .params
            .iter()
            .map(|p| p.detach().copy())
            .collect()
    };
    let before = [params(&network, 0), params(&network, 1)];
    network
        .run_step(&plan, &mut b, &step(Mode::Train, 1))
        .expect("deferred updates succeed");
    // Both models were updated, and the loss both trained on came back.
    for (model, start) in before.iter().enumerate() {
        let after = params(&network, model);
        assert!(
            after.iter().zip(start).any(|(a, s)| !a.equal(s)),
            "model {model} was not updated"
        );
    }
    let loss = b.get(keys.get("mse2").unwrap()).expect("mse2 comes back");
    assert!(loss.double_value(&[]).is_finite());
}

#[test]
fn with_no_wanted_keys_everything_the_network_produces_comes_back() {
    // `_get_ctx_inputs_and_outputs`: without desired keys the outputs are every produced key.
    let (network, keys) = build(LINEAR).unwrap();
    let plan = network.plan(Mode::Train, 1, "", &BTreeSet::new()).unwrap();
    assert_eq!(keys.names(plan.outputs.iter().copied()), ["y_pred", "mse"]);
    // With wanted keys, only those (and what post-processing reads) come back.
    let wanted: BTreeSet<_> = [keys.get("mse").unwrap()].into();
    let plan = network.plan(Mode::Train, 1, "", &wanted).unwrap();
    assert_eq!(keys.names(plan.outputs.iter().copied()), ["mse"]);
}

#[test]
fn a_sliced_key_post_processing_reads_must_be_unsliced() {
    // FastEstimator counts what post-processing reads as wanted, so a sliced key it reads
    // must be unsliced like any other.
    let slicer = "\n[[network.slicers]]\nslicer = \"AxisSlicer\"\nslice = [\"x\", \"y\"]\nunslice = [\"y_pred\", \"mse\"]\naxis = 0\nminibatch_size = 2\n";
    let post = "\n[[network.postprocessing]]\nop = \"Onehot\"\ninputs = \"y\"\noutputs = \"y_hot\"\nnum_classes = 2\n";
    let (network, keys) = build(&format!("{LINEAR}{slicer}{post}")).unwrap();
    let wanted: BTreeSet<_> = [keys.get("mse").unwrap()].into();
    let err = network.plan(Mode::Train, 1, "", &wanted).unwrap_err();
    assert!(
        err.starts_with("since you are using slicers, you must say how to unslice these keys in train (epoch 1): y"),
        "{err}"
    );
    // Unslicing it too makes the plan valid.
    let slicer = slicer.replace(
        "unslice = [\"y_pred\", \"mse\"]",
        "unslice = [\"y_pred\", \"mse\", \"y\"]",
    );
    let (network, keys) = build(&format!("{LINEAR}{slicer}{post}")).unwrap();
    let wanted: BTreeSet<_> = [keys.get("mse").unwrap()].into();
    network.plan(Mode::Train, 1, "", &wanted).unwrap();
}
