//! Collation: samples (one tensor per key) into a batch (each key stacked along a new first
//! dimension), padding samples of different shapes when a `Batch` op gives a `pad_value`
//! (FastEstimator's `pad_batch`: every dimension padded at its end to the largest size).

use tch::{Device, Kind, Tensor};

use crate::batch::{Batch, KeyId, Keys};
use crate::error::{Error, Result};

/// How to collate the samples of one epoch.
pub struct Collator<'a> {
    /// Key names, for messages.
    pub keys: &'a Keys,
    /// Key slots of a batch.
    pub width: usize,
    /// Pad ragged keys with this value.
    pub pad_value: Option<f64>,
    /// Pad ragged text (1-D uint8) with zero bytes even without a `pad_value`.
    pub pad_text: bool,
    /// `train epoch 1` (and the ds_id), for messages.
    pub context: String,
}

/// Stacked samples, or the samples back when a key's shapes differ and that is not an error.
pub enum Stacked {
    /// Every key stacked.
    Batch(Batch),
    /// Some key's shapes differ.
    Ragged(Vec<Batch>),
}

impl Collator<'_> {
    /// Stacks the `keys` the first sample holds (others are dropped). Samples of different
    /// shapes are padded when allowed; otherwise `strict` reports them and non-strict gives
    /// the samples back. `indices` are the samples' dataset indices and `number` the batch's
    /// (from 1), for messages.
    pub fn stack(
        &self,
        mut samples: Vec<Batch>,
        keys: &[KeyId],
        indices: &[u64],
        number: usize,
        strict: bool,
    ) -> Result<Stacked> {
        let mut keys: Vec<KeyId> = keys
            .iter()
            .copied()
            .filter(|k| samples.first().is_some_and(|s| s.get(*k).is_some()))
            .collect();
        keys.sort();
        keys.dedup();
        let mut batch = Batch::with_keys(self.width);
        batch.size = samples.len() as i64;
        let mut plan = Vec::with_capacity(keys.len());
        for &key in &keys {
            if let Some(at) = samples.iter().position(|s| s.get(key).is_none()) {
                return Err(Error::Run(format!(
                    "pipeline ({}): key `{}` is missing from dataset sample {} of batch {number} (other samples have it)",
                    self.context,
                    self.keys.name(key),
                    indices.get(at).copied().unwrap_or_default(),
                )));
            }
            let shapes: Vec<Vec<i64>> = samples
                .iter()
                .map(|s| s.get(key).map(Tensor::size).unwrap_or_default())
                .collect();
            let ragged = shapes.iter().any(|s| s != &shapes[0]);
            if !ragged {
                plan.push((key, None));
                continue;
            }
            if !strict {
                // Ops deferred to the batch have not run yet: they may still even the shapes
                // out, and padding belongs after them.
                return Ok(Stacked::Ragged(samples));
            }
            let text = samples.iter().all(|s| {
                s.get(key)
                    .is_some_and(|t| t.kind() == Kind::Uint8 && t.dim() == 1)
            });
            match self.pad_value.or((self.pad_text && text).then_some(0.0)) {
                Some(value) => {
                    let shape = self.padded_shape(key, &shapes, indices, number)?;
                    plan.push((key, Some((value, shape))));
                }
                None => return Err(self.ragged_error(key, &shapes, indices, number)),
            }
        }
        for (key, pad) in plan {
            let column: Vec<Tensor> = samples.iter_mut().filter_map(|s| s.take(key)).collect();
            let stacked = match pad {
                None => Tensor::f_stack(&column, 0),
                Some((value, shape)) => pad_stack(&column, &shape, value),
            }
            .map_err(|e| {
                Error::Run(format!(
                    "pipeline ({}): cannot batch key `{}` in batch {number}: {}",
                    self.context,
                    self.keys.name(key),
                    crate::tch_message(e)
                ))
            })?;
            batch.set(key, stacked);
        }
        Ok(Stacked::Batch(batch))
    }

    /// The largest size in every dimension; samples must agree on the number of dimensions.
    fn padded_shape(
        &self,
        key: KeyId,
        shapes: &[Vec<i64>],
        indices: &[u64],
        number: usize,
    ) -> Result<Vec<i64>> {
        if shapes.iter().any(|s| s.len() != shapes[0].len()) {
            return Err(Error::Run(format!(
                "pipeline ({}): cannot pad key `{}` in batch {number}: its samples differ in their number of dimensions ({})",
                self.context,
                self.keys.name(key),
                distinct_shapes(shapes, indices)
            )));
        }
        Ok((0..shapes[0].len())
            .map(|d| shapes.iter().map(|s| s[d]).max().unwrap_or(0))
            .collect())
    }

    fn ragged_error(
        &self,
        key: KeyId,
        shapes: &[Vec<i64>],
        indices: &[u64],
        number: usize,
    ) -> Error {
        Error::Run(format!(
            "pipeline ({}): cannot batch key `{}` in batch {number}: its samples differ in shape ({}); give the pipeline a Batch op with `pad_value` to pad them to the largest shape, or add an op that makes them one shape",
            self.context,
            self.keys.name(key),
            distinct_shapes(shapes, indices)
        ))
    }
}

