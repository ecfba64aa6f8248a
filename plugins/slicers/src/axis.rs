//! FastEstimator's `AxisSlicer`, with minibatches of a given size or count as an option.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, Slicer};
use serde::Deserialize;

use crate::{no_slices, normalize_axis};

/// `AxisSlicer` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct AxisSlicerConfig {
    /// The axis to cut along. Negative values count from the end (`-1` is the last axis).
    /// Unslicing concatenates along the same axis of the unsliced values.
    pub axis: i64,
    /// Cut into minibatches of this many entries along `axis`, keeping the axis (the last
    /// minibatch is smaller when the length is not a multiple). Leave out, together with
    /// `num_slices`, for FastEstimator's behaviour: one slice per index with the axis removed.
    #[serde(default)]
    pub minibatch_size: Option<i64>,
    /// Cut into exactly this many minibatches along `axis`, keeping the axis; their lengths
    /// differ by at most one, the longer ones first (`torch.tensor_split`). Exclusive with
    /// `minibatch_size`.
    #[serde(default)]
    pub num_slices: Option<i64>,
}

/// How the axis is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// One slice per index, the axis removed (FastEstimator).
    EachIndex,
    /// Minibatches of this length, the axis kept.
    Size(i64),
    /// This many minibatches, the axis kept.
    Count(i64),
}

/// Cuts every `slice` key along one axis and concatenates every `unslice` key back along it.
///
/// By default (FastEstimator's `AxisSlicer`) each index along the axis becomes one minibatch
/// with the axis removed, e.g. `[B, C, W, H, D]` with `axis = -1` gives `D` minibatches of
/// `[B, C, W, H]`, and unslicing re-inserts the axis and concatenates. With `minibatch_size`
/// or `num_slices` the axis is kept and cut into runs of indices.
///
/// In a data-parallel run `minibatch_size` along the batch axis (0) is global, as the batch
/// size is: each of N ranks cuts its share into minibatches of `minibatch_size / N`, so the
/// ranks' k-th minibatches together are one process's k-th minibatch and every update sees
/// what it would see in one process. A size N does not divide, and one-sample slices of the
/// batch axis (no size or count), are refused. `num_slices` needs nothing: N ranks cutting
/// their shares into the same count give the single process's minibatches.
#[derive(Debug)]
pub struct AxisSlicer {
    axis: i64,
    cut: Cut,
    /// How many ranks share each batch (1 without data parallelism).
    ranks: i64,
}

impl FromConfig for AxisSlicer {
    type Config = AxisSlicerConfig;

    fn from_config(config: AxisSlicerConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let positive = |field: &str, value: i64| {
            if value >= 1 {
                Ok(value)
            } else {
                Err(Error::config(
                    field,
                    format!("must be at least 1, got {value}"),
                ))
            }
        };
        let cut = match (config.minibatch_size, config.num_slices) {
            (None, None) => Cut::EachIndex,
            (Some(size), None) => Cut::Size(positive("minibatch_size", size)?),
            (None, Some(count)) => Cut::Count(positive("num_slices", count)?),
            (Some(_), Some(_)) => {
                return Err(Error::config(
                    "num_slices",
                    "give either `minibatch_size` or `num_slices`, not both",
                ))
            }
        };
        let slicer = Self {
            axis: config.axis,
            cut,
            ranks: i64::from(ctx.run().world_size.max(1)),
        };
        if config.axis == 0 {
            // Known to be the batch axis already: refused with the manifest's key, not at step 1.
            let key = match cut {
                Cut::EachIndex => "axis",
                _ => "minibatch_size",
            };
            slicer.rank_cut().map_err(|why| Error::config(key, why))?;
        }
        Ok(slicer)
    }
}

impl AxisSlicer {
    /// How this rank cuts the batch axis: a global `minibatch_size` split among the ranks.
    fn rank_cut(&self) -> std::result::Result<Cut, String> {
        match self.cut {
            _ if self.ranks == 1 => Ok(self.cut),
            Cut::Size(size) if size % self.ranks == 0 => Ok(Cut::Size(size / self.ranks)),
            Cut::Size(size) => Err(format!(
                "{size} samples a minibatch do not divide among {} ranks (minibatch_size is the \
                 global size, as the batch size is); use a multiple of {}",
                self.ranks, self.ranks
            )),
            Cut::EachIndex => Err(format!(
                "one-sample minibatches of the batch axis cannot be shared by {} ranks: give \
                 minibatch_size (a multiple of {}) or num_slices",
                self.ranks, self.ranks
            )),
            Cut::Count(_) => Ok(self.cut),
        }
    }
}

