//! `cv2.GaussianBlur` reproduced for `Sharpen`'s "gaussian" method and `GlassBlur`: uint8
//! equal to OpenCV's fixed-point path bit for bit (those ops compare pixels with the blur, so
//! one grey level off would flip a comparison), floats within float rounding.

use fe_plugin_api::tch::{Kind, Tensor};
use serde_json::json;

use super::noise;
use super::reference::{albumentations, max_diff, Case};
use crate::cv_gaussian::{auto_size, Plane};
use crate::layout::Spatial;

/// Our blur of `x` with kernel size `n` (0: from sigma).
pub(super) fn blur(x: &Tensor, n: usize, sigma: f64) -> Tensor {
    let layout = Spatial::of("x", x, false).unwrap();
    let (plane, dims) = Plane::of(x, &layout, "test").unwrap();
    plane.blurred(dims, n, sigma).to_tensor(x).unwrap()
}

/// The reference call `cv2.GaussianBlur(x, (n, n), sigma)`.
pub(super) fn opencv(x: &Tensor, n: usize, sigma: f64) -> Case {
    let args = json!({ "args": [[n, n], sigma] });
    Case::new("cv2", "GaussianBlur", json!({}), args, x, None)
}

#[test]
fn uint8_blur_is_opencv_bit_for_bit_and_floats_within_rounding() {
    // Kernels wider than the image (repeated reflect-101), sizes from sigma, one-row images.
    let settings = [
        (0, 0.7),
        (0, 2.3),
        (0, 4.1),
        (3, 1.0),
        (5, 1.5),
        (7, 0.8),
        (11, 3.0),
        (9, 0.3),
    ];
    let base = [
        noise(&[9, 10, 3], 70),
        noise(&[6, 7], 71),
        noise(&[1, 13, 3], 72),
    ];
    let mut images: Vec<Tensor> = base.iter().map(Tensor::shallow_clone).collect();
    images.push(base[0].to_kind(Kind::Float) / 255.0);
    images.push(base[1].to_kind(Kind::Double) / 255.0);
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for &(n, sigma) in &settings {
        for x in &images {
            ours.push((
                format!("{:?} {:?} n {n} sigma {sigma}", x.kind(), x.size()),
                blur(x, n, sigma),
            ));
            cases.push(opencv(x, n, sigma));
        }
    }
    for ((what, y), (reference, _)) in ours.iter().zip(albumentations(&cases)) {
        assert_eq!(y.kind(), reference.kind(), "{what}");
        let tolerance = match y.kind() {
            Kind::Uint8 => 0.0,
            Kind::Float => 1e-6,
            _ => 1e-12,
        };
        let d = max_diff(y, &reference);
        assert!(d <= tolerance, "{what}: differs by {d}");
    }
}

#[test]
fn kernel_size_from_sigma_is_opencvs() {
    // cvRound(σ · 3 · 2 + 1) | 1 for uint8, with 4 in place of 3 for floats; half to even.
    assert_eq!(auto_size(0.7, true), 5);
    assert_eq!(auto_size(0.7, false), 7);
    assert_eq!(auto_size(0.25, true), 3);
    assert_eq!(auto_size(1.0, true), 7);
    assert_eq!(auto_size(1.0, false), 9);
    assert_eq!(auto_size(0.05, true), 1);
}