/// `dataset sample 4: [3, 2]; dataset sample 9: [5, 2]`: the first sample of each distinct
/// shape (at most four).
fn distinct_shapes(shapes: &[Vec<i64>], indices: &[u64]) -> String {
    let mut seen: Vec<&Vec<i64>> = Vec::new();
    let mut parts = Vec::new();
    for (shape, index) in shapes.iter().zip(indices) {
        if !seen.contains(&shape) {
            seen.push(shape);
            if parts.len() < 4 {
                parts.push(format!("dataset sample {index}: {shape:?}"));
            }
        }
    }
    if seen.len() > parts.len() {
        parts.push(format!("{} more shapes", seen.len() - parts.len()));
    }
    parts.join("; ")
}

/// Stacks `column` into a `[n, shape...]` tensor filled with `value`, each sample in the
/// leading corner of its slot.
fn pad_stack(
    column: &[Tensor],
    shape: &[i64],
    value: f64,
) -> std::result::Result<Tensor, tch::TchError> {
    let Some(first) = column.first() else {
        return Tensor::f_stack(column, 0);
    };
    let mut size = vec![column.len() as i64];
    size.extend_from_slice(shape);
    let out = Tensor::f_full(size, value, (first.kind(), Device::Cpu))?;
    for (i, sample) in column.iter().enumerate() {
        let mut slot = out.f_select(0, i as i64)?;
        for (d, &n) in sample.size().iter().enumerate() {
            slot = slot.f_narrow(d as i64, 0, n)?;
        }
        slot.f_copy_(sample)?;
    }
    Ok(out)
}

/// Copies every tensor of `batch` into page-locked memory for `device`, so the copy to the
/// device can run asynchronously.
pub fn pin(batch: &mut Batch, keys: &[KeyId], device: Device) -> Result<()> {
    for &key in keys {
        let Some(tensor) = batch.get(key) else {
            continue;
        };
        if tensor.device() != Device::Cpu || tensor.is_pinned(device) {
            continue;
        }
        let pinned = tensor.f_pin_memory(device).map_err(|e| {
            Error::Run(format!(
                "cannot pin a batch in memory: {}",
                crate::tch_message(e)
            ))
        })?;
        batch.set(key, pinned);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_fills_each_dimension_to_the_largest() {
        // FastEstimator's test: [[1],[1]] and [[1, 1]] padded with -1.
        let a = Tensor::ones([2, 1], (Kind::Float, Device::Cpu));
        let b = Tensor::ones([1, 2], (Kind::Float, Device::Cpu));
        let out = pad_stack(&[a, b], &[2, 2], -1.0).unwrap();
        let values = Vec::<f32>::try_from(out.flatten(0, -1)).unwrap();
        assert_eq!(values, [1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0, -1.0]);
    }

    #[test]
    fn shapes_are_listed_once_each() {
        let shapes = vec![vec![3, 2], vec![3, 2], vec![5, 2]];
        assert_eq!(
            distinct_shapes(&shapes, &[4, 7, 9]),
            "dataset sample 4: [3, 2]; dataset sample 9: [5, 2]"
        );
    }
}
