use std::path::Path;

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::testing;

fn run(op: &str, config: &str, input: &Tensor) -> Tensor {
    let mut op = testing::tensor_op(op, config, &["x"], &["y"]).unwrap();
    op.forward(&[input]).unwrap().remove(0)
}

fn floats(t: &Tensor) -> Vec<f32> {
    Vec::try_from(t.to_kind(Kind::Float).flatten(0, -1)).unwrap()
}

fn classes(probabilities: &Tensor) -> Vec<i64> {
    Vec::try_from(probabilities.argmax(-1, false)).unwrap()
}

/// FastEstimator's `test_10class_16code` codes (Hadamard's expected output, UnHadamard's input).
const CODES_10_16: [[f32; 16]; 5] = [
    [
        -1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1.,
    ],
    [
        1., -1., 1., -1., 1., -1., 1., -1., 1., -1., 1., -1., 1., -1., 1., -1.,
    ],
    [
        1., -1., 1., -1., 1., -1., 1., -1., -1., 1., -1., 1., -1., 1., -1., 1.,
    ],
    [
        -1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1.,
    ],
    [
        -1., 1., 1., 1., -1., -1., -1., -1., 1., 1., 1., 1., -1., -1., -1., -1.,
    ],
];

#[test]
fn fastestimator_test_values() {
    // test_hadamard.py test_4class: float labels [3, 2, 2, 2, 0], 4 classes.
    let codes_4 = [
        [1., -1., -1., 1.],
        [-1., 1., -1., -1.],
        [-1., 1., -1., -1.],
        [-1., 1., -1., -1.],
        [-1., 1., 1., 1.],
    ];
    let labels = Tensor::from_slice(&[3.0f32, 2.0, 2.0, 2.0, 0.0]);
    let out = run("Hadamard", "n_classes = 4", &labels);
    assert_eq!(out.kind(), Kind::Float);
    assert_eq!(out.size(), [5, 4]);
    assert_eq!(floats(&out), codes_4.concat());
    // test_10class_16code: [B, 1] labels [0, 1, 9, 0, 4].
    let labels = Tensor::from_slice(&[0i64, 1, 9, 0, 4]).reshape([5, 1]);
    let out = run("Hadamard", "n_classes = 10\ncode_length = 16", &labels);
    assert_eq!(out.size(), [5, 16]);
    assert_eq!(floats(&out), CODES_10_16.concat());

    // test_un_hadamard.py: the same codes decode to the same classes.
    let codes = Tensor::from_slice(&codes_4.concat()).reshape([5, 4]);
    let probabilities = run("UnHadamard", "n_classes = 4", &codes);
    assert_eq!(classes(&probabilities), [3, 2, 2, 2, 0]);
    let codes = Tensor::from_slice(&CODES_10_16.concat()).reshape([5, 16]);
    let probabilities = run("UnHadamard", "n_classes = 10\ncode_length = 16", &codes);
    assert_eq!(probabilities.size(), [5, 10]);
    assert_eq!(classes(&probabilities), [0, 1, 9, 0, 4]);
}

/// Hadamard rows, UnHadamard probabilities of random tanh outputs, and the round trip, against
/// a numpy reimplementation of FastEstimator's code on `scipy.linalg.hadamard`
/// (`reference/hadamard_reference.py`).
#[test]
fn equals_fastestimators_formulas_with_scipy() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-scratch/hadamard");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut manifest = String::new();
    let settings = [
        (4, None),
        (10, Some(16)),
        (10, None),
        (3, Some(32)),
        (2, None),
        (17, None),
    ];
    for (i, (n_classes, code_length)) in settings.into_iter().enumerate() {
        let mut config = format!("n_classes = {n_classes}");
        if let Some(length) = code_length {
            config.push_str(&format!("\ncode_length = {length}"));
        }
        // Every class at least once, then random ones.
        let labels = Tensor::cat(
            &[
                Tensor::arange(n_classes, (Kind::Int64, Device::Cpu)),
                Tensor::randint(n_classes, [12], (Kind::Int64, Device::Cpu)),
            ],
            0,
        );
        let encoded = run("Hadamard", &config, &labels);
        let length = encoded.size()[1];
        let outputs = Tensor::randn([9, length], (Kind::Float, Device::Cpu)).tanh();
        let decoded = run("UnHadamard", &config, &outputs);
        let round_trip = run("UnHadamard", &config, &encoded);
        assert_eq!(classes(&round_trip), Vec::<i64>::try_from(&labels).unwrap());
        for (name, t) in [
            ("labels", &labels),
            ("encoded", &encoded),
            ("outputs", &outputs),
            ("decoded", &decoded),
            ("round_trip", &round_trip),
        ] {
            t.write_npy(dir.join(format!("{name}{i}.npy"))).unwrap();
        }
        let length = code_length.map_or("None".to_owned(), |l: i64| l.to_string());
        manifest.push_str(&format!("{i} {n_classes} {length}\n"));
    }
    std::fs::write(dir.join("cases.txt"), manifest).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("../../.venv/bin/python"))
        .arg(root.join("reference/hadamard_reference.py"))
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "Hadamard/UnHadamard differ from the reference: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        settings.len()
    );
}

