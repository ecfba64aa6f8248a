//! CPU data transforms for fe-host pipelines: `Minmax`, `ExpandDims`, `Onehot`.
//! Each has a per-sample form (pipeline workers) and a vectorised batch form
//! (network post-processing).

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{
    inventory, CreateContext, Error, FromConfig, NoConfig, NumpyOp, Registration, Result,
    StepContext,
};
use serde::Deserialize;

inventory::submit! {
    Registration::numpy_op::<Minmax>("Minmax", "Rescales each sample to [0, 1] by its own min and max")
}
inventory::submit! {
    Registration::numpy_op::<ExpandDims>("ExpandDims", "Inserts a dimension of size 1 at `axis`")
}
inventory::submit! {
    Registration::numpy_op::<Onehot>("Onehot", "Integer class label to a one-hot vector, with optional label smoothing")
}

fe_plugin_api::export_plugin!();

/// FastEstimator's epsilon guarding against constant samples.
const EPSILON: f64 = 1e-7;

fn one_to_one<'a>(inputs: &[&'a Tensor]) -> Result<&'a Tensor> {
    match inputs {
        [x] => Ok(x),
        _ => Err(Error::msg(format!(
            "expected 1 input, got {}",
            inputs.len()
        ))),
    }
}

/// `(x - min) / max(max - min, 1e-7)` per sample, as float32.
pub struct Minmax;

impl FromConfig for Minmax {
    type Config = NoConfig;
    fn from_config(_: NoConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(1), Some(1))?;
        Ok(Minmax)
    }
}

impl NumpyOp for Minmax {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let x = one_to_one(inputs)?.f_to_kind(Kind::Float)?;
        let (min, max) = (x.f_min()?, x.f_max()?);
        let range = max.f_sub(&min)?.f_clamp_min(EPSILON)?;
        Ok(vec![x.f_sub(&min)?.f_div(&range)?])
    }

    fn batchable(&self) -> bool {
        true
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let x = one_to_one(inputs)?.f_to_kind(Kind::Float)?;
        let shape = x.size();
        let flat = x.f_flatten(1, -1)?;
        let min = flat.f_amin(1, true)?;
        let range = flat.f_amax(1, true)?.f_sub(&min)?.f_clamp_min(EPSILON)?;
        Ok(vec![flat.f_sub(&min)?.f_div(&range)?.f_reshape(shape)?])
    }
}

/// `ExpandDims` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ExpandDimsConfig {
    /// Where the new dimension goes (negative counts from the end), as in NumPy.
    #[serde(default = "last_axis")]
    pub axis: i64,
}

fn last_axis() -> i64 {
    -1
}

/// Inserts a size-1 dimension at `axis` of each sample.
pub struct ExpandDims {
    axis: i64,
}

impl FromConfig for ExpandDims {
    type Config = ExpandDimsConfig;
    fn from_config(config: ExpandDimsConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(None, None)?;
        if ctx.inputs.len() != ctx.outputs.len() {
            return Err(Error::config(
                "outputs",
                "ExpandDims needs one output per input",
            ));
        }
        Ok(ExpandDims { axis: config.axis })
    }
}

impl ExpandDims {
    fn expand(&self, inputs: &[&Tensor], batched: bool) -> Result<Vec<Tensor>> {
        inputs
            .iter()
            .map(|x| {
                // In a batch the sample's axis k is axis k+1; negative axes count from the end.
                let axis = if batched && self.axis >= 0 {
                    self.axis + 1
                } else {
                    self.axis
                };
                Ok(x.f_unsqueeze(axis)?)
            })
            .collect()
    }
}

impl NumpyOp for ExpandDims {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.expand(inputs, false)
    }

    fn batchable(&self) -> bool {
        true
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.expand(inputs, true)
    }
}

/// `Onehot` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct OnehotConfig {
    /// Number of classes.
    pub num_classes: i64,
    /// Moves this much probability mass uniformly onto all classes.
    #[serde(default)]
    pub label_smoothing: f64,
}

/// Integer label → float32 one-hot vector of length `num_classes`.
pub struct Onehot {
    num_classes: i64,
    label_smoothing: f64,
}

impl FromConfig for Onehot {
    type Config = OnehotConfig;
    fn from_config(config: OnehotConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(1), Some(1))?;
        if config.num_classes < 1 {
            return Err(Error::config("num_classes", "must be at least 1"));
        }
        if !(0.0..1.0).contains(&config.label_smoothing) {
            return Err(Error::config("label_smoothing", "must be in [0, 1)"));
        }
        Ok(Onehot {
            num_classes: config.num_classes,
            label_smoothing: config.label_smoothing,
        })
    }
}

