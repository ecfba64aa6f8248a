//! `L2Regularization` (FastEstimator's `L2Regularizaton`) on a real model from the models
//! plugin: the value against `.venv`'s PyTorch on the same weights, the gradient it adds
//! (`beta · w`) through one SGD step, and weights that end smaller than without it.

use std::collections::BTreeSet;

use fe_plugin_api::Mode;
use tch::Tensor;

use crate::network::{batch, build, data, step, weights, LINEAR};
use crate::updates::train_step;
use crate::util::{run_python_helper, TempDir};

fn l2_op(name: &str, beta: f64) -> String {
    format!(
        "\n[[network.ops]]\nop = \"{name}\"\nmodel = \"lin\"\ninputs = \"mse\"\noutputs = \"mse_l2\"\nbeta = {beta}\n"
    )
}

const UPDATE_L2: &str =
    "\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse_l2\"\n";
const UPDATE_PLAIN: &str =
    "\n[[network.ops]]\nop = \"UpdateOp\"\nmodel = \"lin\"\nloss = \"mse\"\n";

/// `torch.nn.functional.mse_loss` of a `Linear(3, 2)` with the given weights, plus
/// `beta · Σ sum(p²) / 2` (FastEstimator's `l2_regularization`), in float32 as PyTorch runs it.
const REFERENCE: &str = r#"
import json, sys, torch
d = json.load(open(sys.argv[1]))
w = torch.tensor(d["weight"], dtype=torch.float32)
b = torch.tensor(d["bias"], dtype=torch.float32)
x = torch.tensor(d["x"], dtype=torch.float32)
y = torch.tensor(d["y"], dtype=torch.float32)
loss = torch.nn.functional.mse_loss(x @ w.T + b, y)
total = loss + d["beta"] * torch.sum(torch.stack([torch.sum(p.pow(2)) / 2 for p in (b, w)]))
print(json.dumps({"loss": loss.item(), "total": total.item()}))
"#;

fn values(t: &Tensor) -> serde_json::Value {
    let shape = t.size();
    let flat = Vec::<f32>::try_from(&t.flatten(0, -1)).unwrap();
    match shape.as_slice() {
        [_] => serde_json::json!(flat),
        [_, cols] => serde_json::json!(flat
            .chunks(*cols as usize)
            .map(|r| r.to_vec())
            .collect::<Vec<_>>()),
        _ => panic!("unexpected shape {shape:?}"),
    }
}

#[test]
fn l2_regularization_adds_beta_half_squared_weights_as_pytorch_computes_it() {
    for name in ["L2Regularization", "L2Regularizaton"] {
        let (mut network, keys) = build(&format!("{LINEAR}{}", l2_op(name, 0.3))).unwrap();
        let (x, y) = data(5);
        let (mse, total) = (keys.get("mse").unwrap(), keys.get("mse_l2").unwrap());
        let wanted: BTreeSet<_> = [mse, total].into_iter().collect();
        let plan = network.plan(Mode::Eval, 1, "", &wanted).unwrap();
        let mut b = batch(&keys, &[("x", x.shallow_clone()), ("y", y.shallow_clone())]);
        network
            .run_step(&plan, &mut b, &step(Mode::Eval, 1))
            .unwrap();
        let got_loss = b.get(mse).unwrap().double_value(&[]);
        let got = b.get(total).unwrap().double_value(&[]);
        // The models plugin sorts parameters by name: `fc.bias`, `fc.weight`.
        let names = &network.models[0].param_names;
        assert!(
            names[0].ends_with("bias") && names[1].ends_with("weight"),
            "{names:?}"
        );
        let w = weights(&network);
        let dir = TempDir::new("l2-ref");
        let input = serde_json::json!({
            "bias": values(&w[0]), "weight": values(&w[1]),
            "x": values(&x), "y": values(&y), "beta": 0.3,
        });
        dir.write("in.json", &input.to_string());
        let out = run_python_helper(dir.path(), REFERENCE, &["in.json"]);
        let want: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let (want_loss, want_total) = (
            want["loss"].as_f64().unwrap(),
            want["total"].as_f64().unwrap(),
        );
        assert!(
            (got_loss - want_loss).abs() < 1e-6,
            "{got_loss} vs {want_loss}"
        );
        // The penalty is not negligible here: a test that dropped it would fail.
        assert!(want_total - want_loss > 0.1, "{want_total} {want_loss}");
        assert!(
            (got - want_total).abs() <= 1e-6 * want_total.abs(),
            "{name}: fe-host {got}, PyTorch {want_total}"
        );
    }
}

#[test]
fn one_sgd_step_on_the_regularized_loss_also_moves_each_weight_by_minus_lr_beta_w() {
    // d/dw (beta · w² / 2) = beta · w: with SGD(lr) the step differs from the plain one by
    // exactly −lr · beta · w0.
    let (beta, lr) = (0.5, 0.1);
    let (x, y) = data(9);
    let (mut plain, keys) = build(&format!("{LINEAR}{UPDATE_PLAIN}")).unwrap();
    let start = weights(&plain);
    train_step(
        &mut plain,
        &keys,
        &[("x", x.shallow_clone()), ("y", y.shallow_clone())],
        1,
    )
    .unwrap();
    let (mut regular, keys) = build(&format!(
        "{LINEAR}{}{UPDATE_L2}",
        l2_op("L2Regularization", beta)
    ))
    .unwrap();
    assert!(weights(&regular)
        .iter()
        .zip(&start)
        .all(|(a, b)| a.equal(b)));
    train_step(&mut regular, &keys, &[("x", x), ("y", y)], 1).unwrap();
    for ((got, plain), w0) in weights(&regular).iter().zip(weights(&plain)).zip(&start) {
        let want = plain - w0 * (lr * beta);
        let diff = (got - &want).abs().max().double_value(&[]);
        assert!(diff < 1e-6, "off by {diff}: {got} vs {want}");
    }
}

#[test]
fn training_with_l2_regularization_ends_with_smaller_weights_than_without() {
    let norm = |update: &str, l2: &str| {
        let (mut network, keys) = build(&format!("{LINEAR}{l2}{update}")).unwrap();
        for call in 1..=30 {
            let (x, y) = data(100 + call as i64);
            train_step(&mut network, &keys, &[("x", x), ("y", y)], call).unwrap();
        }
        weights(&network)
            .iter()
            .map(|w| w.square().sum(tch::Kind::Double).double_value(&[]))
            .sum::<f64>()
    };
    let without = norm(UPDATE_PLAIN, "");
    let with = norm(UPDATE_L2, &l2_op("L2Regularization", 0.5));
    assert!(with < 0.8 * without, "with L2 {with}, without {without}");
}

#[test]
fn l2_regularization_refuses_an_unknown_model_and_a_negative_beta() {
    let unknown = format!("{LINEAR}{}", l2_op("L2Regularization", 0.1)).replace(
        "model = \"lin\"\ninputs = \"mse\"",
        "model = \"nope\"\ninputs = \"mse\"",
    );
    let error = build(&unknown).err().unwrap().to_string();
    assert!(error.contains("unknown model `nope`"), "{error}");
    let negative = format!("{LINEAR}{}", l2_op("L2Regularization", -1.0));
    let error = build(&negative).err().unwrap().to_string();
    assert!(error.contains("beta") && error.contains(">= 0"), "{error}");
}
