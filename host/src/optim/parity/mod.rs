//! fe-host's optimizers and gradient clipping against `.venv`'s torch, bit for bit: torch 2.11
//! applies five steps of given gradients to a small conv net's parameters (reference.py), and
//! every parameter and state tensor here must have exactly the bytes it has there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tch::Tensor;

use super::{build, Clip, Optimizer};

/// `(name, fe-host optimizer table, torch.optim class, its keyword arguments as JSON)`. Adam,
/// AdamW and RMSprop leave everything at the defaults somewhere, so the defaults are compared
/// too; SGD's learning rate is always given (fe-host's default 0.01 is FastEstimator's, torch's
/// is 1e-3).
const VARIANTS: &[(&str, &str, &str, &str)] = &[
    ("sgd", "type='sgd'\nlr=0.1", "SGD", r#"{"lr": 0.1}"#),
    ("sgd_wd", "type='sgd'\nlr=0.1\nweight_decay=0.01", "SGD", r#"{"lr": 0.1, "weight_decay": 0.01}"#),
    ("sgd_momentum", "type='sgd'\nlr=0.05\nmomentum=0.9", "SGD", r#"{"lr": 0.05, "momentum": 0.9}"#),
    (
        "sgd_dampening_wd",
        "type='sgd'\nlr=0.05\nmomentum=0.9\ndampening=0.1\nweight_decay=1e-4",
        "SGD",
        r#"{"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 1e-4}"#,
    ),
    (
        "sgd_nesterov_wd",
        "type='sgd'\nlr=0.05\nmomentum=0.9\nnesterov=true\nweight_decay=5e-4",
        "SGD",
        r#"{"lr": 0.05, "momentum": 0.9, "nesterov": true, "weight_decay": 5e-4}"#,
    ),
    ("adam", "type='adam'\nfused=false", "Adam", r#"{"foreach": false}"#),
    (
        "adam_wd_amsgrad",
        "type='adam'\nlr=0.01\nweight_decay=0.1\namsgrad=true\nfused=false",
        "Adam",
        r#"{"lr": 0.01, "weight_decay": 0.1, "amsgrad": true, "foreach": false}"#,
    ),
    ("adam_fused", "type='adam'", "Adam", r#"{"fused": true}"#),
    (
        "adam_fused_wd_amsgrad",
        "type='adam'\nlr=0.01\nweight_decay=0.1\namsgrad=true",
        "Adam",
        r#"{"lr": 0.01, "weight_decay": 0.1, "amsgrad": true, "fused": true}"#,
    ),
    ("adamw", "type='adamw'\nfused=false", "AdamW", r#"{"foreach": false}"#),
    (
        "adamw_amsgrad_betas",
        "type='adamw'\nlr=0.01\nbetas=[0.8, 0.99]\neps=1e-6\nweight_decay=0.05\namsgrad=true\nfused=false",
        "AdamW",
        r#"{"lr": 0.01, "betas": [0.8, 0.99], "eps": 1e-6, "weight_decay": 0.05, "amsgrad": true, "foreach": false}"#,
    ),
    ("adamw_fused", "type='adamw'", "AdamW", r#"{"fused": true}"#),
    ("rmsprop", "type='rmsprop'", "RMSprop", r#"{"foreach": false}"#),
    (
        "rmsprop_momentum_wd",
        "type='rmsprop'\nlr=0.001\nmomentum=0.9\nweight_decay=0.01",
        "RMSprop",
        r#"{"lr": 0.001, "momentum": 0.9, "weight_decay": 0.01, "foreach": false}"#,
    ),
    (
        "rmsprop_centered",
        "type='rmsprop'\nlr=0.001\nalpha=0.9\neps=1e-6\nmomentum=0.5\ncentered=true",
        "RMSprop",
        r#"{"lr": 0.001, "alpha": 0.9, "eps": 1e-6, "momentum": 0.5, "centered": true, "foreach": false}"#,
    ),
];

/// What reference.py wrote: it runs once for every test of this module (a few seconds), and
/// each test reads the file (tensors cannot be shared between test threads).
fn reference() -> HashMap<String, Tensor> {
    static REFERENCE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let file = REFERENCE.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = root.join("target/tmp");
        std::fs::create_dir_all(&dir).unwrap();
        let tag = std::process::id();
        let variants = dir.join(format!("optim-parity-{tag}.json"));
        let out = dir.join(format!("optim-parity-{tag}.npz"));
        let json: Vec<String> = VARIANTS
            .iter()
            .map(|(name, _, class, kwargs)| {
                format!(r#"{{"name": "{name}", "class": "{class}", "kwargs": {kwargs}}}"#)
            })
            .collect();
        std::fs::write(&variants, format!("[{}]", json.join(","))).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/optim/parity/reference.py");
        let output = std::process::Command::new(root.join(".venv/bin/python"))
            .arg(&script)
            .arg(&variants)
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "reference.py failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let _ = std::fs::remove_file(&variants);
        out
    });
    Tensor::read_npz(file).unwrap().into_iter().collect()
}

fn get<'a>(reference: &'a HashMap<String, Tensor>, name: &str) -> &'a Tensor {
    reference
        .get(name)
        .unwrap_or_else(|| panic!("reference.py wrote no `{name}`"))
}

/// How many elements of `ours` differ from `theirs` in any bit (shape and dtype must agree).
fn differing_bits(ours: &Tensor, theirs: &Tensor) -> usize {
    assert_eq!(ours.size(), theirs.size());
    assert_eq!(ours.kind(), theirs.kind());
    let bits = |t: &Tensor| -> Vec<u32> {
        let values = Vec::<f32>::try_from(t.detach().flatten(0, -1)).unwrap();
        values.into_iter().map(f32::to_bits).collect()
    };
    bits(ours)
        .iter()
        .zip(bits(theirs))
        .filter(|(a, b)| **a != *b)
        .count()
}

fn count_params(reference: &HashMap<String, Tensor>) -> usize {
    (0..)
        .take_while(|i| reference.contains_key(&format!("param/{i}")))
        .count()
}

fn run_ours(optimizer: &mut dyn Optimizer, reference: &HashMap<String, Tensor>) -> Vec<Tensor> {
    let n = count_params(reference);
    let params: Vec<Tensor> = (0..n)
        .map(|i| {
            get(reference, &format!("param/{i}"))
                .copy()
                .set_requires_grad(true)
        })
        .collect();
    for step in 0..5 {
        let grads: Vec<Tensor> = (0..n)
            .map(|i| get(reference, &format!("grad/{step}/{i}")).copy())
            .collect();
        optimizer.step(&params, &grads).unwrap();
    }
    params
}

#[test]
fn every_optimizer_variant_is_bit_identical_to_torch_optim() {
    let reference = &reference();
    let mut failures = Vec::new();
    for (name, table, _, _) in VARIANTS {
        let mut optimizer = build(&table.parse().unwrap()).unwrap().optimizer;
        let params = run_ours(optimizer.as_mut(), reference);
        let mut compared = 0;
        for (i, param) in params.iter().enumerate() {
            let differ = differing_bits(param, get(reference, &format!("{name}/param/{i}")));
            if differ > 0 {
                failures.push(format!("{name}: parameter {i}: {differ} values differ"));
            }
            compared += 1;
        }
        let state = optimizer.tensor_state();
        for (key, tensor) in &state {
            let differ = differing_bits(tensor, get(reference, &format!("{name}/{key}")));
            if differ > 0 {
                failures.push(format!("{name}: state `{key}`: {differ} values differ"));
            }
            compared += 1;
        }
        // Every state tensor torch keeps (other than its step count) must exist here too.
        let theirs = reference
            .keys()
            .filter(|k| k.starts_with(&format!("{name}/")) && !k.contains("/step/"))
            .count();
        assert_eq!(
            compared, theirs,
            "{name}: state tensors missing on one side"
        );
        if let Some(step) = optimizer.hyper_state().get("step") {
            let theirs = get(reference, &format!("{name}/step/0")).double_value(&[]);
            assert_eq!(step.as_f64(), Some(theirs), "{name}: step count");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn clipping_is_bit_identical_to_clip_grad_norm_and_clip_grad_value() {
    let reference = &reference();
    let n = count_params(reference);
    let grads: Vec<Tensor> = (0..n)
        .map(|i| get(reference, &format!("grad/3/{i}")).copy())
        .collect();
    let norm = |max_norm, norm_type| Clip::Norm {
        max_norm,
        norm_type,
    };
    for (tag, clip) in [
        ("norm2", norm(1.0, 2.0)),
        ("norm3", norm(1.0, 3.0)),
        ("norminf", norm(1.0, f64::INFINITY)),
        ("big", norm(1e6, 2.0)),
        ("value", Clip::Value(0.5)),
    ] {
        let before: Vec<Tensor> = grads.iter().map(Tensor::copy).collect();
        let clipped = clip.apply(&grads).unwrap();
        for (i, g) in clipped.iter().enumerate() {
            let differ = differing_bits(g, get(reference, &format!("clip/{tag}/{i}")));
            assert_eq!(differ, 0, "{tag}: gradient {i}: {differ} values differ");
            // The inputs may be a batch's keys: clipping must leave them as they were.
            assert_eq!(
                differing_bits(&grads[i], &before[i]),
                0,
                "{tag}: input changed"
            );
        }
        if tag != "big" {
            assert!(
                differing_bits(&clipped[0], &grads[0]) > 0,
                "{tag} clipped nothing"
            );
        }
    }
}

#[test]
fn clipping_skips_undefined_gradients() {
    let grads = vec![Tensor::new(), Tensor::from_slice(&[3.0f32, 4.0])];
    let clipped = Clip::Norm {
        max_norm: 1.0,
        norm_type: 2.0,
    }
    .apply(&grads)
    .unwrap();
    assert!(!clipped[0].defined());
    let values = Vec::<f32>::try_from(&clipped[1]).unwrap();
    assert!(
        (values[0] - 0.6).abs() < 1e-6 && (values[1] - 0.8).abs() < 1e-6,
        "{values:?}"
    );
}
