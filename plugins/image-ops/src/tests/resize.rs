use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::testing;

use super::{bytes, direct, floats, ints, op, ramp};

fn resize(config: &str, x: &Tensor) -> Tensor {
    op("Resize", config, &["x"])
        .forward(&[x])
        .unwrap()
        .remove(0)
}

#[test]
fn nearest_upscale_repeats_pixels() {
    let x = bytes(&[1, 2, 3, 4], &[2, 2]);
    let y = resize("height = 4\nwidth = 4\ninterpolation = \"nearest\"", &x);
    assert_eq!(y.size(), [4, 4]);
    assert_eq!(y.kind(), Kind::Uint8);
    assert_eq!(ints(&y), [1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4]);
}

#[test]
fn bilinear_upscale_uses_pixel_centres() {
    // cv2.resize(np.array([[0, 100]]), (4, 1)) samples x = -0.25, 0.25, 0.75, 1.25.
    let x = bytes(&[0, 100], &[1, 2, 1]);
    let y = resize("height = 1\nwidth = 4", &x);
    assert_eq!(y.size(), [1, 4, 1]);
    assert_eq!(ints(&y), [0, 25, 75, 100]);
    let y = resize(
        "height = 1\nwidth = 4\ninterpolation = \"linear\"",
        &x.to_kind(Kind::Float),
    );
    assert_eq!(y.kind(), Kind::Float);
    assert_eq!(floats(&y), [0.0, 25.0, 75.0, 100.0]);
}

#[test]
fn bilinear_downscale_averages_and_rounds_half_up_for_uint8() {
    let x = ramp(&[4, 4], Kind::Float);
    let y = resize("height = 2\nwidth = 2", &x);
    assert_eq!(floats(&y), [2.5, 4.5, 10.5, 12.5]);
    let y = resize("height = 2\nwidth = 2", &x.to_kind(Kind::Uint8));
    assert_eq!(y.kind(), Kind::Uint8);
    assert_eq!(ints(&y), [3, 5, 11, 13]);
}

#[test]
fn shapes_and_dtypes_are_kept() {
    let config = "height = 3\nwidth = 4";
    let hwc = Tensor::zeros([5, 7, 3], (Kind::Uint8, Device::Cpu));
    assert_eq!(resize(config, &hwc).size(), [3, 4, 3]);
    let hw = Tensor::zeros([5, 7], (Kind::Float, Device::Cpu));
    let y = resize(config, &hw);
    assert_eq!((y.size(), y.kind()), (vec![3, 4], Kind::Float));
    let mask = ramp(&[2, 2], Kind::Int64);
    let y = resize(&format!("{config}\ninterpolation = \"nearest\""), &mask);
    assert_eq!((y.size(), y.kind()), (vec![3, 4], Kind::Int64));
    assert_eq!(ints(&y), [0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3]);
}

#[test]
fn bicubic_keeps_a_constant_image_constant_and_saturates() {
    let x = Tensor::full([3, 3, 2], 7, (Kind::Uint8, Device::Cpu));
    let y = resize("height = 5\nwidth = 6\ninterpolation = \"bicubic\"", &x);
    assert_eq!(y.size(), [5, 6, 2]);
    assert!(ints(&y).iter().all(|&v| v == 7));
    // Overshoot at a hard edge stays inside 0..=255.
    let edge = bytes(&[0, 0, 255, 255], &[1, 4]);
    let config = "height = 1\nwidth = 7\ninterpolation = \"cubic\"";
    let exact = floats(&resize(config, &edge.to_kind(Kind::Float)));
    assert!(
        exact.iter().any(|&v| !(0.0..=255.0).contains(&v)),
        "{exact:?}"
    );
    let saturated: Vec<i64> = exact
        .iter()
        .map(|v| (v + 0.5).floor().clamp(0.0, 255.0) as i64)
        .collect();
    assert_eq!(ints(&resize(config, &edge)), saturated);
}

#[test]
fn batch_equals_stacked_samples() {
    let config = "height = 4\nwidth = 3";
    let op = op("Resize", config, &["x", "m"]);
    assert!(direct("Resize", config, &["x"]).batchable());
    let images = Tensor::rand([3, 6, 5, 2], (Kind::Float, Device::Cpu)).g_mul_scalar(255.0);
    for x in [images.shallow_clone(), images.to_kind(Kind::Uint8)] {
        let masks = ramp(&[3, 6, 5], Kind::Uint8);
        let batch = op.forward_batch(&[&x, &masks]).unwrap();
        assert_eq!(batch[0].size(), [3, 4, 3, 2]);
        assert_eq!(batch[1].size(), [3, 4, 3]);
        for i in 0..3 {
            let single = op.forward(&[&x.get(i), &masks.get(i)]).unwrap();
            assert!(batch[0].get(i).equal(&single[0]), "sample {i}");
            assert!(batch[1].get(i).equal(&single[1]), "sample {i}");
        }
    }
}

#[test]
fn bad_inputs_and_config_are_errors() {
    let err = op("Resize", "height = 2\nwidth = 2", &["img"])
        .forward(&[&Tensor::from_slice(&[1u8, 2, 3])])
        .unwrap_err();
    assert!(err.message.contains("input `img`"), "{err}");
    let err = op("Resize", "height = 2\nwidth = 2", &["img"])
        .forward(&[&Tensor::from_slice(&[true, false]).reshape([1, 2])])
        .unwrap_err();
    assert!(err.message.contains("Bool"), "{err}");
    let build = |config: &str| testing::numpy_op("Resize", config, &["x"], &["x"]).unwrap_err();
    assert_eq!(build("height = 0\nwidth = 2").field.as_str(), "height");
    assert!(build("height = 2").message.contains("width"));
    assert_eq!(
        build("height = 2\nwidth = 2\ninterpolation = \"area\"")
            .field
            .as_str(),
        "interpolation"
    );
    assert_eq!(
        build("height = 2\nwidth = 2\nsize = 3").field.as_str(),
        "size"
    );
}
