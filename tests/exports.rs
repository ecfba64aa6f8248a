//! Exports other tools load without fe-host's code: every zoo architecture, trained briefly,
//! exported with `--format onnx`, gives `fe-host predict`'s outputs from its `.pt` in plain
//! PyTorch (`torch.jit.load`, within 1e-5) and from its `.onnx` in onnxruntime (within 1e-4),
//! on a batch of another size than the one it was traced with; and `fe-host summary` counts
//! the parameters PyTorch's reference definition has (`sum(p.numel())`).

use std::path::{Path, PathBuf};

use crate::util::{copy_example, fe_host, root, Run, TempDir};

struct Case {
    /// `examples/<example>.toml`, also the model's name in it.
    example: &'static str,
    /// `fe-host datagen <data>`.
    data: &'static str,
    /// The evaluation file the model's input key is read from, under `data/<data>/`.
    input_file: &'static str,
    /// Writes `input_file` into `data/<data>/` when the data set has no such file.
    make_input: Option<fn(&Path)>,
    /// Text replacements in the manifest (smaller widths).
    edits: &'static [(&'static str, &'static str)],
    /// The model's name in the manifest.
    model: &'static str,
    /// The model's input and output keys.
    keys: (&'static str, &'static str),
    /// The PyTorch reference (tests/fixtures/zoo_reference.py) and its arguments, if any.
    reference: Option<(&'static str, &'static str)>,
    /// The largest difference allowed between `predict` and the `.pt` in PyTorch.
    torchscript_tolerance: f64,
}

fn python() -> PathBuf {
    let python = root().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: scripts/setup.sh installs it",
        python.display()
    );
    python
}

