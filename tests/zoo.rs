//! The model zoo through the real binary: each architecture's example learns on its generated
//! data in a short run, and the weights `--save-weights` writes load into the architecture's
//! PyTorch reference (tests/fixtures/zoo_reference.py, run by `.venv`'s python) with
//! `load_state_dict(strict=True)` and give fe-host's outputs, in eval mode, within 1e-4.

use std::path::Path;

use crate::util::{copy_example, fe_host, root, steps, values, Run, TempDir};

/// One zoo model's example, shrunk for CI where the example is bigger than a test needs.
struct Case {
    /// `examples/<example>.toml`.
    example: &'static str,
    /// `fe-host datagen <data>` kind, into `data/<data>` next to the examples.
    data: &'static str,
    /// Split sizes (train, eval).
    samples: (usize, usize),
    /// Text replacements in the manifest (smaller widths, fewer epochs).
    edits: &'static [(&'static str, &'static str)],
    /// The model's name in the manifest.
    model: &'static str,
    /// Its architecture and the reference's constructor arguments (after `edits`).
    architecture: &'static str,
    reference_config: &'static str,
    /// The network's input and output keys.
    keys: (&'static str, &'static str),
    /// The evaluation metric and the value it must exceed at the end.
    metric: (&'static str, f64),
}

fn generate(dir: &TempDir, kind: &str, (train, eval): (usize, usize)) {
    let out: Run = fe_host()
        .current_dir(dir.path())
        .args(["datagen", kind, "--out", &format!("data/{kind}")])
        .args(["--train", &train.to_string(), "--eval", &eval.to_string()])
        .args(["--test", "0", "--seed", "5"])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 0, "{}", out.stderr);
}

fn python() -> std::path::PathBuf {
    let python = root().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: scripts/setup.sh installs it",
        python.display()
    );
    python
}

/// Runs the case's example, checks it learned, then compares saved weights and outputs with
/// the PyTorch reference.
fn learns_and_matches_pytorch(case: &Case) {
    let dir = TempDir::new(&format!("zoo-{}", case.example));
    copy_example(&dir, case.example);
    generate(&dir, case.data, case.samples);
    let manifest = dir.path().join(format!("examples/{}.toml", case.example));
    let mut text = std::fs::read_to_string(&manifest).unwrap();
    for (from, to) in case.edits {
        assert!(text.contains(from), "`{from}` not in the example");
        text = text.replace(from, to);
    }
    std::fs::write(&manifest, &text).unwrap();

    let summary = dir.path().join("summary.json");
    let weights = dir.path().join("weights");
    let run: Run = fe_host()
        .current_dir(dir.path())
        .arg("run")
        .arg(&manifest)
        .arg("--summary")
        .arg(&summary)
        .arg("--save-weights")
        .arg(&weights)
        // One libtorch thread: these small networks gain nothing from more, and CI machines
        // run several tests at once.
        .args(["--threads", "1"])
        .output()
        .unwrap()
        .into();
    assert_eq!(
        run.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    let (metric, floor) = case.metric;
    let reached = steps(&summary, "eval", metric);
    let last = reached.last().map(|(_, v)| *v).unwrap_or(f64::NAN);
    assert!(
        last > floor,
        "{}: eval {metric} {reached:?}, expected above {floor}\n{}",
        case.example,
        run.stdout
    );
    let losses = values(&summary, "eval", &eval_loss_key(&summary));
    assert!(
        losses.len() >= 2 && losses[losses.len() - 1] < losses[0],
        "{}: the evaluation loss did not fall: {losses:?}",
        case.example
    );

    let outputs = dir.path().join("outputs.safetensors");
    let (input, output) = case.keys;
    let transform: Run = fe_host()
        .current_dir(dir.path())
        .arg("transform")
        .arg(&manifest)
        .args(["--mode", "eval", "--limit", "16"])
        .args(input.split(',').flat_map(|key| ["--key", key]))
        .args(["--key", output])
        .arg("--weights")
        .arg(&weights)
        .arg("--out")
        .arg(&outputs)
        .output()
        .unwrap()
        .into();
    assert_eq!(transform.code, 0, "{}", transform.stderr);
    compare_with_pytorch(
        case,
        &weights.join(format!("{}.safetensors", case.model)),
        &outputs,
    );
}

/// The evaluation loss key: the one loss the examples compute.
fn eval_loss_key(summary: &serde_json::Value) -> String {
    ["ce", "bce"]
        .into_iter()
        .find(|k| summary["history"]["eval"].get(k).is_some())
        .unwrap_or("ce")
        .to_owned()
}

fn compare_with_pytorch(case: &Case, weights: &Path, outputs: &Path) {
    let (input, output) = case.keys;
    let out = std::process::Command::new(python())
        .arg(root().join("tests/fixtures/zoo_reference.py"))
        .arg(case.architecture)
        .arg(case.reference_config)
        .arg(weights)
        .arg(outputs)
        .args([input, output])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{}: PyTorch reference disagrees or failed:\n{stdout}\n{stderr}",
        case.architecture
    );
    assert_contains!(stdout, "max abs difference");
}

