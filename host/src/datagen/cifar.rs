//! CIFAR-shaped images (32×32×3, uint8, height × width × channel as CIFAR-10's arrays) with
//! ten learnable classes: five shapes (disk, square, triangle, ring, cross) in two palettes
//! (warm, cool), each drawn at a random position, size and rotation over a random gradient
//! background with pixel noise. Telling classes apart needs both shape and colour.

use std::f64::consts::PI;
use std::path::Path;

use rand::Rng;

use super::splits::{self, color, Array, Canvas, Spec, SIDE};
use crate::error::Result;

/// Number of classes.
pub const CLASSES: u8 = 10;

/// Signed coverage (> 0 inside, about one pixel of anti-aliasing) of shape `kind` centred at
/// `(cx, cy)` with radius `r` and rotation `angle`, at pixel `(x, y)`.
pub(crate) fn shape_coverage(
    kind: u8,
    cx: f64,
    cy: f64,
    r: f64,
    angle: f64,
    x: f64,
    y: f64,
) -> f64 {
    let (dx, dy) = (x - cx, y - cy);
    let (u, v) = (
        dx * angle.cos() + dy * angle.sin(),
        -dx * angle.sin() + dy * angle.cos(),
    );
    let distance = (dx * dx + dy * dy).sqrt();
    0.5 + match kind {
        0 => r - distance,
        1 => 0.8 * r - u.abs().max(v.abs()),
        2 => (0..3)
            .map(|k| {
                let a = angle + PI / 2.0 + k as f64 * 2.0 * PI / 3.0;
                0.5 * r - (dx * a.cos() + dy * a.sin())
            })
            .fold(f64::INFINITY, f64::min),
        3 => (r - distance).min(distance - 0.55 * r),
        _ => (r - u.abs())
            .min(0.3 * r - v.abs())
            .max((r - v.abs()).min(0.3 * r - u.abs())),
    }
}

/// One image and its label.
fn sample(rng: &mut impl Rng) -> (Vec<u8>, u8) {
    let label = rng.random_range(0..CLASSES);
    let (kind, warm) = (label % 5, label < 5);
    let mut canvas = Canvas::gradient(color(rng, 0.25, 0.75), color(rng, 0.25, 0.75));
    let r = rng.random_range(6.0..11.0);
    let (cx, cy) = (
        rng.random_range(r..SIDE as f64 - r),
        rng.random_range(r..SIDE as f64 - r),
    );
    let angle = rng.random_range(0.0..2.0 * PI);
    let ink = if warm {
        [
            rng.random_range(0.75..1.0),
            rng.random_range(0.2..0.6),
            rng.random_range(0.0..0.25),
        ]
    } else {
        [
            rng.random_range(0.0..0.25),
            rng.random_range(0.2..0.6),
            rng.random_range(0.75..1.0),
        ]
    };
    canvas.paint(ink, |x, y| shape_coverage(kind, cx, cy, r, angle, x, y));
    (canvas.to_bytes(rng, 0.15), label)
}

/// Images `[count, 32, 32, 3]` and labels `[count]` of one split.
pub fn split(seed: u64, split_id: u64, count: usize) -> Vec<Array> {
    let mut images = Vec::with_capacity(count * SIDE * SIDE * 3);
    let mut labels = Vec::with_capacity(count);
    for index in 0..count {
        let (image, label) = sample(&mut splits::sample_rng(seed, split_id, index));
        images.extend(image);
        labels.push(label);
    }
    let n = count as u32;
    vec![
        Array {
            name: "images",
            dims: vec![n, SIDE as u32, SIDE as u32, 3],
            bytes: images,
        },
        Array {
            name: "labels",
            dims: vec![n],
            bytes: labels,
        },
    ]
}

/// Writes `<split>-images.idx` and `<split>-labels.idx` for each split into `dir`.
pub fn write(dir: &Path, spec: Spec) -> Result<()> {
    splits::write(dir, "fe-host synthetic cifar v1", "", spec, |id, count| {
        split(spec.seed, id, count)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_shaped_like_cifar_and_every_class_present() {
        let a = split(5, 0, 300);
        assert_eq!(a[0].dims, [300, 32, 32, 3]);
        assert_eq!(a[1].dims, [300]);
        assert_eq!(a[0].bytes.len(), 300 * 32 * 32 * 3);
        let b = split(5, 0, 300);
        assert!(a[0].bytes == b[0].bytes && a[1].bytes == b[1].bytes);
        assert_ne!(split(6, 0, 300)[0].bytes, a[0].bytes);
        assert_ne!(split(5, 1, 300)[0].bytes, a[0].bytes);
        for class in 0..CLASSES {
            assert!(a[1].bytes.contains(&class), "class {class} missing");
        }
    }

    #[test]
    fn the_class_colour_is_in_the_pixels() {
        // Warm classes (0..5) have more red than blue where the shape is; cool the reverse.
        // Summed over an image, the shape tips the balance often enough to be learnable.
        let arrays = split(9, 0, 200);
        let mut agree = 0;
        for (image, &label) in arrays[0].bytes.chunks(32 * 32 * 3).zip(&arrays[1].bytes) {
            let (mut red, mut blue) = (0i64, 0i64);
            for pixel in image.chunks(3) {
                red += pixel[0] as i64;
                blue += pixel[2] as i64;
            }
            agree += usize::from((red > blue) == (label < 5));
        }
        assert!(agree > 150, "{agree}/200 images lean towards their palette");
    }

    #[test]
    fn every_shape_covers_its_centre_and_not_the_far_corner() {
        for kind in 0..5 {
            let inside = shape_coverage(kind, 16.0, 16.0, 9.0, 0.3, 16.5, 13.0);
            let corner = shape_coverage(kind, 16.0, 16.0, 9.0, 0.3, 1.0, 1.0);
            assert!(corner < 0.0, "shape {kind} reaches the corner");
            if kind != 3 {
                assert!(inside > 0.0, "shape {kind} misses its centre");
            }
        }
    }
}
