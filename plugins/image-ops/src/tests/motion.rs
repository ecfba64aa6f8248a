//! `MotionBlur` against albumentations 2.0.8: its kernel rasterisation for the drawn line,
//! the blur for the drawn kernel, and the distribution of the drawn kernels.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use serde_json::{json, Value};

use super::reference::{albumentations, albumentations_samples, ks_statistic, max_diff, Case};
use super::{direct, floats, noise, run, typed};
use crate::motion::motion_kernel;
use crate::MotionBlur;

/// The kernel of draw `p` (`[size, angle, direction, shift x, shift y]`).
fn kernel_of(p: &[f64]) -> Vec<f32> {
    motion_kernel(p[0] as i64, p[1], p[2], [p[3], p[4]])
}

/// A row-major `size × size` kernel as nested JSON lists.
fn rows(kernel: &[f32], size: usize) -> Value {
    json!(kernel.chunks(size).collect::<Vec<_>>())
}

#[test]
fn motion_kernel_is_albumentations_kernel() {
    // Axis-aligned and diagonal angles put line points exactly on .5 (round half to even);
    // drawn parameters cover the rest.
    let mut lines: Vec<(i64, f64, f64, Option<[f64; 2]>)> = Vec::new();
    for size in [3, 5, 7, 9, 15, 31] {
        for angle in [0.0, 30.0, 45.0, 90.0, 135.0, 180.0, 225.0, 270.0, 360.0] {
            for direction in [-1.0, -0.5, 0.0, 0.3, 1.0] {
                lines.push((size, angle, direction, None));
                lines.push((size, angle, direction, Some([0.5, -1.0])));
            }
        }
    }
    let op = typed::<MotionBlur>("blur_limit = [3, 25]\np = 1.0", &["x"]).0;
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    for seed in 0..300 {
        let p = op.params(&[&image], seed).unwrap().unwrap();
        lines.push((p[0] as i64, p[1], p[2], Some([p[3], p[4]])));
    }
    let cases: Vec<Case> = lines
        .iter()
        .map(|&(size, angle, direction, shift)| {
            let params =
                json!({"size": size, "angle": angle, "direction": direction, "shift": shift});
            Case::new(
                "motion_kernel",
                "MotionBlur",
                json!({}),
                params,
                &image,
                None,
            )
        })
        .collect();
    for (&(size, angle, direction, shift), (theirs, _)) in lines.iter().zip(albumentations(&cases))
    {
        let ours = motion_kernel(size, angle, direction, shift.unwrap_or([0.0, 0.0]));
        let theirs: Vec<f32> = floats(&theirs).iter().map(|&v| v as f32).collect();
        assert_eq!(
            ours, theirs,
            "size {size} angle {angle} direction {direction} shift {shift:?}"
        );
    }
}

#[test]
fn motion_blur_matches_albumentations_for_the_drawn_kernel() {
    let image = noise(&[12, 15, 3], 70);
    let images = [
        image.shallow_clone(),
        image.to_kind(Kind::Float) / 255.0,
        noise(&[12, 15], 71),
    ];
    let config = "blur_limit = [3, 21]\np = 1.0";
    let op = direct("MotionBlur", config, &["x"]);
    let inner = typed::<MotionBlur>(config, &["x"]).0;
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for x in &images {
        for seed in 0..8 {
            let p = inner.params(&[x], seed).unwrap().unwrap();
            let kernel = rows(&kernel_of(&p), p[0] as usize);
            ours.push((
                format!("{:?} {:?} {p:?}", x.kind(), x.size()),
                run(op.as_ref(), &[x], seed).remove(0),
            ));
            cases.push(Case::apply(
                "MotionBlur",
                json!({}),
                json!({ "kernel": kernel }),
                x,
                None,
            ));
        }
    }
    for ((what, y), (r, _)) in ours.iter().zip(albumentations(&cases)) {
        let tolerance = if y.kind() == Kind::Uint8 { 1.0 } else { 1e-5 };
        let d = max_diff(y, &r);
        assert!(d <= tolerance, "{what}: differs by {d}");
    }
}

/// Kernel size, number of line points, and the line's centroid column and row.
fn summary(kernel: &[f64]) -> [f64; 4] {
    let kernel: Vec<f64> = kernel.iter().copied().filter(|v| !v.is_nan()).collect();
    let size = (kernel.len() as f64).sqrt() as usize;
    let (mut points, mut cx, mut cy) = (0.0, 0.0, 0.0);
    for (i, &w) in kernel.iter().enumerate() {
        if w > 0.0 {
            points += 1.0;
            cx += w * (i % size) as f64;
            cy += w * (i / size) as f64;
        }
    }
    [size as f64, points, cx, cy]
}

#[test]
fn motion_blur_draws_follow_albumentations_distribution() {
    let n = 3000;
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    let image = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
    for (config, init) in [
        ("blur_limit = [3, 11]", json!({"blur_limit": [3, 11]})),
        (
            "blur_limit = 9\nallow_shifted = false\nangle_range = [10, 80]\ndirection_range = [0, 1]",
            json!({"blur_limit": 9, "allow_shifted": false, "angle_range": [10, 80], "direction_range": [0, 1]}),
        ),
    ] {
        let op = typed::<MotionBlur>(&format!("{config}\np = 1.0"), &["x"]).0;
        let ours: Vec<[f64; 4]> = (0..n as u64)
            .map(|s| {
                let p = op.params(&[&image], s).unwrap().unwrap();
                let k: Vec<f64> = kernel_of(&p).iter().map(|&v| f64::from(v)).collect();
                summary(&k)
            })
            .collect();
        let theirs = albumentations_samples("MotionBlur", init, &[4, 4, 3], "kernel", n);
        let theirs: Vec<[f64; 4]> = theirs.iter().map(|k| summary(k)).collect();
        for (i, what) in ["size", "points", "centroid x", "centroid y"].iter().enumerate() {
            let a: Vec<f64> = ours.iter().map(|s| s[i]).collect();
            let b: Vec<f64> = theirs.iter().map(|s| s[i]).collect();
            let d = ks_statistic(&a, &b);
            assert!(d < critical, "{config}: {what} KS {d}");
        }
    }
}