const CIFAR_SMALL: (usize, usize) = (1024, 256);

/// The ResNet examples (width 16, batch 64, 2 epochs) made to learn more from fewer samples:
/// smaller batches, more epochs, a higher learning rate.
const RESNET_EDITS: &[(&str, &str)] = &[
    ("batch_size = 64", "batch_size = 32"),
    ("epochs = 2", "epochs = 4"),
    ("lr = 0.001", "lr = 0.003"),
];

/// [`RESNET_EDITS`] at width 8.
const RESNET_EDITS_W8: &[(&str, &str)] = &[
    ("batch_size = 64", "batch_size = 32"),
    ("epochs = 2", "epochs = 4"),
    ("lr = 0.001", "lr = 0.003"),
    ("width = 16", "width = 8"),
];

#[test]
fn resnet9_learns_and_matches_pytorch() {
    learns_and_matches_pytorch(&Case {
        example: "resnet9",
        data: "cifar",
        samples: CIFAR_SMALL,
        edits: &[("width = 16", "width = 8")],
        model: "resnet9",
        architecture: "ResNet9",
        reference_config: r#"{"input_shape": [3, 32, 32], "classes": 10, "width": 8}"#,
        keys: ("x", "y_pred"),
        metric: ("accuracy", 0.3),
    });
}

#[test]
fn resnet18_learns_and_matches_torchvision_layout() {
    learns_and_matches_pytorch(&Case {
        example: "resnet18",
        data: "cifar",
        samples: CIFAR_SMALL,
        edits: RESNET_EDITS_W8,
        model: "resnet18",
        architecture: "ResNet18",
        reference_config: r#"{"classes": 10, "width": 8}"#,
        keys: ("x", "y_pred"),
        metric: ("accuracy", 0.25),
    });
}

#[test]
fn resnet34_learns_and_matches_torchvision_layout() {
    learns_and_matches_pytorch(&Case {
        example: "resnet34",
        data: "cifar",
        samples: CIFAR_SMALL,
        edits: RESNET_EDITS_W8,
        model: "resnet34",
        architecture: "ResNet34",
        reference_config: r#"{"classes": 10, "width": 8}"#,
        keys: ("x", "y_pred"),
        metric: ("accuracy", 0.25),
    });
}

#[test]
fn resnet50_learns_and_matches_torchvision_layout() {
    learns_and_matches_pytorch(&Case {
        example: "resnet50",
        data: "cifar",
        samples: CIFAR_SMALL,
        edits: RESNET_EDITS,
        model: "resnet50",
        architecture: "ResNet50",
        reference_config: r#"{"classes": 10, "width": 16}"#,
        keys: ("x", "y_pred"),
        metric: ("accuracy", 0.2),
    });
}

#[test]
fn wideresnet_learns_and_matches_pytorch() {
    learns_and_matches_pytorch(&Case {
        example: "wideresnet",
        data: "cifar",
        samples: CIFAR_SMALL,
        edits: &[
            ("widen_factor = 2", "widen_factor = 1"),
            ("batch_size = 64", "batch_size = 32"),
            ("epochs = 2", "epochs = 4"),
            ("lr = 0.002", "lr = 0.003"),
        ],
        model: "wrn",
        architecture: "WideResNet",
        reference_config: r#"{"depth": 16, "widen_factor": 1, "classes": 10}"#,
        keys: ("x", "y_pred"),
        metric: ("accuracy", 0.3),
    });
}