impl Onehot {
    fn encode(&self, labels: &Tensor) -> Result<Tensor> {
        let labels = labels.f_to_kind(Kind::Int64)?;
        let (low, high) = (
            labels.f_min()?.int64_value(&[]),
            labels.f_max()?.int64_value(&[]),
        );
        if low < 0 || high >= self.num_classes {
            return Err(Error::msg(format!(
                "label {} is outside 0..{}",
                if low < 0 { low } else { high },
                self.num_classes
            )));
        }
        let hot = labels.f_one_hot(self.num_classes)?.f_to_kind(Kind::Float)?;
        if self.label_smoothing == 0.0 {
            return Ok(hot);
        }
        let smooth = self.label_smoothing;
        Ok(hot
            .f_mul_scalar(1.0 - smooth)?
            .f_add_scalar(smooth / self.num_classes as f64)?)
    }
}

impl NumpyOp for Onehot {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let label = one_to_one(inputs)?.f_reshape([-1])?;
        if label.numel() != 1 {
            return Err(Error::msg(format!(
                "expected one label per sample, got {}",
                label.numel()
            )));
        }
        Ok(vec![self.encode(&label)?.f_squeeze_dim(0)?])
    }

    fn batchable(&self) -> bool {
        true
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let labels = one_to_one(inputs)?.f_reshape([-1])?;
        Ok(vec![self.encode(&labels)?])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Kind, Tensor};
    use fe_plugin_api::testing;

    #[test]
    fn minmax_rescales_each_sample_independently() {
        let op = testing::numpy_op("Minmax", "", &["x"], &["x"]).unwrap();
        let sample = Tensor::from_slice(&[0u8, 51, 255]);
        let out = op.forward(&[&sample]).unwrap().remove(0);
        assert_eq!(out.kind(), Kind::Float);
        assert!((out.double_value(&[1]) - 0.2).abs() < 1e-6);
        let batch = Tensor::from_slice(&[0.0f32, 2.0, 4.0, 10.0, 10.0, 20.0]).reshape([2, 3]);
        let out = op.forward_batch(&[&batch]).unwrap().remove(0);
        let expected = Tensor::from_slice(&[0.0f32, 0.5, 1.0, 0.0, 0.0, 1.0]).reshape([2, 3]);
        assert!(out.allclose(&expected, 1e-6, 1e-6, false));
    }

    #[test]
    fn minmax_of_a_constant_sample_is_zero_not_nan() {
        let op = testing::numpy_op("Minmax", "", &["x"], &["x"]).unwrap();
        let out = op
            .forward(&[&Tensor::from_slice(&[7.0f32, 7.0])])
            .unwrap()
            .remove(0);
        assert_eq!(out.double_value(&[0]), 0.0);
    }

    #[test]
    fn expand_dims_per_sample_and_batch_agree() {
        let op = testing::numpy_op("ExpandDims", "axis = 0", &["x"], &["x"]).unwrap();
        let sample = Tensor::zeros([28, 28], (Kind::Uint8, fe_plugin_api::tch::Device::Cpu));
        assert_eq!(op.forward(&[&sample]).unwrap()[0].size(), [1, 28, 28]);
        let batch = Tensor::zeros([5, 28, 28], (Kind::Uint8, fe_plugin_api::tch::Device::Cpu));
        assert_eq!(
            op.forward_batch(&[&batch]).unwrap()[0].size(),
            [5, 1, 28, 28]
        );
        let last = testing::numpy_op("ExpandDims", "", &["x"], &["x"]).unwrap();
        assert_eq!(last.forward(&[&sample]).unwrap()[0].size(), [28, 28, 1]);
    }

    #[test]
    fn onehot_with_smoothing_matches_fastestimator() {
        let op = testing::numpy_op(
            "Onehot",
            "num_classes = 4\nlabel_smoothing = 0.2",
            &["y"],
            &["y"],
        )
        .unwrap();
        let out = op.forward(&[&Tensor::from(2i64)]).unwrap().remove(0);
        let expected = Tensor::from_slice(&[0.05f32, 0.05, 0.85, 0.05]);
        assert!(out.allclose(&expected, 1e-6, 1e-6, false), "{out:?}");
    }

    #[test]
    fn onehot_rejects_out_of_range_labels() {
        let op = testing::numpy_op("Onehot", "num_classes = 3", &["y"], &["y"]).unwrap();
        let err = op.forward(&[&Tensor::from(3i64)]).unwrap_err();
        assert!(err.message.contains("outside 0..3"), "{err}");
    }
}
