//! Synthetic handwritten-style digits in the MNIST format, generated deterministically.
//!
//! Each digit is a set of pen strokes in a unit box. Every sample draws its own slant,
//! rotation, scale, aspect, shear, position, stroke width and ink, and wobbles each stroke
//! with smooth noise, then renders anti-aliased strokes into a 28x28 image with background
//! noise. The same seed always gives the same bytes, so the dataset need not be shipped.

use std::f64::consts::PI;
use std::path::Path;

use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};
use crate::pipeline::idx;

/// Image side, as MNIST.
pub const SIDE: usize = 28;

/// Sizes and seed of a generated dataset.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Training samples.
    pub train: usize,
    /// Evaluation samples.
    pub eval: usize,
    /// Test samples.
    pub test: usize,
    /// Seed.
    pub seed: u64,
}

type Stroke = Vec<(f64, f64)>;

fn arc(cx: f64, cy: f64, rx: f64, ry: f64, from_deg: f64, to_deg: f64) -> Stroke {
    let steps = (((to_deg - from_deg).abs() / 12.0).ceil() as usize).max(2);
    (0..=steps)
        .map(|i| {
            let t = (from_deg + (to_deg - from_deg) * i as f64 / steps as f64) * PI / 180.0;
            (cx + rx * t.cos(), cy + ry * t.sin())
        })
        .collect()
}

/// A polyline through `points`, split into short pieces so pen lifts and wobble act locally.
fn line(points: &[(f64, f64)]) -> Stroke {
    let mut out = vec![points[0]];
    for pair in points.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let pieces = ((b.0 - a.0).hypot(b.1 - a.1) / 0.06).ceil().max(1.0) as usize;
        out.extend((1..=pieces).map(|i| {
            let t = i as f64 / pieces as f64;
            (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t)
        }));
    }
    out
}

/// Pen strokes of each digit in a unit box (x right, y down; angles clockwise from +x).
fn glyph(digit: u8, variant: bool) -> Vec<Stroke> {
    match digit {
        0 => vec![arc(0.5, 0.5, 0.3, 0.42, 0.0, 360.0)],
        1 if variant => vec![
            line(&[(0.32, 0.25), (0.52, 0.08), (0.52, 0.92)]),
            line(&[(0.32, 0.92), (0.72, 0.92)]),
        ],
        1 => vec![line(&[(0.45, 0.08), (0.52, 0.92)])],
        2 => {
            let mut top = arc(0.5, 0.32, 0.26, 0.24, 195.0, 390.0);
            let end = *top.last().unwrap_or(&(0.76, 0.32));
            top.extend(line(&[end, (0.22, 0.9), (0.82, 0.9)]).into_iter().skip(1));
            vec![top]
        }
        3 => {
            let mut upper = arc(0.47, 0.29, 0.24, 0.21, 200.0, 450.0);
            upper.extend(arc(0.47, 0.7, 0.28, 0.22, 270.0, 520.0));
            vec![upper]
        }
        4 if variant => vec![
            line(&[(0.55, 0.08), (0.18, 0.62), (0.85, 0.62)]),
            line(&[(0.66, 0.35), (0.66, 0.92)]),
        ],
        4 => vec![
            line(&[(0.35, 0.08), (0.22, 0.58), (0.82, 0.58)]),
            line(&[(0.66, 0.22), (0.66, 0.92)]),
        ],
        5 => {
            let mut s = line(&[(0.76, 0.1), (0.32, 0.1), (0.28, 0.47)]);
            s.extend(arc(0.5, 0.66, 0.28, 0.25, 220.0, 495.0));
            vec![s]
        }
        6 => {
            let mut s = arc(0.72, 0.62, 0.5, 0.56, 250.0, 180.0);
            s.extend(arc(0.5, 0.68, 0.23, 0.23, 180.0, 540.0));
            vec![s]
        }
        7 if variant => vec![
            line(&[(0.2, 0.1), (0.8, 0.1), (0.42, 0.92)]),
            line(&[(0.38, 0.5), (0.72, 0.5)]),
        ],
        7 => vec![line(&[(0.2, 0.1), (0.8, 0.1), (0.42, 0.92)])],
        8 => vec![
            arc(0.5, 0.29, 0.2, 0.2, 90.0, 450.0),
            arc(0.5, 0.7, 0.25, 0.22, -90.0, 270.0),
        ],
        _ => {
            let mut s = arc(0.48, 0.33, 0.23, 0.22, 0.0, 360.0);
            s.extend(
                line(&[(0.71, 0.33), (0.71, 0.45), (0.62, 0.92)])
                    .into_iter()
                    .skip(1),
            );
            vec![s]
        }
    }
}

