//! What every generated dataset shares: sizes and seed, a random stream per sample, and
//! writing the `train`/`eval`/`test` splits as IDX files with a `MANIFEST` written last.

use std::path::Path;

use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};
use crate::pipeline::idx;

pub use super::digits::Spec;

/// One array of a split: the file name's suffix (`images` → `train-images.idx`), its
/// dimensions (the sample count first) and its bytes (uint8).
pub struct Array {
    /// File name after `<split>-`.
    pub name: &'static str,
    /// Shape, sample count first.
    pub dims: Vec<u32>,
    /// Values, row-major.
    pub bytes: Vec<u8>,
}

/// The random stream of sample `index` of split `split_id`: any sample can be regenerated
/// alone, and the same seed always gives the same bytes.
pub fn sample_rng(seed: u64, split_id: u64, index: usize) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(crate::rng::mix(
        crate::rng::mix(seed, split_id),
        index as u64,
    ))
}

/// Writes each split `make(split_id, count)` returns into `dir` as `<split>-<name>.idx`, and
/// a `MANIFEST` (`title`, the seed, `extra` lines, the counts) last: its presence means the
/// set is complete.
pub fn write(
    dir: &Path,
    title: &str,
    extra: &str,
    spec: Spec,
    make: impl Fn(u64, usize) -> Vec<Array>,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let marker = dir.join("MANIFEST");
    let _ = std::fs::remove_file(&marker);
    let mut record = format!("{title}\nseed = {}\n{extra}", spec.seed);
    for (split, id, count) in [
        ("train", 0u64, spec.train),
        ("eval", 1, spec.eval),
        ("test", 2, spec.test),
    ] {
        if count == 0 {
            continue;
        }
        for array in make(id, count) {
            let path = dir.join(format!("{split}-{}.idx", array.name));
            idx::write(&path, tch::Kind::Uint8, &array.dims, &array.bytes)?;
        }
        record.push_str(&format!("{split} = {count}\n"));
    }
    std::fs::write(&marker, record).map_err(|e| Error::io(&marker, e))
}

/// A 32×32 RGB canvas of floats in [0, 1], height × width × channel.
pub struct Canvas(pub Vec<f64>);

/// Side of every generated image.
pub const SIDE: usize = 32;

impl Canvas {
    /// A canvas filled with a vertical gradient from `top` to `bottom`.
    pub fn gradient(top: [f64; 3], bottom: [f64; 3]) -> Self {
        let mut pixels = vec![0.0; SIDE * SIDE * 3];
        for y in 0..SIDE {
            let t = y as f64 / (SIDE - 1) as f64;
            for x in 0..SIDE {
                for c in 0..3 {
                    pixels[(y * SIDE + x) * 3 + c] = top[c] * (1.0 - t) + bottom[c] * t;
                }
            }
        }
        Canvas(pixels)
    }

    /// Paints `color` where `coverage(x, y)` (pixel centre, in pixels) is positive, blended
    /// by coverage clamped to [0, 1] (anti-aliased edges); returns the covered pixels.
    pub fn paint(&mut self, color: [f64; 3], coverage: impl Fn(f64, f64) -> f64) -> Vec<bool> {
        let mut covered = vec![false; SIDE * SIDE];
        for y in 0..SIDE {
            for x in 0..SIDE {
                let a = coverage(x as f64 + 0.5, y as f64 + 0.5).clamp(0.0, 1.0);
                if a <= 0.0 {
                    continue;
                }
                covered[y * SIDE + x] = a >= 0.5;
                for (c, value) in color.iter().enumerate() {
                    let cell = &mut self.0[(y * SIDE + x) * 3 + c];
                    *cell = *cell * (1.0 - a) + value * a;
                }
            }
        }
        covered
    }

    /// Bytes with uniform noise of amplitude `noise` added.
    pub fn to_bytes(&self, rng: &mut impl rand::Rng, noise: f64) -> Vec<u8> {
        self.0
            .iter()
            .map(|v| {
                let v = v + noise * (rng.random::<f64>() - 0.5);
                (v.clamp(0.0, 1.0) * 255.0).round() as u8
            })
            .collect()
    }
}

/// A random colour whose channels lie in `low..high`.
pub fn color(rng: &mut impl rand::Rng, low: f64, high: f64) -> [f64; 3] {
    [
        rng.random_range(low..high),
        rng.random_range(low..high),
        rng.random_range(low..high),
    ]
}
