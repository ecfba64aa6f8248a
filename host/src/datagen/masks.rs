//! Images with segmentation masks: 32×32×3 uint8 images holding one to three shapes (the
//! five shapes of the CIFAR-shaped set) that stand out from a gradient background by
//! contrast, and a `[1, 32, 32]` mask per image (channels first, 1 where a shape covers the
//! pixel), ready for a sigmoid UNet and the Dice trace.

use std::f64::consts::PI;
use std::path::Path;

use rand::Rng;

use super::cifar::shape_coverage;
use super::splits::{self, color, Array, Canvas, Spec, SIDE};
use crate::error::Result;

fn sample(rng: &mut impl Rng) -> (Vec<u8>, Vec<u8>) {
    // Dark shapes on a light background or the reverse, decided per image.
    let light_background = rng.random_bool(0.5);
    let (background, ink) = if light_background {
        ((0.55, 0.9), (0.0, 0.35))
    } else {
        ((0.1, 0.45), (0.65, 1.0))
    };
    let mut canvas = Canvas::gradient(
        color(rng, background.0, background.1),
        color(rng, background.0, background.1),
    );
    let mut mask = vec![0u8; SIDE * SIDE];
    for _ in 0..rng.random_range(1..=3) {
        let kind = rng.random_range(0..5u8);
        let r = rng.random_range(4.0..9.0);
        let (cx, cy) = (
            rng.random_range(r..SIDE as f64 - r),
            rng.random_range(r..SIDE as f64 - r),
        );
        let angle = rng.random_range(0.0..2.0 * PI);
        let covered = canvas.paint(color(rng, ink.0, ink.1), |x, y| {
            shape_coverage(kind, cx, cy, r, angle, x, y)
        });
        for (cell, hit) in mask.iter_mut().zip(covered) {
            *cell |= u8::from(hit);
        }
    }
    (canvas.to_bytes(rng, 0.12), mask)
}

/// Images `[count, 32, 32, 3]` and masks `[count, 1, 32, 32]` of one split.
pub fn split(seed: u64, split_id: u64, count: usize) -> Vec<Array> {
    let mut images = Vec::with_capacity(count * SIDE * SIDE * 3);
    let mut masks = Vec::with_capacity(count * SIDE * SIDE);
    for index in 0..count {
        let (image, mask) = sample(&mut splits::sample_rng(seed, split_id, index));
        images.extend(image);
        masks.extend(mask);
    }
    let (n, side) = (count as u32, SIDE as u32);
    vec![
        Array {
            name: "images",
            dims: vec![n, side, side, 3],
            bytes: images,
        },
        Array {
            name: "masks",
            dims: vec![n, 1, side, side],
            bytes: masks,
        },
    ]
}

/// Writes `<split>-images.idx` and `<split>-masks.idx` for each split into `dir`.
pub fn write(dir: &Path, spec: Spec) -> Result<()> {
    splits::write(dir, "fe-host synthetic masks v1", "", spec, |id, count| {
        split(spec.seed, id, count)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_masks_are_binary_and_neither_empty_nor_full() {
        let a = split(4, 0, 100);
        assert_eq!(a[0].dims, [100, 32, 32, 3]);
        assert_eq!(a[1].dims, [100, 1, 32, 32]);
        assert_eq!(split(4, 0, 100)[1].bytes, a[1].bytes);
        assert_ne!(split(5, 0, 100)[1].bytes, a[1].bytes);
        assert!(a[1].bytes.iter().all(|&v| v <= 1));
        for mask in a[1].bytes.chunks(32 * 32) {
            let on = mask.iter().filter(|&&v| v == 1).count();
            assert!((20..900).contains(&on), "{on} mask pixels");
        }
    }

    #[test]
    fn masked_pixels_contrast_with_the_rest() {
        let a = split(8, 0, 50);
        for (image, mask) in a[0]
            .bytes
            .chunks(32 * 32 * 3)
            .zip(a[1].bytes.chunks(32 * 32))
        {
            let mean = |on: u8| {
                let values: Vec<f64> = image
                    .chunks(3)
                    .zip(mask)
                    .filter(|(_, &m)| m == on)
                    .map(|(p, _)| p.iter().map(|&v| v as f64).sum::<f64>() / 3.0)
                    .collect();
                values.iter().sum::<f64>() / values.len().max(1) as f64
            };
            assert!(
                (mean(1) - mean(0)).abs() > 40.0,
                "{} vs {}",
                mean(1),
                mean(0)
            );
        }
    }
}
