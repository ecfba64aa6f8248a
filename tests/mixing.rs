//! `examples/mixup.toml` (MixUpBatch + MixLoss, FastEstimator's mixup recipe) learns the
//! generated digits in a CI-sized run, and its evaluation metrics (accuracy, ROC AUC,
//! calibration error) are logged per epoch.

use crate::dist::data;
use crate::util::{copy_example, fe_host, values, OutputWithin, Run, TempDir};

#[test]
fn the_mixup_example_learns_the_digits() {
    let dir = TempDir::new("mixup-example");
    copy_example(&dir, "mixup");
    let d = data().display();
    let set = |split: &str| {
        format!(
            "pipeline.data.{split}.files={{ x = \"{d}/{split}-images-idx3-ubyte\", \
             y = \"{d}/{split}-labels-idx1-ubyte\" }}"
        )
    };
    let (train, eval) = (set("train"), set("eval"));
    let out: Run = fe_host()
        .current_dir(dir.path())
        .args(["run", "examples/mixup.toml", "--summary", "summary.json"])
        .args([
            "--set",
            &train,
            "--set",
            &eval,
            "--set",
            "run.log_dir=\"runs\"",
        ])
        .output_within();
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap())
            .unwrap();
    let accuracy = values(&summary, "eval", "accuracy");
    let ce = values(&summary, "eval", "ce");
    let auc = values(&summary, "eval", "auc");
    let ece = values(&summary, "eval", "ece");
    assert_eq!(accuracy.len(), 3, "{summary}");
    // 640 training digits, 3 epochs of mixed images (measured: accuracy 0.21, 0.37, 0.60;
    // AUC 0.79, 0.88, 0.92): learning every epoch, far above chance (0.1) on clean images.
    assert!(
        accuracy[2] > 0.45 && accuracy[2] > accuracy[0],
        "accuracy {accuracy:?}"
    );
    assert!(ce[2] < ce[1] && ce[1] < ce[0], "eval ce {ce:?}");
    assert!(auc[2] > 0.85, "auc {auc:?}");
    assert!(ece.iter().all(|e| (0.0..1.0).contains(e)), "ece {ece:?}");
    // The training loss is MixLoss's (MixUpBatch and MixLoss run in training only).
    assert!(!values(&summary, "train", "ce").is_empty(), "{summary}");
}