/// Renders one sample of `digit` with randomness from `rng`.
pub fn render(digit: u8, rng: &mut ChaCha8Rng) -> [u8; SIDE * SIDE] {
    let strokes = glyph(digit, rng.random_bool(0.3));
    let rotation = rng.random_range(-0.25..0.25);
    let shear = rng.random_range(-0.35..0.35);
    let scale = rng.random_range(14.0..22.0);
    let aspect = rng.random_range(0.7..1.25);
    let (dx, dy) = (rng.random_range(-3.0..3.0), rng.random_range(-3.0..3.0));
    let width = rng.random_range(1.1..2.8);
    let ink = rng.random_range(0.65..1.0);
    // Smooth wobble: a few low-frequency sinusoids in x and y.
    let wobble: Vec<(f64, f64, f64, f64)> = (0..3)
        .map(|_| {
            (
                rng.random_range(-0.04..0.04),
                rng.random_range(-0.04..0.04),
                rng.random_range(1.0..3.0),
                rng.random_range(0.0..2.0 * PI),
            )
        })
        .collect();
    let (sin, cos) = (f64::sin(rotation), f64::cos(rotation));
    let centre = SIDE as f64 / 2.0;
    let place = |(x, y): (f64, f64)| {
        let mut wx = x;
        let mut wy = y;
        for (ax, ay, freq, phase) in &wobble {
            wx += ax * (freq * 2.0 * PI * y + phase).sin();
            wy += ay * (freq * 2.0 * PI * x + phase).cos();
        }
        let (ux, uy) = ((wx - 0.5) * scale * aspect, (wy - 0.5) * scale);
        let ux = ux - shear * uy;
        (
            centre + dx + ux * cos - uy * sin,
            centre + dy + ux * sin + uy * cos,
        )
    };
    let mut image = [0f64; SIDE * SIDE];
    // Pen lifts: sometimes a stretch of a stroke is missing.
    let gap = rng.random_bool(0.1).then(|| {
        (
            rng.random_range(0..strokes.len()),
            rng.random_range(0.0..1.0),
        )
    });
    for (s, stroke) in strokes.iter().enumerate() {
        let points: Vec<(f64, f64)> = stroke.iter().copied().map(place).collect();
        let segments = points.len().saturating_sub(1).max(1);
        for (i, segment) in points.windows(2).enumerate() {
            if let Some((gap_stroke, at)) = gap {
                let position = i as f64 / segments as f64;
                if gap_stroke == s && (position - at).abs() < 0.08 {
                    continue;
                }
            }
            draw_segment(&mut image, segment[0], segment[1], width, ink);
        }
    }
    // Clutter: stray marks that are not part of the digit.
    for _ in 0..rng.random_range(0..3u32) {
        if rng.random_bool(0.4) {
            let a = (
                rng.random_range(0.0..SIDE as f64),
                rng.random_range(0.0..SIDE as f64),
            );
            let b = (
                a.0 + rng.random_range(-5.0..5.0),
                a.1 + rng.random_range(-5.0..5.0),
            );
            draw_segment(
                &mut image,
                a,
                b,
                rng.random_range(0.6..1.6),
                rng.random_range(0.2..0.7),
            );
        }
    }
    let noise = rng.random_range(0.0..0.2);
    let mut out = [0u8; SIDE * SIDE];
    for (pixel, value) in out.iter_mut().zip(image) {
        let speckle = if rng.random_bool(0.02) {
            rng.random_range(0.0..0.5)
        } else {
            0.0
        };
        let v = value + noise * rng.random::<f64>() + speckle;
        *pixel = (v.clamp(0.0, 1.0) * 255.0).round() as u8;
    }
    out
}

