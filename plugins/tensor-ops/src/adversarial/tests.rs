use std::path::Path;

use fe_plugin_api::tch::{Device, Kind, Reduction, Tensor};
use fe_plugin_api::testing;

#[test]
fn fgsm_equals_fastestimators_formula_in_pytorch() {
    let x = Tensor::rand([8, 5], (Kind::Float, Device::Cpu));
    let w = Tensor::randn([5, 3], (Kind::Float, Device::Cpu));
    let y = Tensor::from_slice(&[0i64, 1, 2, 0, 1, 2, 0, 1]);
    let mut watch = testing::tensor_op("Watch", "", &["x"], &["x"]).unwrap();
    let watched = watch.forward(&[&x]).unwrap().remove(0);
    let loss =
        watched
            .matmul(&w)
            .cross_entropy_loss::<Tensor>(&y, None, Reduction::Mean, -100, 0.0);
    let mut fgsm = testing::tensor_op("FGSM", "epsilon = 0.3", &["x", "ce"], &["x_adv"]).unwrap();
    let x_adv = fgsm.forward(&[&watched, &loss]).unwrap().remove(0);
    assert!(!x_adv.requires_grad());
    // The graph was kept: the loss can still be differentiated (UpdateOp does, after FGSM).
    let again = Tensor::run_backward(&[&loss], &[&watched], false, false);
    assert_eq!(again[0].size(), [8, 5]);

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-scratch/fgsm");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, t) in [("x", &x), ("w", &w), ("y", &y), ("x_adv", &x_adv)] {
        t.write_npy(dir.join(format!("{name}.npy"))).unwrap();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("../../.venv/bin/python"))
        .arg(root.join("reference/fgsm_reference.py"))
        .arg(&dir)
        .arg("0.3")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "FGSM differs from the reference: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn explicit_clips_hold_and_zero_is_a_clip() {
    // FastEstimator's `clip_low or min(data)` drops a clip of 0; here 0 clips.
    let x = Tensor::from_slice(&[0.5f32, 1.5, 2.5]).reshape([1, 3]);
    let mut watch = testing::tensor_op("Watch", "", &["x"], &["x"]).unwrap();
    let watched = watch.forward(&[&x]).unwrap().remove(0);
    let loss = watched.f_mul_scalar(-1.0).unwrap().sum(Kind::Float);
    let mut fgsm = testing::tensor_op(
        "FGSM",
        "epsilon = 1.0\nclip_low = 0.0\nclip_high = 2.0",
        &["x", "l"],
        &["a"],
    )
    .unwrap();
    // The gradient is -1 everywhere: every value moves down by 1, then [0, 2].
    let got =
        Vec::<f32>::try_from(&fgsm.forward(&[&watched, &loss]).unwrap()[0].reshape([-1])).unwrap();
    assert_eq!(got, [0.0, 0.5, 1.5]);
}

#[test]
fn data_without_watch_or_a_loss_without_graph_is_named() {
    let x = Tensor::ones([2, 2], (Kind::Float, Device::Cpu));
    let mut fgsm = testing::tensor_op("FGSM", "", &["x", "l"], &["a"]).unwrap();
    let error = fgsm.forward(&[&x, &x.sum(Kind::Float)]).unwrap_err();
    assert!(
        error.to_string().contains("put a Watch on its key"),
        "{error}"
    );
    let watched = x.detach().set_requires_grad(true);
    let constant = Tensor::from(1.0f32);
    let error = fgsm.forward(&[&watched, &constant]).unwrap_err();
    assert!(error.to_string().contains("no gradient graph"), "{error}");
    assert!(testing::tensor_op("FGSM", "epsilon = -1", &["x", "l"], &["a"]).is_err());
}
