//! `SuperLoss` (fe-losses) through a real network against FastEstimator's formula computed
//! with scipy's `lambertw` in float64 (tests/fixtures/super_loss_reference.py): the
//! moving-average threshold over several steps (a warm-up pass first, which must not start
//! the average), a fixed threshold, and losses far above τ that hit the −2/e cap.

use std::collections::BTreeSet;

use fe_plugin_api::{Mode, StepContext};
use tch::{Kind, Tensor};

use crate::network::{batch, build, step};
use crate::util::TempDir;

fn manifest(config: &str) -> String {
    format!(
        "[[network.ops]]\nop = \"SuperLoss\"\ninputs = \"l\"\noutputs = [\"sl\", \"conf\"]\naverage_loss = false\n{config}\n"
    )
}

/// Per-sample losses of step `s`: mostly between 0.3 and 2.3, one far above (the smallest
/// confidence) and one near 0, far enough below τ for the cap.
fn losses(s: u64) -> Vec<f64> {
    (0..9)
        .map(|i| {
            let x = ((s * 31 + i * 17) % 23) as f64 / 23.0;
            match i {
                0 => 12.0 + x,
                1 => 1e-4 * x,
                _ => 0.3 + 2.0 * x,
            }
        })
        .collect()
}

/// Runs `steps` (each `(warmup, losses)`) through SuperLoss; its outputs per step.
fn run(config: &str, steps: &[(bool, Vec<f64>)]) -> Vec<(Vec<f64>, Vec<f64>)> {
    let (mut network, keys) = build(&manifest(config)).unwrap();
    let (sl, conf) = (keys.get("sl").unwrap(), keys.get("conf").unwrap());
    let wanted: BTreeSet<_> = [sl, conf].into_iter().collect();
    let plan = network.plan(Mode::Train, 1, "", &wanted).unwrap();
    let mut out = Vec::new();
    for (index, (warmup, values)) in steps.iter().enumerate() {
        let mut b = batch(&keys, &[("l", Tensor::from_slice(values))]);
        let ctx = StepContext {
            warmup: *warmup,
            ..step(Mode::Train, index as u64 + 1)
        };
        network.run_step(&plan, &mut b, &ctx).unwrap();
        let get = |key| Vec::<f64>::try_from(&b.get(key).unwrap().to_kind(Kind::Double)).unwrap();
        out.push((get(sl), get(conf)));
    }
    out
}

fn reference(threshold: &str, lam: f64, steps: &[(bool, Vec<f64>)]) -> serde_json::Value {
    let dir = TempDir::new("super-loss-ref");
    let input = serde_json::json!({ "threshold": threshold, "lam": lam, "steps": steps });
    let path = dir.write("in.json", &input.to_string());
    crate::util::python_fixture_json("super_loss_reference.py", &[&path])
}

fn assert_matches(got: &[(Vec<f64>, Vec<f64>)], want: &serde_json::Value, what: &str) {
    let want = want.as_array().unwrap();
    assert_eq!(got.len(), want.len());
    for (s, ((sl, conf), w)) in got.iter().zip(want).enumerate() {
        for (key, values) in [("loss", sl), ("confidence", conf)] {
            let expected: Vec<f64> = serde_json::from_value(w[key].clone()).unwrap();
            for (i, (g, e)) in values.iter().zip(&expected).enumerate() {
                assert!(
                    (g - e).abs() <= 1e-9 * e.abs().max(1.0),
                    "{what}, step {s}, sample {i}, {key}: fe-host {g}, reference {e}"
                );
            }
        }
    }
}

#[test]
fn super_loss_equals_fastestimators_formula_with_scipys_lambert_w() {
    // A warm-up call first: FastEstimator sets τ then but does not count it, so step 1
    // starts the moving average from its own mean.
    let steps: Vec<(bool, Vec<f64>)> = std::iter::once((true, vec![50.0; 9]))
        .chain((1..=6).map(|s| (false, losses(s))))
        .collect();
    let got = run("", &steps);
    assert_matches(&got, &reference("exp", 1.0, &steps), "threshold exp");
    // The hardest sample gets the least weight; one at the cap the most:
    // σ = exp(−W(½·(−1.9999998/e))) ≈ 2.717, just under e.
    let (_, conf) = &got[3];
    let smallest = conf.iter().cloned().fold(f64::INFINITY, f64::min);
    let largest = conf.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(smallest, conf[0], "{conf:?}");
    assert_eq!(largest, conf[1], "{conf:?}");
    assert!(conf[1] > 2.71 && conf[1] < std::f64::consts::E, "{conf:?}");
    let got = run("threshold = 0.8\nregularization = 0.25", &steps[1..]);
    assert_matches(
        &got,
        &reference("0.8", 0.25, &steps[1..]),
        "threshold 0.8, lambda 0.25",
    );
}

#[test]
fn super_loss_averages_the_per_sample_values_by_default() {
    let (mut network, keys) =
        build("[[network.ops]]\nop = \"SuperLoss\"\ninputs = \"l\"\noutputs = \"sl\"\n").unwrap();
    let sl = keys.get("sl").unwrap();
    let wanted: BTreeSet<_> = [sl].into_iter().collect();
    let plan = network.plan(Mode::Train, 1, "", &wanted).unwrap();
    let mut values = Vec::new();
    for s in 1..=3 {
        let mut b = batch(&keys, &[("l", Tensor::from_slice(&losses(s)))]);
        network
            .run_step(&plan, &mut b, &step(Mode::Train, s))
            .unwrap();
        values.push(b.get(sl).unwrap().double_value(&[]));
    }
    let want = reference(
        "exp",
        1.0,
        &(1..=3).map(|s| (false, losses(s))).collect::<Vec<_>>(),
    );
    for (s, got) in values.iter().enumerate() {
        let per_sample: Vec<f64> = serde_json::from_value(want[s]["loss"].clone()).unwrap();
        let mean = per_sample.iter().sum::<f64>() / per_sample.len() as f64;
        assert!((got - mean).abs() < 1e-9, "step {s}: {got} vs {mean}");
    }
}
