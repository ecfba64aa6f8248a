//! Token sequences with a learnable label: each sequence of `length` ids in `0..vocab` is
//! mostly noise tokens, with a few "signal" tokens of its class planted at random
//! positions. Class `c` owns the ids `4c+1 ..= 4c+4`; noise is drawn from the ids above
//! every class's (id 0 is left unused, free for padding). A bag of words solves it, an
//! order-blind guess does not: chance is `1 / classes`.

use std::path::Path;

use rand::Rng;

use super::splits::{self, Array, Spec};
use crate::error::{Error, Result};

/// Shape of a token set.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Tokens per sequence.
    pub length: usize,
    /// Distinct ids (at most 256: ids are stored as uint8).
    pub vocab: usize,
    /// Classes.
    pub classes: usize,
}

const SIGNAL_PER_CLASS: usize = 4;

impl Shape {
    /// Checks the shape leaves room for every class's signal ids and some noise ids.
    pub fn check(&self) -> Result<()> {
        let signal = 1 + SIGNAL_PER_CLASS * self.classes;
        if self.classes < 2 || self.classes > 50 {
            return Err(Error::Usage(format!(
                "--classes must lie in 2..=50, got {}",
                self.classes
            )));
        }
        if self.vocab > 256 || self.vocab < signal + 4 {
            return Err(Error::Usage(format!(
                "--vocab must lie in {}..=256 for {} classes (4 signal ids each, id 0, and noise), got {}",
                signal + 4,
                self.classes,
                self.vocab
            )));
        }
        if self.length < 8 || self.length > 4096 {
            return Err(Error::Usage(format!(
                "--length must lie in 8..=4096, got {}",
                self.length
            )));
        }
        Ok(())
    }
}

fn sample(shape: Shape, rng: &mut impl Rng) -> (Vec<u8>, u8) {
    let label = rng.random_range(0..shape.classes);
    let noise_start = 1 + SIGNAL_PER_CLASS * shape.classes;
    let mut tokens: Vec<u8> = (0..shape.length)
        .map(|_| rng.random_range(noise_start..shape.vocab) as u8)
        .collect();
    let planted = rng.random_range(3..=(shape.length / 4).max(3));
    for _ in 0..planted {
        let at = rng.random_range(0..shape.length);
        tokens[at] = (1 + SIGNAL_PER_CLASS * label + rng.random_range(0..SIGNAL_PER_CLASS)) as u8;
    }
    (tokens, label as u8)
}

/// Tokens `[count, length]` and labels `[count]` of one split.
pub fn split(shape: Shape, seed: u64, split_id: u64, count: usize) -> Vec<Array> {
    let mut tokens = Vec::with_capacity(count * shape.length);
    let mut labels = Vec::with_capacity(count);
    for index in 0..count {
        let (sequence, label) = sample(shape, &mut splits::sample_rng(seed, split_id, index));
        tokens.extend(sequence);
        labels.push(label);
    }
    let n = count as u32;
    vec![
        Array {
            name: "tokens",
            dims: vec![n, shape.length as u32],
            bytes: tokens,
        },
        Array {
            name: "labels",
            dims: vec![n],
            bytes: labels,
        },
    ]
}

/// Writes `<split>-tokens.idx` and `<split>-labels.idx` for each split into `dir`.
pub fn write(dir: &Path, spec: Spec, shape: Shape) -> Result<()> {
    shape.check()?;
    let extra = format!(
        "length = {}\nvocab = {}\nclasses = {}\n",
        shape.length, shape.vocab, shape.classes
    );
    splits::write(
        dir,
        "fe-host synthetic tokens v1",
        &extra,
        spec,
        |id, count| split(shape, spec.seed, id, count),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: Shape = Shape {
        length: 32,
        vocab: 64,
        classes: 4,
    };

    #[test]
    fn deterministic_ids_in_range_and_the_label_is_planted() {
        let a = split(SHAPE, 3, 0, 200);
        assert_eq!(a[0].dims, [200, 32]);
        assert_eq!(split(SHAPE, 3, 0, 200)[0].bytes, a[0].bytes);
        assert_ne!(split(SHAPE, 4, 0, 200)[0].bytes, a[0].bytes);
        for (sequence, &label) in a[0].bytes.chunks(32).zip(&a[1].bytes) {
            assert!(sequence
                .iter()
                .all(|&t| t >= 1 && (t as usize) < SHAPE.vocab));
            // Only the label's own signal ids appear: a bag of words decides the class.
            let signal: Vec<u8> = sequence.iter().copied().filter(|&t| t <= 16).collect();
            assert!(!signal.is_empty());
            assert!(
                signal.iter().all(|&t| (t - 1) / 4 == label),
                "{sequence:?} {label}"
            );
        }
        for class in 0..4 {
            assert!(a[1].bytes.contains(&class));
        }
    }

    #[test]
    fn shapes_without_room_are_refused() {
        let small = Shape { vocab: 10, ..SHAPE };
        assert!(small.check().is_err());
        let big = Shape {
            vocab: 300,
            ..SHAPE
        };
        assert!(big.check().is_err());
        assert!(SHAPE.check().is_ok());
    }
}