fn draw_segment(
    image: &mut [f64; SIDE * SIDE],
    a: (f64, f64),
    b: (f64, f64),
    width: f64,
    ink: f64,
) {
    let reach = width / 2.0 + 1.0;
    let (x0, x1) = (
        (a.0.min(b.0) - reach).floor().max(0.0) as usize,
        (a.0.max(b.0) + reach).ceil().min(SIDE as f64) as usize,
    );
    let (y0, y1) = (
        (a.1.min(b.1) - reach).floor().max(0.0) as usize,
        (a.1.max(b.1) + reach).ceil().min(SIDE as f64) as usize,
    );
    let (vx, vy) = (b.0 - a.0, b.1 - a.1);
    let length2 = (vx * vx + vy * vy).max(1e-12);
    for y in y0..y1 {
        for x in x0..x1 {
            let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
            let t = (((px - a.0) * vx + (py - a.1) * vy) / length2).clamp(0.0, 1.0);
            let (qx, qy) = (a.0 + t * vx - px, a.1 + t * vy - py);
            let distance = (qx * qx + qy * qy).sqrt();
            let coverage = (width / 2.0 + 0.5 - distance).clamp(0.0, 1.0) * ink;
            let cell = &mut image[y * SIDE + x];
            *cell = cell.max(coverage);
        }
    }
}

/// Images and labels of one split: sample `i` uses its own stream, so splits can be generated
/// in parallel and any sample can be regenerated alone.
pub fn split(seed: u64, split_id: u64, count: usize) -> (Vec<u8>, Vec<u8>) {
    let mut images = vec![0u8; count * SIDE * SIDE];
    let mut labels = vec![0u8; count];
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .max(1);
    let chunk = count.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        for (part, (images, labels)) in images
            .chunks_mut(chunk * SIDE * SIDE)
            .zip(labels.chunks_mut(chunk))
            .enumerate()
        {
            scope.spawn(move || {
                for (offset, (image, label)) in images
                    .chunks_mut(SIDE * SIDE)
                    .zip(labels.iter_mut())
                    .enumerate()
                {
                    let index = (part * chunk + offset) as u64;
                    let mut rng = ChaCha8Rng::seed_from_u64(crate::rng::mix(
                        crate::rng::mix(seed, split_id),
                        index,
                    ));
                    let digit = rng.random_range(0..10u8);
                    *label = digit;
                    image.copy_from_slice(&render(digit, &mut rng));
                }
            });
        }
    });
    (images, labels)
}

/// Writes `train`, `eval` and `test` splits as IDX files into `dir`, plus a `MANIFEST` that
/// records how they were made (written last: its presence means the set is complete).
pub fn write(dir: &Path, spec: Spec) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let marker = dir.join("MANIFEST");
    let _ = std::fs::remove_file(&marker);
    let mut record = format!("fe-host synthetic digits v1\nseed = {}\n", spec.seed);
    for (name, id, count) in [
        ("train", 0u64, spec.train),
        ("eval", 1, spec.eval),
        ("test", 2, spec.test),
    ] {
        if count == 0 {
            continue;
        }
        let (images, labels) = split(spec.seed, id, count);
        let image_file = dir.join(format!("{name}-images-idx3-ubyte"));
        let label_file = dir.join(format!("{name}-labels-idx1-ubyte"));
        idx::write(
            &image_file,
            tch::Kind::Uint8,
            &[count as u32, SIDE as u32, SIDE as u32],
            &images,
        )?;
        idx::write(&label_file, tch::Kind::Uint8, &[count as u32], &labels)?;
        record.push_str(&format!("{name} = {count}\n"));
    }
    std::fs::write(&marker, record).map_err(|e| Error::io(&marker, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_bytes_different_seed_different_bytes() {
        let (a, la) = split(1, 0, 20);
        let (b, lb) = split(1, 0, 20);
        let (c, _) = split(2, 0, 20);
        assert_eq!((a.clone(), la), (b, lb));
        assert_ne!(a, c);
    }

    #[test]
    fn every_digit_has_ink_inside_the_frame_and_labels_cover_all_classes() {
        let (images, labels) = split(3, 0, 400);
        for digit in 0..10u8 {
            assert!(labels.contains(&digit), "digit {digit} never drawn");
        }
        for image in images.chunks(SIDE * SIDE) {
            let inked = image.iter().filter(|&&p| p > 100).count();
            assert!((12..500).contains(&inked), "{inked} inked pixels");
            // The border rows stay mostly empty, as in MNIST.
            let border: usize = image[..SIDE]
                .iter()
                .chain(&image[SIDE * (SIDE - 1)..])
                .filter(|&&p| p > 200)
                .count();
            assert!(border < 6, "{border} bright border pixels");
        }
    }
}
