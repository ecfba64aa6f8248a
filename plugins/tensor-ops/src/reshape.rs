//! FastEstimator's `Reshape` TensorOp (`fe.op.tensorop.Reshape`).

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

/// A target shape: one integer (`shape = -1` flattens everything) or a list.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(untagged)]
pub enum Shape {
    /// A rank-1 shape.
    One(i64),
    /// Any shape.
    Many(Vec<i64>),
}

/// `Reshape` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ReshapeConfig {
    /// The shape of the whole output tensor, batch dimension included (as in FastEstimator,
    /// e.g. `[-1, 784]` flattens a `[B, 1, 28, 28]` batch to `[B, 784]`). One entry may be -1
    /// (inferred from the element count); the others must be >= 0. Required.
    pub shape: Shape,
}

/// Input: one tensor; output: the same elements in `shape`.
pub struct Reshape {
    shape: Vec<i64>,
}

impl FromConfig for Reshape {
    type Config = ReshapeConfig;
    fn from_config(config: ReshapeConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(1), Some(1))?;
        let shape = match config.shape {
            Shape::One(size) => vec![size],
            Shape::Many(sizes) => sizes,
        };
        if let Some(bad) = shape.iter().find(|&&size| size < -1) {
            return Err(Error::config(
                "shape",
                format!("sizes must be >= 0, or -1 for one inferred size; got {bad}"),
            ));
        }
        if shape.iter().filter(|&&size| size == -1).count() > 1 {
            return Err(Error::config("shape", "only one size can be -1"));
        }
        Ok(Self { shape })
    }
}

impl TensorOp for Reshape {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let [input] = inputs else {
            return Err(Error::msg(format!(
                "Reshape takes one input, got {}",
                inputs.len()
            )));
        };
        // FastEstimator uses `view`; `reshape` gives the same result (sharing storage whenever
        // `view` could) and also accepts non-contiguous inputs, such as a `Permute` output.
        Ok(vec![input.f_reshape(self.shape.as_slice())?])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Kind, Tensor};
    use fe_plugin_api::testing;

    fn reshape(config: &str, input: &Tensor) -> Result<Tensor, fe_plugin_api::PluginError> {
        let mut op = testing::tensor_op("Reshape", config, &["x"], &["y"])?;
        Ok(op.forward(&[input])?.remove(0))
    }

    #[test]
    fn fastestimator_test_values() {
        // test/PR_test/integration_test/op/tensorop/test_reshape.py: the shape covers the batch
        // dimension, so [2, 3] becomes [1, 6].
        let x = Tensor::from_slice(&[1.0f32, 2., 4., 1., 2., 6.]).reshape([2, 3]);
        let y = reshape("shape = [1, 6]", &x).unwrap();
        assert_eq!(y.size(), [1, 6]);
        let got: Vec<f32> = Vec::try_from(y.flatten(0, -1)).unwrap();
        assert_eq!(got, [1., 2., 4., 1., 2., 6.]);
    }

    #[test]
    fn inferred_sizes_and_single_integer() {
        let x =
            Tensor::arange(24, (Kind::Float, fe_plugin_api::tch::Device::Cpu)).reshape([2, 3, 4]);
        assert_eq!(reshape("shape = [-1, 12]", &x).unwrap().size(), [2, 12]);
        assert_eq!(reshape("shape = [2, -1, 2]", &x).unwrap().size(), [2, 6, 2]);
        assert_eq!(reshape("shape = -1", &x).unwrap().size(), [24]);
    }

    #[test]
    fn non_contiguous_inputs_are_accepted() {
        let x = Tensor::arange(6, (Kind::Float, fe_plugin_api::tch::Device::Cpu))
            .reshape([2, 3])
            .transpose(0, 1);
        let y = reshape("shape = [6]", &x).unwrap();
        let got: Vec<f32> = Vec::try_from(y).unwrap();
        assert_eq!(got, [0., 3., 1., 4., 2., 5.]);
    }

    #[test]
    fn gradient_flows() {
        let x = Tensor::ones([2, 3], (Kind::Float, fe_plugin_api::tch::Device::Cpu))
            .set_requires_grad(true);
        let y = reshape("shape = [3, 2]", &x).unwrap();
        y.sum(Kind::Float).backward();
        assert_eq!(x.grad().size(), [2, 3]);
        assert_eq!(x.grad().sum(Kind::Float).double_value(&[]), 6.0);
    }

    #[test]
    fn wrong_element_count_is_an_error() {
        let x = Tensor::ones([2, 3], (Kind::Float, fe_plugin_api::tch::Device::Cpu));
        let err = reshape("shape = [4, 2]", &x).unwrap_err();
        assert!(
            err.message.contains("invalid for input of size 6"),
            "{err:?}"
        );
    }

    #[test]
    fn config_errors() {
        for (config, field) in [
            ("", ""),
            ("shape = [-1, -1]", "shape"),
            ("shape = [2, -3]", "shape"),
            ("shape = 'flat'", "shape"),
            ("shape = [2]\naxis = 1", "axis"),
        ] {
            let err = testing::tensor_op("Reshape", config, &["x"], &["y"])
                .err()
                .unwrap();
            assert_eq!(err.field.as_str(), field, "{config}: {err:?}");
        }
        let err = testing::tensor_op("Reshape", "", &["x"], &["y"])
            .err()
            .unwrap();
        assert!(err.message.contains("missing field `shape`"), "{err:?}");
        let err = testing::tensor_op("Reshape", "shape = [2]", &["x", "z"], &["y"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "inputs");
    }
}
