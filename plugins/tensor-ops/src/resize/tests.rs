use std::path::Path;

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::testing;

fn resize(op: &str, config: &str, input: &Tensor) -> Tensor {
    let mut op = testing::tensor_op(op, config, &["x"], &["y"]).unwrap();
    op.forward(&[input]).unwrap().remove(0)
}

/// Every mode, up- and downsampling by non-integer factors, 1-, 2- and 3-D, against
/// `torch.nn.functional.interpolate` in `.venv` (`reference/resize_reference.py`).
#[test]
fn every_mode_equals_torch_interpolate() {
    let x1 = Tensor::randn([2, 3, 9], (Kind::Float, Device::Cpu));
    let x2 = Tensor::randn([2, 3, 5, 7], (Kind::Float, Device::Cpu));
    let x3 = Tensor::randn([2, 2, 3, 4, 5], (Kind::Float, Device::Cpu));
    let x2d = Tensor::randn([1, 2, 6, 5], (Kind::Double, Device::Cpu));
    let cases: Vec<(&str, &str, &Tensor, &str, Vec<i64>)> = vec![
        ("Resize", "x1", &x1, "nearest", vec![4]),
        ("Resize", "x1", &x1, "nearest", vec![14]),
        ("Resize", "x1", &x1, "linear", vec![13]),
        ("Resize", "x1", &x1, "linear", vec![4]),
        ("Resize", "x1", &x1, "area", vec![4]),
        ("Resize", "x2", &x2, "nearest", vec![8, 4]),
        ("Resize", "x2", &x2, "nearest", vec![3, 11]),
        ("Resize", "x2", &x2, "bilinear", vec![8, 11]),
        ("Resize", "x2", &x2, "bilinear", vec![3, 4]),
        ("Resize", "x2", &x2, "bicubic", vec![9, 10]),
        ("Resize", "x2", &x2, "bicubic", vec![2, 3]),
        ("Resize", "x2", &x2, "area", vec![3, 4]),
        ("Resize", "x2", &x2, "area", vec![10, 14]),
        ("Resize", "x2d", &x2d, "bicubic", vec![7, 9]),
        ("Resize", "x2d", &x2d, "area", vec![4, 3]),
        ("Resize", "x3", &x3, "trilinear", vec![5, 3, 7]),
        ("Resize", "x3", &x3, "nearest", vec![6, 2, 5]),
        ("Resize3D", "x3", &x3, "area", vec![2, 3, 2]),
        ("Resize3D", "x3", &x3, "nearest", vec![4, 8, 3]),
    ];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-scratch/resize");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, t) in [("x1", &x1), ("x2", &x2), ("x3", &x3), ("x2d", &x2d)] {
        t.write_npy(dir.join(format!("{name}.npy"))).unwrap();
    }
    let mut manifest = String::new();
    for (i, (op, input, x, mode, size)) in cases.iter().enumerate() {
        let key = if *op == "Resize" {
            "size"
        } else {
            "output_shape"
        };
        let config = format!("{key} = {size:?}\nresize_mode = \"{mode}\"");
        let out = resize(op, &config, x);
        let mut want_shape = x.size()[..2].to_vec();
        want_shape.extend(size);
        assert_eq!(out.size(), want_shape, "{op} {mode} {size:?}");
        assert_eq!(out.kind(), x.kind());
        out.write_npy(dir.join(format!("out{i}.npy"))).unwrap();
        let size: Vec<String> = size.iter().map(i64::to_string).collect();
        manifest.push_str(&format!("out{i} {input} {mode} {}\n", size.join(",")));
    }
    std::fs::write(dir.join("cases.txt"), manifest).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("../../.venv/bin/python"))
        .arg(root.join("reference/resize_reference.py"))
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "Resize differs from interpolate: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The script checked every case (it prints one line per case).
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        cases.len()
    );
}

#[test]
fn fastestimator_resize3d_test_values() {
    // test/PR_test/unit_test/op/tensorop/test_resize3d.py: 1..8 as [1, 2, 2, 2, 1], moved to
    // channels first; nearest to [4, 4, 4] repeats each voxel in a 2×2×2 block, area to
    // [1, 1, 1] is the mean 4.5.
    let x = Tensor::arange_start(1, 9, (Kind::Float, Device::Cpu)).reshape([1, 1, 2, 2, 2]);
    let out = resize("Resize3D", "output_shape = [4, 4, 4]", &x);
    assert_eq!(out.size(), [1, 1, 4, 4, 4]);
    for (h, w, d) in [(0, 0, 0), (1, 1, 1), (2, 0, 3), (3, 3, 3), (0, 2, 1)] {
        let want = x.double_value(&[0, 0, h / 2, w / 2, d / 2]);
        assert_eq!(out.double_value(&[0, 0, h, w, d]), want, "({h},{w},{d})");
    }
    let out = resize(
        "Resize3D",
        "output_shape = [1, 1, 1]\nresize_mode = 'area'",
        &x,
    );
    assert_eq!(out.double_value(&[0, 0, 0, 0, 0]), 4.5);
}

#[test]
fn several_inputs_and_gradients() {
    let a = Tensor::ones([1, 1, 2, 2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let b = Tensor::zeros([3, 2, 4, 4], (Kind::Float, Device::Cpu));
    let mut op = testing::tensor_op(
        "Resize",
        "size = [4, 6]\nresize_mode = 'bilinear'",
        &["a", "b"],
        &["ra", "rb"],
    )
    .unwrap();
    let out = op.forward(&[&a, &b]).unwrap();
    assert_eq!(out[0].size(), [1, 1, 4, 6]);
    assert_eq!(out[1].size(), [3, 2, 4, 6]);
    // Bilinear weights of each output pixel sum to 1: the 24 outputs spread 24 over 4 inputs.
    out[0].sum(Kind::Float).backward();
    assert!((a.grad().sum(Kind::Float).double_value(&[]) - 24.0).abs() < 1e-5);
}

#[test]
fn input_rank_must_match_the_size() {
    let mut op = testing::tensor_op("Resize", "size = [4, 4]", &["x"], &["y"]).unwrap();
    let unbatched = Tensor::zeros([3, 8, 8], (Kind::Float, Device::Cpu));
    let err = op.forward(&[&unbatched]).unwrap_err();
    assert!(err.message.contains("[B, C, H, W]"), "{err:?}");
}

#[test]
fn config_errors() {
    for (op, config, field) in [
        ("Resize", "size = []", "size"),
        ("Resize", "size = [1, 2, 3, 4]", "size"),
        ("Resize", "size = [0, 4]", "size"),
        (
            "Resize",
            "size = [4, 4]\nresize_mode = 'lanczos'",
            "resize_mode",
        ),
        (
            "Resize",
            "size = [4, 4, 4]\nresize_mode = 'bilinear'",
            "resize_mode",
        ),
        (
            "Resize",
            "size = [4]\nresize_mode = 'bicubic'",
            "resize_mode",
        ),
        (
            "Resize",
            "size = [4, 4]\nalign_corners = true",
            "align_corners",
        ),
        ("Resize3D", "output_shape = [1, 8, 8, 8, 1]", "output_shape"),
        ("Resize3D", "output_shape = [4, 4]", "output_shape"),
        (
            "Resize3D",
            "output_shape = [4, 4, 4]\nresize_mode = 'trilinear'",
            "resize_mode",
        ),
        ("Resize3D", "output_shape = [4, -4, 4]", "output_shape"),
    ] {
        let err = testing::tensor_op(op, config, &["x"], &["y"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), field, "{op} {config}: {err:?}");
    }
}
