//! FastEstimator's `Argmax` TensorOp (`fe.op.tensorop.Argmax`, `fe.backend.argmax`).

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

/// `Argmax` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ArgmaxConfig {
    /// The dimension to take the argmax along, batch dimension included; negative values count
    /// from the end (-1 is the last). Default 0 — FastEstimator's default, which on a batch is
    /// the batch dimension itself; for the predicted class of each sample of `[B, C]` scores use
    /// `axis = 1` or `-1`.
    #[serde(default)]
    pub axis: i64,
}

/// Inputs: one or more tensors; outputs: as many `int64` tensors, each input's indices of the
/// maximum along `axis` (that dimension removed; the first index wins ties).
pub struct Argmax {
    axis: i64,
}

impl FromConfig for Argmax {
    type Config = ArgmaxConfig;
    fn from_config(config: ArgmaxConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        super::expect_paired_keys(ctx)?;
        Ok(Self { axis: config.axis })
    }
}

impl TensorOp for Argmax {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        inputs
            .iter()
            .map(|input| Ok(input.f_argmax(self.axis, false)?))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Kind, Tensor};
    use fe_plugin_api::testing;

    fn values(t: &Tensor) -> Vec<i64> {
        Vec::try_from(t.flatten(0, -1)).unwrap()
    }

    #[test]
    fn fastestimator_test_values() {
        // test/PR_test/integration_test/op/tensorop/test_argmax.py: [1, 2, 4] with the default
        // axis 0 gives 2 (int64).
        let x = Tensor::from_slice(&[1.0f32, 2.0, 4.0]).set_requires_grad(true);
        let mut op = testing::tensor_op("Argmax", "", &["x"], &["i"]).unwrap();
        let out = op.forward(&[&x]).unwrap().remove(0);
        assert_eq!(out.kind(), Kind::Int64);
        assert_eq!(out.size(), Vec::<i64>::new());
        assert_eq!(out.int64_value(&[]), 2);
    }

    #[test]
    fn axes_count_the_batch_dimension() {
        // fe.backend.argmax docstring: [[2,7,5],[9,1,3],[4,8,2]] gives [1, 2, 0] along axis 0
        // (across the batch) and [1, 0, 1] along axis 1 (per sample).
        let x = Tensor::from_slice(&[2i64, 7, 5, 9, 1, 3, 4, 8, 2]).reshape([3, 3]);
        let run = |config: &str| {
            let mut op = testing::tensor_op("Argmax", config, &["x"], &["i"]).unwrap();
            op.forward(&[&x]).unwrap().remove(0)
        };
        assert_eq!(values(&run("")), [1, 2, 0]);
        assert_eq!(values(&run("axis = 1")), [1, 0, 1]);
        assert_eq!(values(&run("axis = -1")), [1, 0, 1]);
    }

    #[test]
    fn several_inputs_map_to_their_outputs_and_ties_pick_the_first() {
        let a = Tensor::from_slice(&[0.1f32, 0.9, 0.5, 0.5]).reshape([2, 2]);
        let b = Tensor::from_slice(&[3.0f32, 1.0, 2.0, 3.0, 3.0, 0.0]).reshape([2, 3]);
        let mut op = testing::tensor_op("Argmax", "axis = 1", &["a", "b"], &["ia", "ib"]).unwrap();
        let out = op.forward(&[&a, &b]).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(values(&out[0]), [1, 0]);
        assert_eq!(values(&out[1]), [0, 0]);
    }

    #[test]
    fn out_of_range_axis_is_an_error() {
        let x = Tensor::from_slice(&[1.0f32, 2.0]);
        let mut op = testing::tensor_op("Argmax", "axis = 3", &["x"], &["i"]).unwrap();
        let err = op.forward(&[&x]).unwrap_err();
        assert!(err.message.contains("out of range"), "{err:?}");
    }

    #[test]
    fn config_errors() {
        let err = testing::tensor_op("Argmax", "axis = 1", &["a", "b"], &["i"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "outputs");
        let err = testing::tensor_op("Argmax", "", &[], &[]).err().unwrap();
        assert_eq!(err.field.as_str(), "inputs");
        let err = testing::tensor_op("Argmax", "axis = 1.5", &["a"], &["i"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "axis");
        let err = testing::tensor_op("Argmax", "dim = 1", &["a"], &["i"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "dim");
    }
}