#[test]
fn round_trip_is_confident_and_gradients_reach_the_codes() {
    let labels = Tensor::arange(10, (Kind::Int64, Device::Cpu));
    let config = "n_classes = 10";
    let codes = run("Hadamard", config, &labels).set_requires_grad(true);
    let probabilities = run("UnHadamard", config, &codes);
    // A perfect code is at distance 0, clamped to eps; every other row is at distance ≥
    // code_length / 2 = 8, so the own class gets nearly everything.
    let own = probabilities.gather(1, &labels.unsqueeze(1), false);
    assert!(own.min().double_value(&[]) > 0.9999, "{own}");
    let sums = probabilities.sum_dim_intlist(-1, false, Kind::Double);
    assert!((sums - 1.0).abs().max().double_value(&[]) < 1e-6);
    // Differentiable (FastEstimator uses it after the model, before the loss).
    let out = run("UnHadamard", config, &(&codes * 0.5));
    out.select(1, 3).sum(Kind::Float).backward();
    assert!(codes.grad().abs().sum(Kind::Float).double_value(&[]) > 0.0);
}

#[test]
fn bad_labels_and_shapes_are_errors() {
    let mut op = testing::tensor_op("Hadamard", "n_classes = 4", &["y"], &["c"]).unwrap();
    for labels in [
        Tensor::from_slice(&[0i64, 4]),
        Tensor::from_slice(&[-1i64, 2]),
        Tensor::zeros([2, 2], (Kind::Int64, Device::Cpu)),
    ] {
        assert!(op.forward(&[&labels]).is_err(), "{labels}");
    }
    // A batch of one keeps its batch dimension (FastEstimator's squeeze would drop it).
    let one = Tensor::from_slice(&[2i64]).reshape([1, 1]);
    assert_eq!(op.forward(&[&one]).unwrap()[0].size(), [1, 4]);
    let mut op = testing::tensor_op("UnHadamard", "n_classes = 4", &["c"], &["p"]).unwrap();
    let wrong = Tensor::zeros([3, 8], (Kind::Float, Device::Cpu));
    let err = op.forward(&[&wrong]).unwrap_err();
    assert!(err.message.contains("[B, 4]"), "{err:?}");
}

#[test]
fn config_errors() {
    for op in ["Hadamard", "UnHadamard"] {
        for (config, field) in [
            ("n_classes = 0", "n_classes"),
            ("n_classes = 4\ncode_length = 6", "code_length"),
            ("n_classes = 4\ncode_length = 0", "code_length"),
            ("n_classes = 4\ncode_length = -4", "code_length"),
            ("n_classes = 5\ncode_length = 4", "code_length"),
            ("n_classes = 4\nmax_prob = 0.9", "max_prob"),
        ] {
            let err = testing::tensor_op(op, config, &["x"], &["y"])
                .err()
                .unwrap();
            assert_eq!(err.field.as_str(), field, "{op} {config}: {err:?}");
        }
    }
    // A missing required key is named in the message (serde reports it without a field).
    let err = testing::tensor_op("UnHadamard", "", &["x"], &["y"])
        .err()
        .unwrap();
    assert!(err.message.contains("n_classes"), "{err:?}");
    // One class: Hadamard's code is [-1]; UnHadamard's eps would divide by n_classes - 1.
    let one = run("Hadamard", "n_classes = 1", &Tensor::from_slice(&[0i64]));
    assert_eq!(floats(&one), [-1.0]);
    let err = testing::tensor_op("UnHadamard", "n_classes = 1", &["x"], &["y"])
        .err()
        .unwrap();
    assert_eq!(err.field.as_str(), "n_classes");
}
