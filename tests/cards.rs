//! Model cards: `fe-host predict CARD.json|EXPORT_DIR` uses what `export` wrote without the
//! training manifest, and gives what predicting from the manifest and weights gives; a card
//! whose weights are gone or changed, or whose architecture no plugin provides, is refused
//! with one line naming the file, and nothing is written. A run's `--set` overrides reach its
//! export, and predicting or exporting from a checkpoint uses the manifest saved in it.

use crate::util::{digits, fe_host_in, TempDir};

/// A LeNet trained for 20 steps and exported when training ends into `export/`.
fn exported(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    let text = crate::util::lenet_manifest(1, "").replace(
        "log_steps = 50",
        "log_steps = 50\ntrain_steps_per_epoch = 20\neval_steps_per_epoch = 2",
    );
    dir.write("m.toml", &text);
    let out = fe_host_in(dir.path(), &["run", "m.toml", "-q", "--export", "export"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    dir
}

fn images() -> String {
    let [_, _, images, _] = digits();
    format!("x={}", images.to_string_lossy())
}

#[test]
fn predict_from_the_card_alone_equals_predict_from_the_manifest_and_weights() {
    let dir = exported("card-predict");
    let images = images();
    let from_manifest = fe_host_in(
        dir.path(),
        &[
            "predict",
            "m.toml",
            "--weights",
            "export",
            "--input",
            &images,
            "--limit",
            "40",
            "--top-k",
            "3",
            "--out",
            "manifest.csv",
        ],
    );
    assert_eq!(from_manifest.code, 0, "{}", from_manifest.stderr);
    // Without the manifest: the card, then the directory that holds it, in two formats.
    std::fs::remove_file(dir.path().join("m.toml")).unwrap();
    for (source, out) in [
        ("export/lenet.json", "card.csv"),
        ("export", "dir.csv"),
        ("export", "dir.npy"),
    ] {
        let mut args = vec![
            "predict", source, "--input", &images, "--limit", "40", "--out", out,
        ];
        if out.ends_with(".csv") {
            args.extend(["--top-k", "3"]);
        }
        let run = fe_host_in(dir.path(), &args);
        assert_eq!(run.code, 0, "{source}: {}{}", run.stdout, run.stderr);
        assert_contains!(run.stdout, "predicted 40 samples; wrote y_pred [40, 10]");
    }
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    assert_text_eq!(read("card.csv"), read("manifest.csv"));
    assert_text_eq!(read("dir.csv"), read("manifest.csv"));
    assert!(read("card.csv").lines().count() == 41);
    let npy = std::fs::read(dir.path().join("dir.npy")).unwrap();
    assert!(npy.starts_with(b"\x93NUMPY"), "not NPY");
}

#[test]
fn cards_with_missing_or_changed_weights_or_an_unknown_architecture_are_refused() {
    let dir = exported("card-refused");
    let images = images();
    let export = dir.path().join("export");
    let predict = |source: &str, out: &str| {
        let run = fe_host_in(
            dir.path(),
            &["predict", source, "--input", &images, "--out", out],
        );
        assert!(
            !dir.path().join(out).exists(),
            "{out} written by a refused predict"
        );
        run
    };

    // A card names its own weights.
    let run = fe_host_in(
        dir.path(),
        &[
            "predict",
            "export/lenet.json",
            "--weights",
            "export",
            "--input",
            &images,
            "--out",
            "a.csv",
        ],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert_contains!(run.stderr, "is a model card, which names its weights");

    // Changed weights (one byte): exit 5, naming the file and both hashes.
    let weights = export.join("lenet.safetensors");
    let original = std::fs::read(&weights).unwrap();
    let mut corrupt = original.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    std::fs::write(&weights, &corrupt).unwrap();
    let run = predict("export/lenet.json", "b.csv");
    assert_eq!(run.code, 5, "{}", run.stderr);
    assert_contains!(run.stderr, "lenet.safetensors: sha256 ");
    assert_contains!(run.stderr, "the file was changed or is corrupt");
    assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);

    // The export directory used as a weights directory, or its weights file alone: the card
    // beside the weights records their sha256, so the changed file is refused there too.
    for weights_arg in ["export", "export/lenet.safetensors"] {
        let run = fe_host_in(
            dir.path(),
            &[
                "predict",
                "m.toml",
                "--weights",
                weights_arg,
                "--input",
                &images,
                "--out",
                "w.csv",
            ],
        );
        assert_eq!(run.code, 5, "{weights_arg}: {}", run.stderr);
        assert_contains!(run.stderr, "lenet.safetensors: sha256 ");
        assert_contains!(run.stderr, "lenet.json records");
        assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
        assert!(!dir.path().join("w.csv").exists(), "w.csv written");
    }

    // Missing weights.
    std::fs::remove_file(&weights).unwrap();
    let run = predict("export/lenet.json", "c.csv");
    assert_eq!(run.code, 5, "{}", run.stderr);
    assert_contains!(run.stderr, "lenet.safetensors: cannot read the weights");
    std::fs::write(&weights, &original).unwrap();

    // An architecture no plugin provides: exit 3, naming the card and the plugin it came from.
    let card_path = export.join("lenet.json");
    let card = std::fs::read_to_string(&card_path).unwrap();
    let renamed = card
        .replace(
            "\"architecture\": \"LeNet\"",
            "\"architecture\": \"LeNet7\"",
        )
        .replace(
            "architecture = \\\"LeNet\\\"",
            "architecture = \\\"LeNet7\\\"",
        );
    assert_ne!(renamed, card);
    std::fs::write(&card_path, renamed).unwrap();
    let run = predict("export/lenet.json", "d.csv");
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert_contains!(
        run.stderr,
        "no plugin found provides the model architecture `LeNet7` (exported with plugin fe-models"
    );

    // Not a card at all.
    std::fs::write(&card_path, "{\"format\": \"something else\"}").unwrap();
    let run = predict("export/lenet.json", "e.csv");
    assert_eq!(run.code, 5, "{}", run.stderr);
    assert_contains!(run.stderr, "lenet.json: not a model card");
}

/// A run with `--set` overrides of the pipeline (how inputs are prepared) and of the
/// architecture (LeNet's class count): its export, `predict MANIFEST --checkpoint` and `export
/// MANIFEST --checkpoint` all predict what the manifest with those overrides written into it
/// predicts, although the manifest file itself lacks them.
#[test]
fn overrides_of_a_run_reach_its_export_and_predictions_from_its_checkpoint() {
    let dir = TempDir::new("card-overrides");
    let text = crate::util::lenet_manifest(1, "\n[checkpoint]\ndir = \"ckpt\"\nevery_epochs = 1\n")
        .replace(
            "log_steps = 50",
            "log_steps = 50\ntrain_steps_per_epoch = 20\neval_steps_per_epoch = 2",
        );
    dir.write("m.toml", &text);
    let normalize = r#"pipeline.ops[0]={op="Normalize",inputs="x",outputs="x",mean=0.1,std=0.3}"#;
    let run = fe_host_in(
        dir.path(),
        &[
            "run",
            "m.toml",
            "-q",
            "--set",
            normalize,
            "--set",
            "models.lenet.classes=12",
            "--export",
            "export",
        ],
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    // The manifest the model was trained with, written out by hand.
    let trained = text
        .replacen(
            "op = \"Minmax\"",
            "op = \"Normalize\"\nmean = 0.1\nstd = 0.3",
            1,
        )
        .replacen(
            "architecture = \"LeNet\"",
            "architecture = \"LeNet\"\nclasses = 12",
            1,
        );
    assert_ne!(trained, text);
    dir.write("trained.toml", &trained);
    let images = images();
    let predict = |args: &[&str], out: &str| {
        let mut all = vec!["predict"];
        all.extend(args);
        all.extend(["--input", images.as_str(), "--limit", "40", "--out", out]);
        let run = fe_host_in(dir.path(), &all);
        assert_eq!(run.code, 0, "{args:?}: {}{}", run.stdout, run.stderr);
        assert_contains!(run.stdout, "predicted 40 samples; wrote y_pred [40, 12]");
        let csv = std::fs::read_to_string(dir.path().join(out)).unwrap();
        (csv, run.stderr)
    };
    let (expected, _) = predict(&["trained.toml", "--weights", "export"], "expected.csv");

    // The export's card carries the manifest with the overrides.
    let (from_card, _) = predict(&["export"], "card.csv");
    assert_text_eq!(from_card, expected);

    // The manifest file with a checkpoint: the checkpoint's saved manifest is used, and a note
    // names the keys where the file differs.
    let (from_checkpoint, note) = predict(&["m.toml", "--checkpoint", "ckpt"], "ckpt.csv");
    assert_text_eq!(from_checkpoint, expected);
    assert_contains!(note, "note: using ");
    assert_contains!(
        note,
        "manifest.toml, the manifest the model was trained with"
    );
    assert_contains!(note, "pipeline.ops[0].op: \"Normalize\" -> \"Minmax\"");
    assert_contains!(note, "models[0].classes: 12 -> (absent)");
    assert_eq!(note.trim().lines().count(), 1, "{note}");
    let (_, silent) = predict(&["trained.toml", "--checkpoint", "ckpt"], "same.csv");
    assert!(!silent.contains("note:"), "{silent}");

    // Exported from the checkpoint: its card carries the saved manifest too.
    let run = fe_host_in(
        dir.path(),
        &[
            "export",
            "m.toml",
            "--checkpoint",
            "ckpt",
            "--out",
            "from-ckpt",
        ],
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let card: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("from-ckpt/lenet.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(card["config"]["classes"], 12);
    assert_contains!(card["manifest"]["text"].as_str().unwrap(), "Normalize");
    let (from_checkpoint_card, _) = predict(&["from-ckpt"], "ckpt-card.csv");
    assert_text_eq!(from_checkpoint_card, expected);
}

/// A 2x2 24-bit BMP: a real image file that an image folder lists.
fn bmp() -> Vec<u8> {
    let pixels: [u8; 16] = [0, 0, 255, 0, 255, 0, 0, 0, 255, 0, 0, 0, 9, 9, 9, 0];
    let mut file = Vec::new();
    file.extend(b"BM");
    file.extend((54 + pixels.len() as u32).to_le_bytes());
    file.extend([0; 4]);
    file.extend(54u32.to_le_bytes());
    file.extend(40u32.to_le_bytes());
    file.extend(2i32.to_le_bytes());
    file.extend(2i32.to_le_bytes());
    file.extend(1u16.to_le_bytes());
    file.extend(24u16.to_le_bytes());
    file.extend([0; 24]);
    file.extend(pixels);
    file
}

#[test]
fn an_image_folder_given_to_a_model_trained_on_idx_is_refused_in_the_models_terms() {
    let dir = exported("card-image-folder");
    for class in ["cat", "dog"] {
        let class_dir = dir.path().join("pictures").join(class);
        std::fs::create_dir_all(&class_dir).unwrap();
        std::fs::write(class_dir.join("one.bmp"), bmp()).unwrap();
    }
    let run = fe_host_in(
        dir.path(),
        &[
            "predict",
            "export/lenet.json",
            "--input",
            "pictures",
            "--out",
            "p.csv",
        ],
    );
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    // The pipeline trained on IDX hands the model the files' paths: the note says why, the
    // error what LeNet takes, instead of libtorch's "expected input[1, 2, 1, 15] to have 1
    // channels" from inside a convolution.
    assert_contains!(
        run.stderr,
        "note: --input is an image folder (`x`: file paths, `y`: class indices), but the manifest trained on idx data"
    );
    assert_contains!(
        run.stderr,
        "LeNet (input_shape = [1, 28, 28]) takes images shaped [batch, 1, 28, 28]; got a batch shaped"
    );
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    assert!(
        !dir.path().join("p.csv").exists(),
        "p.csv written by a failed predict"
    );
}

/// numpy's `np.save` of a uint8 array shaped `(0, 28, 28)`.
fn empty_npy() -> Vec<u8> {
    let mut header = "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 28, 28), }".to_owned();
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut file = b"\x93NUMPY\x01\x00".to_vec();
    file.extend((header.len() as u16).to_le_bytes());
    file.extend(header.as_bytes());
    file
}

#[test]
fn an_input_without_samples_and_a_top_k_beyond_the_classes_are_refused() {
    let dir = exported("card-empty-topk");
    std::fs::write(dir.path().join("empty.npy"), empty_npy()).unwrap();
    let run = fe_host_in(
        dir.path(),
        &[
            "predict",
            "export",
            "--input",
            "empty.npy",
            "--out",
            "p.csv",
        ],
    );
    assert_eq!(run.code, 5, "{}{}", run.stdout, run.stderr);
    assert_contains!(run.stderr, "empty.npy: holds no samples");
    let images = images();
    let run = fe_host_in(
        dir.path(),
        &[
            "predict", "export", "--input", &images, "--limit", "3", "--top-k", "11", "--out",
            "p.csv",
        ],
    );
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert_contains!(
        run.stderr,
        "--top-k 11: there are 10 classes, so k runs from 1 to 10"
    );
    assert!(
        !dir.path().join("p.csv").exists(),
        "p.csv written by a refused predict"
    );
}