impl Slicer for AxisSlicer {
    fn slice(&mut self, key: &str, batch: &Tensor) -> Result<Vec<Tensor>> {
        let shape = batch.size();
        let axis = normalize_axis(self.axis, shape.len()).ok_or_else(|| {
            Error::msg(format!(
                "axis {} is out of range for `{key}` of shape {shape:?}",
                self.axis
            ))
        })?;
        let length = shape[axis];
        if length == 0 {
            return Err(Error::msg(format!(
                "cannot cut `{key}` of shape {shape:?}: axis {} has length 0",
                self.axis
            )));
        }
        let dim = axis as i64;
        let cut = if axis == 0 {
            self.rank_cut().map_err(Error::msg)?
        } else {
            self.cut
        };
        match cut {
            Cut::EachIndex => (0..length)
                .map(|index| batch.f_select(dim, index).map_err(Error::from))
                .collect(),
            Cut::Size(size) => Ok(batch.f_split(size, dim)?),
            Cut::Count(count) => {
                if count > length {
                    return Err(Error::msg(format!(
                        "cannot cut `{key}` of shape {shape:?} into {count} slices: axis {} \
                         has only {length} entries",
                        self.axis
                    )));
                }
                Ok(batch.f_tensor_split(count, dim)?)
            }
        }
    }

