//! FastEstimator's `Average` TensorOp (`fe.op.tensorop.Average`).

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NoConfig, Result, StepContext, TensorOp};

/// Inputs: one or more tensors; output: their element-wise mean `(x1 + ... + xn) / n`.
/// Integer inputs give a floating-point mean (true division), as in FastEstimator; shapes must
/// match or broadcast. No config fields.
pub struct Average;

impl FromConfig for Average {
    type Config = NoConfig;
    fn from_config(_config: NoConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(None, Some(1))?;
        if ctx.inputs.is_empty() {
            return Err(Error::config("inputs", "expected at least 1 key, got 0"));
        }
        Ok(Average)
    }
}

impl TensorOp for Average {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let Some((first, rest)) = inputs.split_first() else {
            return Err(Error::msg("Average needs at least one input"));
        };
        let mut sum = first.shallow_clone();
        for tensor in rest {
            sum = sum.f_add(tensor)?;
        }
        Ok(vec![sum.f_div_scalar(inputs.len() as f64)?])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Kind, Tensor};
    use fe_plugin_api::testing;

    fn values(t: &Tensor) -> Vec<f64> {
        Vec::try_from(t.to_kind(Kind::Double).flatten(0, -1)).unwrap()
    }

    #[test]
    fn fastestimator_test_values() {
        // test/PR_test/integration_test/op/tensorop/test_average.py: [1, 3, 4.5]
        let a = Tensor::from_slice(&[1.0f32, 2.0, 4.0]);
        let b = Tensor::from_slice(&[1.0f32, 4.0, 5.0]);
        let mut op = testing::tensor_op("Average", "", &["a", "b"], &["avg"]).unwrap();
        let out = op.forward(&[&a, &b]).unwrap().remove(0);
        assert_eq!(values(&out), [1.0, 3.0, 4.5]);
    }

    #[test]
    fn three_inputs_one_input_and_integers() {
        let a = Tensor::from_slice(&[3i64, 0]);
        let b = Tensor::from_slice(&[0i64, 0]);
        let c = Tensor::from_slice(&[0i64, 1]);
        let mut op = testing::tensor_op("Average", "", &["a", "b", "c"], &["m"]).unwrap();
        let out = op.forward(&[&a, &b, &c]).unwrap().remove(0);
        assert!(out.is_floating_point(), "{:?}", out.kind());
        let got = values(&out);
        assert!(
            (got[0] - 1.0).abs() < 1e-6 && (got[1] - 1.0 / 3.0).abs() < 1e-6,
            "{got:?}"
        );
        let mut op = testing::tensor_op("Average", "", &["a"], &["m"]).unwrap();
        let out = op.forward(&[&a]).unwrap().remove(0);
        assert_eq!(values(&out), [3.0, 0.0]);
    }

    #[test]
    fn gradient_flows_to_every_input() {
        let a = Tensor::from_slice(&[1.0f32, 2.0]).set_requires_grad(true);
        let b = Tensor::from_slice(&[3.0f32, 4.0]).set_requires_grad(true);
        let mut op = testing::tensor_op("Average", "", &["a", "b"], &["m"]).unwrap();
        let out = op.forward(&[&a, &b]).unwrap().remove(0);
        out.sum(Kind::Float).backward();
        assert_eq!(values(&a.grad()), [0.5, 0.5]);
        assert_eq!(values(&b.grad()), [0.5, 0.5]);
    }

    #[test]
    fn shape_mismatch_is_an_error() {
        let a = Tensor::from_slice(&[1.0f32, 2.0]);
        let b = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
        let mut op = testing::tensor_op("Average", "", &["a", "b"], &["m"]).unwrap();
        let err = op.forward(&[&a, &b]).unwrap_err();
        assert!(err.message.contains("must match"), "{err:?}");
    }

    #[test]
    fn config_errors() {
        let err = testing::tensor_op("Average", "", &[], &["m"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "inputs");
        let err = testing::tensor_op("Average", "", &["a", "b"], &["m", "n"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "outputs");
        let err = testing::tensor_op("Average", "weights = [1, 2]", &["a", "b"], &["m"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "weights");
    }
}
