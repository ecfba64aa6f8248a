//! `Downscale` against albumentations 2.0.8 for the drawn factor, and `ImageCompression`'s
//! JPEG round trip against OpenCV's (libjpeg-turbo) distortion at the same quality.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::downscale::{enlarge, shrink};
use crate::layout::Spatial;
use crate::{Downscale, ImageCompression, Interpolation};

/// uint8 `(H, W, 3)`, the same as float32, `(H, W)` and a 4-channel image.
fn images() -> [Tensor; 4] {
    let image = noise(&[13, 17, 3], 60);
    let float = image.to_kind(Kind::Float) / 255.0;
    [image, float, noise(&[13, 17], 61), noise(&[9, 10, 4], 62)]
}

/// OpenCV's interpolation flag of our name.
fn cv2_flag(name: &str) -> i64 {
    match name {
        "nearest" => 0,
        "bilinear" => 1,
        _ => 2,
    }
}

#[test]
fn downscale_matches_albumentations_for_the_drawn_scale() {
    let pairs = [
        ("nearest", "nearest"),
        ("bilinear", "bilinear"),
        ("nearest", "bilinear"),
        ("bilinear", "nearest"),
        ("bicubic", "bicubic"),
    ];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (down, up) in pairs {
        let config = format!(
            "scale_range = [0.15, 0.95]\ninterpolation_pair = {{ downscale = \"{down}\", upscale = \"{up}\" }}\np = 1.0"
        );
        let op = direct("Downscale", &config, &["x"]);
        let inner = typed::<Downscale>(&config, &["x"]).0;
        for x in &images() {
            for seed in 0..6 {
                let p = inner.params(&[x], seed).unwrap().unwrap();
                let what = format!("{down}/{up} {:?} {:?} scale {}", x.kind(), x.size(), p[0]);
                ours.push((what, run(op.as_ref(), &[x], seed).remove(0)));
                let pair = json!({"downscale": cv2_flag(down), "upscale": cv2_flag(up)});
                cases.push(Case::apply(
                    "Downscale",
                    json!({ "interpolation_pair": pair }),
                    json!({ "scale": p[0] }),
                    x,
                    None,
                ));
            }
        }
    }
    for ((what, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        // Floats go through uint8 both ways, so one uint8 step is 1/255.
        let tolerance = if y.kind() == Kind::Uint8 {
            1.0
        } else {
            1.0 / 255.0 + 1e-6
        };
        // Nearest picks the same pixels; each resampling rounds within one level of
        // OpenCV's fixed point (checked per stage below), so two of them within two.
        let stages = if what.starts_with("nearest/nearest") {
            0.0
        } else if what.starts_with("nearest") || what.contains("/nearest") {
            1.0
        } else {
            2.0
        };
        let d = max_diff(y, &r);
        assert!(d <= stages * tolerance + 1e-6, "{what}: differs by {d}");
    }
}

#[test]
fn each_downscale_resize_is_within_one_level_of_cv2_resize() {
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for how in [
        Interpolation::Nearest,
        Interpolation::Bilinear,
        Interpolation::Bicubic,
    ] {
        let flag = cv2_flag(&format!("{how:?}").to_lowercase());
        for x in &images()[2..] {
            let layout = Spatial::of("x", x, false).unwrap();
            for scale in [0.13, 0.25, 0.3, 0.5, 0.61, 0.77, 0.9] {
                let small = shrink(x, &layout, scale, how).unwrap();
                let args = json!([null, null, scale, scale, flag]);
                cases.push(Case::new(
                    "cv2",
                    "resize",
                    json!({}),
                    json!({"args": args}),
                    x,
                    None,
                ));
                ours.push((
                    format!("{how:?} down {scale} {:?}", x.size()),
                    small.shallow_clone(),
                ));
                let big = enlarge(&small, &layout, how).unwrap();
                let args = json!([[layout.width, layout.height], null, 0, 0, flag]);
                cases.push(Case::new(
                    "cv2",
                    "resize",
                    json!({}),
                    json!({"args": args}),
                    &small,
                    None,
                ));
                ours.push((format!("{how:?} up from {scale} {:?}", x.size()), big));
            }
        }
    }
    for ((what, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        let r = r.reshape(y.size());
        let d = max_diff(y, &r);
        let tolerance = if what.starts_with("Nearest") {
            0.0
        } else {
            1.0
        };
        assert!(d <= tolerance, "{what}: differs by {d}");
    }
}

#[test]
fn downscale_draws_follow_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    let op = typed::<Downscale>("scale_range = [0.2, 0.9]\np = 1.0", &["x"]).0;
    let ours: Vec<f64> = (0..n as u64)
        .map(|s| op.params(&[&image], s).unwrap().unwrap()[0])
        .collect();
    let init = json!({"scale_range": [0.2, 0.9]});
    let theirs = albumentations_samples("Downscale", init, &[4, 4, 3], "scale", n);
    let theirs: Vec<f64> = theirs.iter().map(|r| r[0]).collect();
    let d = ks_statistic(&ours, &theirs);
    assert!(d < critical, "scale KS {d}");
}

/// A photo-like uint8 image: smooth gradients, a hard-edged square and mild noise, so JPEG
/// quality matters the way it does on photos (pure noise is incompressible).
fn photo(channels: i64) -> Tensor {
    let opts = (Kind::Double, Device::Cpu);
    let y = Tensor::arange(48, opts).view([48, 1, 1]);
    let x = Tensor::arange(64, opts).view([1, 64, 1]);
    let c = Tensor::arange(channels, opts).view([1, 1, channels]);
    let smooth = (&x * 3.0 + &y * 2.0 + &c * 40.0).fmod(200.0)
        + ((&x / 5.0).sin() * (&y / 7.0).cos()) * 30.0;
    let square = (y.ge(12).logical_and(&y.lt(30)))
        .logical_and(&x.ge(20).logical_and(&x.lt(44)))
        .to_kind(Kind::Double)
        * 80.0;
    let grain = noise(&[48, 64, channels], 63).to_kind(Kind::Double) / 16.0;
    (smooth + square + grain)
        .clamp(0.0, 255.0)
        .round()
        .to_kind(Kind::Uint8)
}

fn psnr(a: &Tensor, b: &Tensor) -> f64 {
    let mse = (a.to_kind(Kind::Double) - b.to_kind(Kind::Double))
        .square()
        .mean(Kind::Double)
        .double_value(&[]);
    10.0 * (255.0 * 255.0 / mse).log10()
}

/// Our round trip at exactly `quality`.
fn compressed(x: &Tensor, quality: i64) -> Tensor {
    let config = format!("quality_range = [{quality}, {quality}]\np = 1.0");
    run(
        direct("ImageCompression", &config, &["x"]).as_ref(),
        &[x],
        0,
    )
    .remove(0)
}

#[test]
fn jpeg_distortion_matches_opencv_at_the_same_quality() {
    let qualities = [5, 10, 25, 50, 75, 90, 95];
    let (gray, rgb) = (photo(1), photo(3));
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for &q in &qualities {
        for (x, sampling) in [(&gray, "444"), (&rgb, "444"), (&rgb, "420")] {
            let params = json!({"quality": q, "sampling": sampling});
            cases.push(Case::new("jpeg", "imencode", json!({}), params, x, None));
            ours.push((
                format!("q {q} {:?} vs {sampling}", x.size()),
                x,
                compressed(x, q),
            ));
        }
    }
    for ((what, x, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        let (p_ours, p_cv) = (psnr(x, y), psnr(x, &r));
        if what.ends_with("420") {
            // OpenCV's default halves the chroma; ours keeps it, so it may only lose less.
            assert!(p_ours > p_cv - 0.3, "{what}: PSNR {p_ours} vs {p_cv}");
        } else {
            // Same tables and subsampling: the codecs differ only in DCT rounding (measured
            // within 0.07 dB from quality 5 to 95).
            assert!(
                (p_ours - p_cv).abs() < 0.25,
                "{what}: PSNR {p_ours} vs {p_cv}"
            );
        }
    }
}

#[test]
fn jpeg_quality_orders_the_distortion_and_channels_follow_albumentations() {
    let rgb = photo(3);
    let psnrs: Vec<f64> = [5, 20, 40, 60, 80, 95, 100]
        .iter()
        .map(|&q| psnr(&rgb, &compressed(&rgb, q)))
        .collect();
    assert!(
        psnrs.windows(2).all(|w| w[0] < w[1]),
        "PSNR by quality {psnrs:?}"
    );
    assert!(
        psnrs[0] < 32.0 && psnrs[6] > 45.0,
        "PSNR by quality {psnrs:?}"
    );
    // Floats are the uint8 round trip / 255.
    let float = rgb.to_kind(Kind::Float) / 255.0;
    let expected = compressed(&rgb, 30).to_kind(Kind::Float) / 255.0;
    assert!(compressed(&float, 30).allclose(&expected, 1e-6, 1e-7, false));
    // (H, W) as one gray channel; 2 channels padded to RGB; a 4th channel as its own gray.
    let gray = photo(1);
    let plain = compressed(&gray.squeeze_dim(2), 30);
    assert!(plain.equal(&compressed(&gray, 30).squeeze_dim(2)));
    let zero = gray.zeros_like();
    let two = Tensor::cat(&[rgb.narrow(2, 0, 2), zero.shallow_clone()], 2);
    assert!(compressed(&rgb.narrow(2, 0, 2), 30).equal(&compressed(&two, 30).narrow(2, 0, 2)));
    let four = Tensor::cat(&[rgb.shallow_clone(), gray.shallow_clone()], 2);
    let parts = Tensor::cat(&[compressed(&rgb, 30), compressed(&gray, 30)], 2);
    assert!(compressed(&four, 30).equal(&parts));
}

#[test]
fn jpeg_quality_draws_follow_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    let op = typed::<ImageCompression>("quality_range = [20, 80]\np = 1.0", &["x"]).0;
    let ours: Vec<f64> = (0..n as u64)
        .map(|s| op.params(&[&image], s).unwrap().unwrap()[0])
        .collect();
    let init = json!({"quality_range": [20, 80]});
    let theirs = albumentations_samples("ImageCompression", init, &[4, 4, 3], "quality", n);
    let theirs: Vec<f64> = theirs.iter().map(|r| r[0]).collect();
    let d = ks_statistic(&ours, &theirs);
    assert!(d < critical, "quality KS {d}");
    assert!(ours
        .iter()
        .all(|q| (20.0..=80.0).contains(q) && q.fract() == 0.0));
}