    fn unslice(&mut self, key: &str, slices: &[&Tensor]) -> Result<Tensor> {
        if slices.is_empty() {
            return Err(no_slices("AxisSlicer", key));
        }
        let joined = match self.cut {
            Cut::EachIndex => {
                let expanded = slices
                    .iter()
                    .map(|slice| slice.f_unsqueeze(self.axis))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| {
                        Error::msg(format!(
                            "cannot re-insert axis {} into minibatches of `{key}` of shape {:?}: {}",
                            self.axis,
                            slices[0].size(),
                            Error::from(e)
                        ))
                    })?;
                Tensor::f_cat(&expanded, self.axis)
            }
            Cut::Size(_) | Cut::Count(_) => Tensor::f_cat(slices, self.axis),
        };
        joined.map_err(|e| {
            Error::msg(format!(
                "cannot concatenate the minibatches of `{key}` along axis {}: {}",
                self.axis,
                Error::from(e)
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Device, Kind, Tensor};
    use fe_plugin_api::{testing, ErrorKind};

    fn arange(shape: &[i64]) -> Tensor {
        let n: i64 = shape.iter().product();
        Tensor::arange(n, (Kind::Float, Device::Cpu)).reshape(shape)
    }

    fn slicer(config: &str) -> testing::TestSlicer {
        testing::slicer("AxisSlicer", config, &["x"], &["x"]).unwrap()
    }

    /// FastEstimator's behaviour on `axis`: one slice per index, the axis removed, the exact
    /// input back after unslicing.
    fn per_index_round_trip(axis: i64) {
        let shape = [2i64, 3, 4, 5, 6];
        let x = arange(&shape);
        let mut s = slicer(&format!("axis = {axis}"));
        let slices = s.slice("x", &x).unwrap();
        let index = if axis < 0 { axis + 5 } else { axis } as usize;
        assert_eq!(slices.len() as i64, shape[index]);
        let mut expected_shape = shape.to_vec();
        expected_shape.remove(index);
        for (i, slice) in slices.iter().enumerate() {
            assert_eq!(slice.size(), expected_shape, "slice {i}");
            assert!(slice.equal(&x.select(index as i64, i as i64)), "slice {i}");
        }
        let refs: Vec<&Tensor> = slices.iter().collect();
        let back = s.unslice("x", &refs).unwrap();
        assert_eq!(back.size(), shape);
        assert!(back.equal(&x));
    }

    #[test]
    fn per_index_axis_0() {
        per_index_round_trip(0);
    }

    #[test]
    fn per_index_axis_1() {
        per_index_round_trip(1);
    }

    #[test]
    fn per_index_axis_2() {
        per_index_round_trip(2);
    }

    #[test]
    fn per_index_axis_minus_1() {
        per_index_round_trip(-1);
    }

    #[test]
    fn per_index_axis_minus_3() {
        per_index_round_trip(-3);
    }

    #[test]
    fn fastestimator_volume_to_2d_with_other_unslice_key() {
        // FastEstimator's test: image [1, 1, 16, 16, 10] and label [1, 6, 16, 16, 10] cut on
        // axis -1; the model's prediction (6 channels) is unsliced to the label's shape.
        let image = Tensor::ones([1, 1, 16, 16, 10], (Kind::Float, Device::Cpu));
        let label = Tensor::zeros([1, 6, 16, 16, 10], (Kind::Uint8, Device::Cpu));
        let mut s =
            testing::slicer("AxisSlicer", "axis = -1", &["image", "label"], &["pred"]).unwrap();
        let images = s.slice("image", &image).unwrap();
        let labels = s.slice("label", &label).unwrap();
        assert_eq!(images.len(), 10);
        assert_eq!(labels.len(), 10);
        assert_eq!(images[0].size(), [1, 1, 16, 16]);
        assert_eq!(labels[3].size(), [1, 6, 16, 16]);
        assert_eq!(labels[3].kind(), Kind::Uint8);
        let preds: Vec<Tensor> = (0..10)
            .map(|i| Tensor::full([1, 6, 16, 16], i as f64, (Kind::Float, Device::Cpu)))
            .collect();
        let refs: Vec<&Tensor> = preds.iter().collect();
        let pred = s.unslice("pred", &refs).unwrap();
        assert_eq!(pred.size(), label.size());
        assert_eq!(pred.double_value(&[0, 5, 7, 7, 9]), 9.0);
        assert_eq!(pred.double_value(&[0, 2, 0, 15, 4]), 4.0);
    }

    #[test]
    fn per_index_unslice_of_scalars_stacks_them() {
        let mut s = slicer("axis = 0");
        let values = [Tensor::from(1.5f32), Tensor::from(2.5f32)];
        let refs: Vec<&Tensor> = values.iter().collect();
        let joined = s.unslice("loss", &refs).unwrap();
        assert_eq!(joined.size(), [2]);
        assert_eq!(joined.double_value(&[1]), 2.5);
    }

    #[test]
    fn minibatch_size_keeps_the_axis_and_leaves_a_smaller_last_minibatch() {
        let x = arange(&[5, 2]);
        let mut s = slicer("axis = 0\nminibatch_size = 2");
        let slices = s.slice("x", &x).unwrap();
        let sizes: Vec<Vec<i64>> = slices.iter().map(Tensor::size).collect();
        assert_eq!(sizes, [vec![2, 2], vec![2, 2], vec![1, 2]]);
        assert!(slices[2].equal(&Tensor::from_slice(&[8.0f32, 9.0]).reshape([1, 2])));
        let refs: Vec<&Tensor> = slices.iter().collect();
        assert!(s.unslice("x", &refs).unwrap().equal(&x));
    }

    #[test]
    fn minibatch_size_on_a_negative_axis() {
        let x = arange(&[2, 3, 7]);
        let mut s = slicer("axis = -1\nminibatch_size = 3");
        let slices = s.slice("x", &x).unwrap();
        let lengths: Vec<i64> = slices.iter().map(|t| t.size()[2]).collect();
        assert_eq!(lengths, [3, 3, 1]);
        assert!(slices[1].equal(&x.narrow(2, 3, 3)));
        let refs: Vec<&Tensor> = slices.iter().collect();
        assert!(s.unslice("x", &refs).unwrap().equal(&x));
    }

    #[test]
    fn minibatch_size_larger_than_the_axis_gives_one_minibatch() {
        let x = arange(&[3, 2]);
        let mut s = slicer("axis = 0\nminibatch_size = 8");
        let slices = s.slice("x", &x).unwrap();
        assert_eq!(slices.len(), 1);
        assert!(slices[0].equal(&x));
    }

    #[test]
    fn num_slices_gives_exactly_that_many_longest_first() {
        let x = arange(&[2, 7]);
        let mut s = slicer("axis = 1\nnum_slices = 3");
        let slices = s.slice("x", &x).unwrap();
        let lengths: Vec<i64> = slices.iter().map(|t| t.size()[1]).collect();
        assert_eq!(lengths, [3, 2, 2]);
        assert!(slices[2].equal(&x.narrow(1, 5, 2)));
        let refs: Vec<&Tensor> = slices.iter().collect();
        assert!(s.unslice("x", &refs).unwrap().equal(&x));

        let err = slicer("axis = 1\nnum_slices = 8")
            .slice("x", &x)
            .unwrap_err();
        assert!(err.message.contains("into 8 slices"), "{err}");
    }

    /// Runs `body` as rank 0 of `ranks` data-parallel ranks.
    fn as_ranks<T>(ranks: u32, body: impl FnOnce() -> T) -> T {
        testing::set_run_info(Some(fe_plugin_api::RunInfo {
            world_size: ranks,
            ..fe_plugin_api::RunInfo::unknown()
        }));
        let out = body();
        testing::set_run_info(None);
        out
    }

    #[test]
    fn a_global_minibatch_size_is_shared_among_the_ranks_on_the_batch_axis_only() {
        let x = arange(&[8, 6]);
        let sizes = |s: &mut testing::TestSlicer, axis_len: &Tensor, dim: usize| -> Vec<i64> {
            let slices = s.slice("x", axis_len).unwrap();
            slices.iter().map(|t| t.size()[dim]).collect()
        };
        // Each of 2 ranks cuts its share into 2-sample minibatches: 2 + 2 a global one of 4.
        let mut batch_axis = as_ranks(2, || slicer("axis = 0\nminibatch_size = 4"));
        assert_eq!(sizes(&mut batch_axis, &x, 0), [2, 2, 2, 2]);
        // A negative axis is found to be the batch axis when the tensor comes.
        let mut negative = as_ranks(2, || slicer("axis = -2\nminibatch_size = 4"));
        assert_eq!(sizes(&mut negative, &x, 0), [2, 2, 2, 2]);
        // Other axes are not shared, and a count is the same on every rank.
        let mut other = as_ranks(2, || slicer("axis = 1\nminibatch_size = 4"));
        assert_eq!(sizes(&mut other, &x, 1), [4, 2]);
        let mut count = as_ranks(2, || slicer("axis = 0\nnum_slices = 2"));
        assert_eq!(sizes(&mut count, &x, 0), [4, 4]);
    }

    #[test]
    fn batch_axis_minibatches_the_ranks_cannot_share_are_refused() {
        let err = as_ranks(2, || {
            testing::slicer("AxisSlicer", "axis = 0\nminibatch_size = 3", &["x"], &["x"])
        })
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Config);
        assert_eq!(err.field.as_str(), "minibatch_size");
        assert!(err.message.contains("do not divide among 2 ranks"), "{err}");
        let err = as_ranks(3, || {
            testing::slicer("AxisSlicer", "axis = 0", &["x"], &["x"])
        })
        .unwrap_err();
        assert_eq!(err.field.as_str(), "axis");
        assert!(err.message.contains("cannot be shared by 3 ranks"), "{err}");
        let mut late = as_ranks(2, || slicer("axis = -2\nminibatch_size = 3"));
        let err = late.slice("x", &arange(&[8, 6])).unwrap_err();
        assert!(err.message.contains("do not divide among 2 ranks"), "{err}");
    }

    #[test]
    fn config_errors_name_their_field() {
        let cases = [
            ("axis = 0\nminibatch_size = 0", "minibatch_size"),
            ("axis = 0\nnum_slices = -2", "num_slices"),
            ("axis = 0\nminibatch_size = 2\nnum_slices = 2", "num_slices"),
            ("axes = 0", "axes"),
            ("axis = 1.5", "axis"),
        ];
        for (config, field) in cases {
            let err = testing::slicer("AxisSlicer", config, &["x"], &["x"]).unwrap_err();
            assert_eq!(err.kind, ErrorKind::Config, "{config}");
            assert_eq!(err.field.as_str(), field, "{config}");
        }
        let err = testing::slicer("AxisSlicer", "", &["x"], &["x"]).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Config);
        assert!(err.message.contains("axis"), "{err}");
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let x = arange(&[2, 3]);
        let err = slicer("axis = 2").slice("x", &x).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Failed);
        assert!(err.message.contains("out of range"), "{err}");
        let err = slicer("axis = -3").slice("x", &x).unwrap_err();
        assert!(err.message.contains("out of range"), "{err}");
        let err = slicer("axis = 0")
            .slice("x", &Tensor::from(1.0f32))
            .unwrap_err();
        assert!(err.message.contains("out of range"), "{err}");
        let empty = Tensor::zeros([2, 0], (Kind::Float, Device::Cpu));
        let err = slicer("axis = 1").slice("x", &empty).unwrap_err();
        assert!(err.message.contains("length 0"), "{err}");

        let err = slicer("axis = 0").unslice("x", &[]).unwrap_err();
        assert!(err.message.contains("no minibatches"), "{err}");
        // Scalars cannot be concatenated when the axis is kept.
        let scalar = Tensor::from(1.0f32);
        let err = slicer("axis = 0\nminibatch_size = 1")
            .unslice("x", &[&scalar, &scalar])
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Failed);
        assert!(err.message.contains("cannot concatenate"), "{err}");
        // Re-inserting axis 3 into rank-1 minibatches is impossible.
        let v = Tensor::from_slice(&[1.0f32]);
        let err = slicer("axis = 3").unslice("x", &[&v, &v]).unwrap_err();
        assert!(err.message.contains("re-insert"), "{err}");
        // Minibatches that do not line up.
        let a = arange(&[2, 3]);
        let b = arange(&[2, 4]);
        let err = slicer("axis = 0\nminibatch_size = 2")
            .unslice("x", &[&a, &b])
            .unwrap_err();
        assert!(err.message.contains("cannot concatenate"), "{err}");
    }
}