#[test]
fn unet_learns_and_matches_pytorch() {
    learns_and_matches_pytorch(&Case {
        example: "unet",
        data: "masks",
        samples: (512, 128),
        edits: &[("epochs = 2", "epochs = 5")],
        model: "unet",
        architecture: "UNet",
        reference_config: r#"{"input_shape": [3, 32, 32], "output_channel": 1, "width": 8}"#,
        keys: ("image", "mask_pred"),
        metric: ("dice", 0.5),
    });
}

#[test]
fn transformer_learns_and_matches_pytorch() {
    learns_and_matches_pytorch(&Case {
        example: "transformer",
        data: "tokens",
        samples: (1536, 256),
        edits: &[],
        model: "transformer",
        architecture: "TransformerClassifier",
        reference_config: r#"{"vocab": 64, "classes": 4, "d_model": 32, "heads": 4, "layers": 2, "ff": 64, "max_len": 32, "dropout": 0.1}"#,
        keys: ("x", "y_pred"),
        metric: ("accuracy", 0.5),
    });
}

/// Sentences tokenized in the pipeline by `Tokenize` with the tokenizer `datagen text`
/// trained: the same model learns from text as from ready-made ids, and with the tokenizer's
/// attention mask it equals PyTorch's `src_key_padding_mask` and masked mean.
#[test]
fn text_example_learns_from_tokenized_sentences() {
    learns_and_matches_pytorch(&Case {
        example: "text",
        data: "text",
        samples: (1536, 256),
        edits: &[],
        model: "transformer",
        architecture: "TransformerClassifier",
        reference_config: r#"{"vocab": 200, "classes": 4, "d_model": 32, "heads": 4, "layers": 2, "ff": 64, "max_len": 32, "dropout": 0.1}"#,
        keys: ("x,x_mask", "y_pred"),
        metric: ("accuracy", 0.6),
    });
}

#[test]
fn datagen_text_is_deterministic() {
    let dir = TempDir::new("zoo-datagen-text");
    for copy in ["a", "b"] {
        let out: Run = fe_host()
            .current_dir(dir.path())
            .args(["datagen", "text", "--out", copy])
            .args(["--train", "300", "--eval", "20", "--test", "0"])
            .output()
            .unwrap()
            .into();
        assert_eq!(out.code, 0, "{}", out.stderr);
    }
    for file in ["train.csv", "eval.csv", "tokenizer.json", "MANIFEST"] {
        let a = std::fs::read(dir.path().join("a").join(file)).unwrap();
        let b = std::fs::read(dir.path().join("b").join(file)).unwrap();
        assert!(a == b, "{file} differs between two runs with one seed");
    }
    assert!(!dir.path().join("a/test.csv").exists());
}

#[test]
fn lstm_learns_and_matches_pytorch() {
    learns_and_matches_pytorch(&Case {
        example: "lstm",
        data: "tokens",
        samples: (1536, 256),
        edits: &[],
        model: "lstm",
        architecture: "LSTMClassifier",
        reference_config: r#"{"vocab": 64, "classes": 4, "embed": 32, "hidden": 64}"#,
        keys: ("x", "y_pred"),
        metric: ("accuracy", 0.5),
    });
}

#[test]
fn datagen_kinds_are_deterministic_and_refuse_impossible_shapes() {
    let dir = TempDir::new("zoo-datagen");
    for kind in ["cifar", "masks", "tokens"] {
        for copy in ["a", "b"] {
            let out: Run = fe_host()
                .current_dir(dir.path())
                .args(["datagen", kind, "--out", &format!("{copy}/{kind}")])
                .args(["--train", "40", "--eval", "8", "--test", "8"])
                .output()
                .unwrap()
                .into();
            assert_eq!(out.code, 0, "{}", out.stderr);
        }
        let files: Vec<_> = std::fs::read_dir(dir.path().join("a").join(kind))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            files.len(),
            7,
            "{kind}: two arrays per split and MANIFEST: {files:?}"
        );
        for file in files {
            let a = std::fs::read(dir.path().join("a").join(kind).join(&file)).unwrap();
            let b = std::fs::read(dir.path().join("b").join(kind).join(&file)).unwrap();
            assert!(
                a == b,
                "{kind}/{file:?} differs between two runs with one seed"
            );
        }
    }
    let out = crate::util::run_failing(
        &["datagen", "tokens", "--out", "unused", "--vocab", "12"],
        2,
    );
    assert_contains!(out.stderr, "--vocab must lie in 21..=256");
}