fn ok(run: Run, what: &str) -> Run {
    assert_eq!(
        run.code, 0,
        "{what}\nstdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    run
}

/// A copy of the example with its data (32 training, 8 evaluation samples) and one epoch's
/// weights in `weights/`.
fn trained(dir: &TempDir, case: &Case) -> PathBuf {
    copy_example(dir, case.example);
    ok(
        fe_host()
            .current_dir(dir.path())
            .args([
                "datagen",
                case.data,
                "--out",
                &format!("data/{}", case.data),
            ])
            .args(["--train", "32", "--eval", "8", "--test", "0", "--seed", "3"])
            .output()
            .unwrap()
            .into(),
        "datagen",
    );
    let manifest = dir.path().join(format!("examples/{}.toml", case.example));
    let mut text = std::fs::read_to_string(&manifest).unwrap();
    for (from, to) in case.edits {
        assert!(text.contains(from), "`{from}` not in the example");
        text = text.replace(from, to);
    }
    std::fs::write(&manifest, text).unwrap();
    if let Some(make) = case.make_input {
        make(&dir.path().join("data").join(case.data));
    }
    ok(
        fe_host()
            .current_dir(dir.path())
            .arg("run")
            .arg(&manifest)
            .args(["--epochs", "1", "--threads", "1", "--quiet"])
            .args([
                "--set",
                "pipeline.batch_size=16",
                "--save-weights",
                "weights",
            ])
            .output()
            .unwrap()
            .into(),
        "run",
    );
    manifest
}

fn summary_of(dir: &Path, manifest: &Path) -> serde_json::Value {
    let out = ok(
        fe_host()
            .current_dir(dir)
            .arg("summary")
            .arg(manifest)
            .arg("--json")
            .output()
            .unwrap()
            .into(),
        "summary",
    );
    serde_json::from_str(&out.stdout).unwrap()
}

fn exports_match_predict(case: &Case) {
    let dir = TempDir::new(&format!("export-{}", case.example));
    let manifest = trained(&dir, case);
    let export = dir.path().join("export");
    ok(
        fe_host()
            .current_dir(dir.path())
            .arg("export")
            .arg(&manifest)
            .args(["--weights", "weights", "--format", "onnx", "--out"])
            .arg(&export)
            .env("FE_HOST_PYTHON", python())
            .output()
            .unwrap()
            .into(),
        "export",
    );
    let card: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(export.join(format!("{}.json", case.model))).unwrap(),
    )
    .unwrap();
    assert_eq!(card["torchscript"], format!("{}.pt", case.model));
    assert_eq!(card["onnx"], format!("{}.onnx", case.model));

    // predict from the card, on the raw evaluation file, 5 samples (traced with 2).
    let (input, output) = case.keys;
    let predictions = dir.path().join("predictions.safetensors");
    ok(
        fe_host()
            .current_dir(dir.path())
            .arg("predict")
            .arg(export.join(format!("{}.json", case.model)))
            .arg("--input")
            .arg(format!("{input}=data/{}/{}", case.data, case.input_file))
            .args(["--key", input, "--key", output, "--limit", "5", "--out"])
            .arg(&predictions)
            .output()
            .unwrap()
            .into(),
        "predict",
    );
    let mut check = std::process::Command::new(python());
    check
        .arg(root().join("tests/fixtures/export_check.py"))
        .arg(&export)
        .arg(case.model)
        .arg(&predictions)
        .args([input, output]);
    if let Some((architecture, config)) = case.reference {
        check.args([architecture, config]);
    }
    let out: Run = check.output().unwrap().into();
    assert_eq!(out.code, 0, "export_check.py failed:\n{}", out.stderr);
    let report: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(report["shape"][0], 5, "{report}");
    assert_eq!(report["torchscript_shape"], report["shape"], "{report}");
    assert_eq!(report["onnx_shape"], report["shape"], "{report}");
    let torchscript = report["torchscript"].as_f64().unwrap();
    assert!(
        torchscript <= case.torchscript_tolerance,
        "{}: TorchScript {report}",
        case.example
    );
    let onnx = report["onnx"].as_f64().unwrap();
    assert!(onnx <= 1e-4, "{}: ONNX {report}", case.example);

    let summary = summary_of(dir.path(), &manifest);
    let model = &summary["models"][0];
    assert_eq!(model["name"], case.model);
    let total = model["total_params"].as_i64().unwrap();
    assert_eq!(model["trainable_params"].as_i64(), Some(total));
    let by_layer: i64 = model["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["params"].as_i64().unwrap())
        .sum();
    assert_eq!(by_layer, total, "layers' counts add up to the total");
    if case.reference.is_some() {
        assert_eq!(
            report["reference_params"].as_i64(),
            Some(total),
            "{}: summary's total against PyTorch's sum(p.numel())",
            case.example
        );
    }
}

const CIFAR: &str = "eval-images.idx";

#[test]
fn lenet_exports_to_torchscript_and_onnx_matching_predict() {
    exports_match_predict(&Case {
        example: "lenet",
        data: "digits",
        input_file: "eval-images-idx3-ubyte",
        make_input: None,
        edits: &[],
        model: "lenet",
        keys: ("x", "y_pred"),
        reference: None,
        torchscript_tolerance: 1e-5,
    });
}

#[test]
fn resnet9_exports_to_torchscript_and_onnx_matching_predict() {
    exports_match_predict(&Case {
        example: "resnet9",
        data: "cifar",
        input_file: CIFAR,
        make_input: None,
        edits: &[("width = 16", "width = 8")],
        model: "resnet9",
        keys: ("x", "y_pred"),
        reference: Some((
            "ResNet9",
            r#"{"input_shape": [3, 32, 32], "classes": 10, "width": 8}"#,
        )),
        torchscript_tolerance: 1e-5,
    });
}

#[test]
fn resnet18_exports_to_torchscript_and_onnx_matching_predict() {
    exports_match_predict(&Case {
        example: "resnet18",
        data: "cifar",
        input_file: CIFAR,
        make_input: None,
        edits: &[("width = 16", "width = 8")],
        model: "resnet18",
        keys: ("x", "y_pred"),
        reference: Some(("ResNet18", r#"{"classes": 10, "width": 8}"#)),
        torchscript_tolerance: 1e-5,
    });
}

#[test]
fn resnet34_exports_to_torchscript_and_onnx_matching_predict() {
    exports_match_predict(&Case {
        example: "resnet34",
        data: "cifar",
        input_file: CIFAR,
        make_input: None,
        edits: &[("width = 16", "width = 8")],
        model: "resnet34",
        keys: ("x", "y_pred"),
        reference: Some(("ResNet34", r#"{"classes": 10, "width": 8}"#)),
        torchscript_tolerance: 1e-5,
    });
}

#[test]
fn resnet50_exports_to_torchscript_and_onnx_matching_predict() {
    exports_match_predict(&Case {
        example: "resnet50",
        data: "cifar",
        input_file: CIFAR,
        make_input: None,
        edits: &[("width = 16", "width = 8")],
        model: "resnet50",
        keys: ("x", "y_pred"),
        reference: Some(("ResNet50", r#"{"classes": 10, "width": 8}"#)),
        torchscript_tolerance: 1e-5,
    });
}

#[test]
fn wideresnet_exports_to_torchscript_and_onnx_matching_predict() {
    exports_match_predict(&Case {
        example: "wideresnet",
        data: "cifar",
        input_file: CIFAR,
        make_input: None,
        edits: &[("widen_factor = 2", "widen_factor = 1")],
        model: "wrn",
        keys: ("x", "y_pred"),
        reference: Some((
            "WideResNet",
            r#"{"depth": 16, "widen_factor": 1, "classes": 10}"#,
        )),
        torchscript_tolerance: 1e-5,
    });
}

#[test]
fn unet_exports_to_torchscript_and_onnx_matching_predict() {
    exports_match_predict(&Case {
        example: "unet",
        data: "masks",
        input_file: "eval-images.idx",
        make_input: None,
        edits: &[],
        model: "unet",
        keys: ("image", "mask_pred"),
        reference: Some((
            "UNet",
            r#"{"input_shape": [3, 32, 32], "output_channel": 1, "width": 8}"#,
        )),
        torchscript_tolerance: 1e-5,
    });
}

#[test]
fn transformer_exports_to_torchscript_and_onnx_matching_predict() {
    exports_match_predict(&Case {
        example: "transformer",
        data: "tokens",
        input_file: "eval-tokens.idx",
        make_input: None,
        edits: &[],
        model: "transformer",
        keys: ("x", "y_pred"),
        reference: Some((
            "TransformerClassifier",
            r#"{"vocab": 64, "classes": 4, "d_model": 32, "heads": 4, "layers": 2, "ff": 64, "max_len": 32, "dropout": 0.1}"#,
        )),
        torchscript_tolerance: 1e-5,
    });
}

#[test]
fn lstm_exports_to_torchscript_and_onnx_matching_predict() {
    exports_match_predict(&Case {
        example: "lstm",
        data: "tokens",
        input_file: "eval-tokens.idx",
        make_input: None,
        edits: &[],
        model: "lstm",
        keys: ("x", "y_pred"),
        reference: Some((
            "LSTMClassifier",
            r#"{"vocab": 64, "classes": 4, "embed": 32, "hidden": 64}"#,
        )),
        torchscript_tolerance: 1e-5,
    });
}

/// 8 noise vectors for the DCGAN generator, roughly standard normal (a sum of four uniform
/// draws), the same in every run: the global generator's draws would depend on which tests
/// ran first in this process.
fn write_noise(dir: &Path) {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut uniform = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let values: Vec<f32> = (0..8 * 100)
        .map(|_| ((0..4).map(|_| uniform()).sum::<f64>() - 2.0) as f32 * 1.732)
        .collect();
    let noise = tch::Tensor::from_slice(&values).reshape([8, 100]);
    noise.write_npy(dir.join("noise.npy")).unwrap();
}

#[test]
fn dcgan_generator_exports_to_torchscript_and_onnx_matching_predict() {
    exports_match_predict(&Case {
        example: "dcgan",
        data: "digits",
        input_file: "noise.npy",
        make_input: Some(write_noise),
        edits: &[],
        model: "generator",
        keys: ("z", "x_fake"),
        reference: Some(("DCGANGenerator", "{}")),
        // predict runs the generator eagerly; PyTorch runs the traced `.pt`, whose transposed
        // convolutions (256 and 128 input channels, 5x5) summed in another order left 1.7e-5
        // on one CI input (ONNX: 5e-7). The images lie in [-1, 1].
        torchscript_tolerance: 1e-4,
    });
}

/// A machine without a Python with torch and onnx (no $FE_HOST_PYTHON, no .venv here or
/// above, nothing on PATH): `--format onnx` is refused in one line before anything is
/// written, and the default TorchScript export still works.
#[test]
fn onnx_without_python_is_refused_and_torchscript_needs_none() {
    let outside = std::env::temp_dir().join(format!("fe-export-nopy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&outside);
    std::fs::create_dir_all(&outside).unwrap();
    let dir = TempDir::new("export-nopy");
    let case = Case {
        example: "lenet",
        data: "digits",
        input_file: "",
        make_input: None,
        edits: &[],
        model: "lenet",
        keys: ("x", "y_pred"),
        reference: None,
        torchscript_tolerance: 1e-5,
    };
    let manifest = trained(&dir, &case);
    let empty_path = outside.join("bin");
    std::fs::create_dir_all(&empty_path).unwrap();
    let export = |format: &str, out: &str| -> Run {
        fe_host()
            .current_dir(&outside)
            .arg("export")
            .arg(&manifest)
            .arg("--weights")
            .arg(dir.path().join("weights"))
            .args(["--format", format, "--out", out])
            .env_remove("FE_HOST_PYTHON")
            .env("PATH", &empty_path)
            .output()
            .unwrap()
            .into()
    };
    let refused = export("onnx", "with-onnx");
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert_eq!(
        refused.stderr.trim_end().lines().count(),
        1,
        "{}",
        refused.stderr
    );
    assert_contains!(
        refused.stderr,
        "--format onnx needs a Python with torch and onnx"
    );
    assert_contains!(refused.stderr, "python3 is not found");
    assert!(!outside.join("with-onnx").exists());
    assert!(!outside.join("with-onnx.partial").exists());

    let plain = export("torchscript", "plain");
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    assert!(outside.join("plain/lenet.pt").is_file());
    assert!(!outside.join("plain/lenet.onnx").exists());
    let _ = std::fs::remove_dir_all(&outside);
}

/// `run --export --export-format onnx` writes the ONNX file when training ends; without a
/// Python for it the run is refused before it trains (no run directory, no export).
#[test]
fn run_exports_onnx_when_asked_and_without_python_refuses_before_training() {
    let dir = TempDir::new("run-export-onnx");
    copy_example(&dir, "lenet");
    ok(
        fe_host()
            .current_dir(dir.path())
            .args(["datagen", "digits", "--out", "data/digits"])
            .args(["--train", "32", "--eval", "8", "--test", "0", "--seed", "3"])
            .output()
            .unwrap()
            .into(),
        "datagen",
    );
    let run = |out: &str, python: Option<&Path>| -> Run {
        let mut command = fe_host();
        command
            .current_dir(dir.path())
            .args([
                "run",
                "examples/lenet.toml",
                "-q",
                "--epochs",
                "1",
                "--threads",
                "1",
            ])
            .args(["--set", "pipeline.batch_size=16"])
            .args(["--export", out, "--export-format", "onnx"]);
        match python {
            Some(python) => command.env("FE_HOST_PYTHON", python),
            None => command.env("FE_HOST_PYTHON", dir.path().join("no-python")),
        };
        command.output().unwrap().into()
    };
    let refused = run("refused", None);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert_contains!(refused.stderr, "--format onnx");
    assert!(!dir.path().join("refused").exists());
    assert!(
        !dir.path().join("runs").exists(),
        "it trained before refusing"
    );
    ok(run("export", Some(&python())), "run --export-format onnx");
    assert!(dir.path().join("export/lenet.onnx").is_file());
    assert!(dir.path().join("export/lenet.pt").is_file());
}
