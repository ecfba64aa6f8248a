use std::path::{Path, PathBuf};

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{testing, Mode, StepContext};

use super::{cutmix_draws, mixup_draws, patch};

/// A scratch directory under the target directory, emptied first.
fn scratch(tag: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/test-scratch")
        .join(tag);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the PyTorch reference on what `dir` holds; panics with its message when they differ.
fn reference(dir: &Path, op: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("../../.venv/bin/python"))
        .arg(root.join("reference/mix_reference.py"))
        .arg(dir)
        .arg(op)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{op} differs from the reference: {text}"
    );
}

/// Images `[6, 3, 8, 10]` and one-hot labels `[6, 4]`.
fn batch() -> (Tensor, Tensor) {
    let x = Tensor::rand([6, 3, 8, 10], (Kind::Float, Device::Cpu));
    let y = Tensor::from_slice(&[0i64, 3, 1, 2, 2, 0]).onehot(4);
    (x, y)
}

fn train(seed: u64) -> StepContext<'static> {
    StepContext {
        mode: Mode::Train,
        seed,
        ..StepContext::for_tests()
    }
}

/// A seed whose draws include one below 0.5 (and so differ from `max(λ₀, 1 − λ₀)`).
fn seed_with_low_draw(alpha: f64, batch: usize) -> u64 {
    (0..100)
        .find(|&s| mixup_draws(s, alpha, false, batch).iter().any(|&l| l < 0.4))
        .unwrap()
}

#[test]
fn mixup_equals_fastestimators_formula_with_one_weight_for_images_and_labels() {
    let (x, y) = batch();
    let seed = seed_with_low_draw(0.4, 6);
    let mut op =
        testing::tensor_op("MixUpBatch", "alpha = 0.4", &["x", "y"], &["x", "y", "lam"]).unwrap();
    let out = op.forward_with(&[&x, &y], &train(seed)).unwrap();
    let dir = scratch("mixup");
    let draws: Vec<f64> = mixup_draws(seed, 0.4, false, 6);
    for (name, t) in [
        ("x", &x),
        ("y", &y),
        ("x_out", &out[0]),
        ("y_out", &out[1]),
        ("lam_out", &out[2]),
    ] {
        t.write_npy(dir.join(format!("{name}.npy"))).unwrap();
    }
    Tensor::from_slice(&draws)
        .write_npy(dir.join("draws.npy"))
        .unwrap();
    reference(&dir, "mixup");
    // The same step mixes the same way; the next step differently.
    let again = op.forward_with(&[&x, &y], &train(seed)).unwrap();
    assert!(again[0].equal(&out[0]));
    let next = op.forward_with(&[&x, &y], &train(seed + 1)).unwrap();
    assert!(!next[0].equal(&out[0]));
}

#[test]
fn a_shared_beta_mixes_every_sample_with_one_weight() {
    let (x, y) = batch();
    let mut op = testing::tensor_op(
        "MixUpBatch",
        "shared_beta = true",
        &["x", "y"],
        &["x", "y", "lam"],
    )
    .unwrap();
    let lam = Vec::<f32>::try_from(&op.forward_with(&[&x, &y], &train(5)).unwrap()[2]).unwrap();
    assert!(lam.iter().all(|&l| l == lam[0] && l >= 0.5), "{lam:?}");
}

#[test]
fn cutmix_equals_fastestimators_patch_and_label_weight() {
    let (x, y) = batch();
    // A seed whose patch is neither empty nor the whole image.
    let seed = (0..100)
        .find(|&s| {
            let (l, cx, cy) = cutmix_draws(s, 1.0);
            let [x1, x2, y1, y2] = patch(10, 8, l.max(1.0 - l), cx, cy);
            let area = (x2 - x1) * (y2 - y1);
            area > 0 && area < 80
        })
        .unwrap();
    let mut op = testing::tensor_op("CutMixBatch", "", &["x", "y"], &["x", "y", "lam"]).unwrap();
    let out = op.forward_with(&[&x, &y], &train(seed)).unwrap();
    let dir = scratch("cutmix");
    let (l, cx, cy) = cutmix_draws(seed, 1.0);
    for (name, t) in [
        ("x", &x),
        ("y", &y),
        ("x_out", &out[0]),
        ("y_out", &out[1]),
        ("lam_out", &out[2]),
    ] {
        t.write_npy(dir.join(format!("{name}.npy"))).unwrap();
    }
    Tensor::from_slice(&[l, cx, cy])
        .write_npy(dir.join("draws.npy"))
        .unwrap();
    reference(&dir, "cutmix");
}

#[test]
fn patches_round_half_to_even_and_stay_inside_the_image() {
    // λ = 0.75: a 5 × 4 patch centred on (5, 4) of a 10 × 8 image spans x 2.5..7.5, which
    // torch.round takes to 2..8 (ties to even), and y 2..6.
    assert_eq!(patch(10, 8, 0.75, 0.5, 0.5), [2, 8, 2, 6]);
    // λ = 0: a whole-image patch centred on the corner (0, 8) is clipped to the image.
    assert_eq!(patch(10, 8, 0.0, 0.0, 1.0), [0, 5, 4, 8]);
}

#[test]
fn bad_configurations_and_inputs_are_named() {
    assert!(testing::tensor_op("MixUpBatch", "alpha = 0", &["x"], &["x"]).is_err());
    assert!(testing::tensor_op("MixUpBatch", "", &["x", "y"], &["x"]).is_err());
    let mut op = testing::tensor_op("MixUpBatch", "", &["x", "y"], &["x", "y"]).unwrap();
    let labels = Tensor::from_slice(&[0i64, 1, 2, 3, 0, 1]);
    let error = op
        .forward_with(&[&batch().0, &labels], &train(1))
        .unwrap_err();
    assert!(
        error.to_string().contains("one-hot encode labels first"),
        "{error}"
    );
    let mut cut = testing::tensor_op("CutMixBatch", "", &["x"], &["x"]).unwrap();
    let flat = Tensor::zeros([4, 10], (Kind::Float, Device::Cpu));
    let error = cut.forward_with(&[&flat], &train(1)).unwrap_err();
    assert!(error.to_string().contains("[B, C, H, W]"), "{error}");
}
