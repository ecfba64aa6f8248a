//! FastEstimator's `MeanSquaredError` TensorOp.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

/// `MeanSquaredError` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct MseConfig {
    /// Return the mean over the batch (default) or one loss per sample.
    #[serde(default = "yes")]
    pub average_loss: bool,
}

fn yes() -> bool {
    true
}

/// Inputs `[y_pred, y_true]`, output `[loss]`: the squared error averaged over every dimension
/// but the batch, then (by default) over the batch.
pub struct MeanSquaredError {
    average: bool,
}

impl FromConfig for MeanSquaredError {
    type Config = MseConfig;
    fn from_config(config: MseConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(1))?;
        Ok(Self {
            average: config.average_loss,
        })
    }
}

impl TensorOp for MeanSquaredError {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let [y_pred, y_true] = inputs else {
            return Err(Error::msg(format!(
                "expected inputs [y_pred, y_true], got {} tensors",
                inputs.len()
            )));
        };
        let y_true = y_true.f_to_kind(y_pred.kind())?;
        let squared = y_pred.f_sub(&y_true)?.f_square()?;
        let per_sample = if squared.dim() > 1 {
            squared
                .f_flatten(1, -1)?
                .f_mean_dim(-1, false, squared.kind())?
        } else {
            squared
        };
        Ok(vec![super::reduce(per_sample, self.average)?])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::Tensor;
    use fe_plugin_api::testing;

    #[test]
    fn matches_hand_computation() {
        // FastEstimator's test values: mean of ((1-1)^2+(2-3)^2)/2 and ((3-5)^2+(4-4)^2)/2 = (0.5+2)/2
        let y_pred = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).reshape([2, 2]);
        let y_true = Tensor::from_slice(&[1.0f32, 3.0, 5.0, 4.0]).reshape([2, 2]);
        let mut op = testing::tensor_op("MeanSquaredError", "", &["p", "y"], &["mse"]).unwrap();
        let out = op.forward(&[&y_pred, &y_true]).unwrap().remove(0);
        assert!((out.double_value(&[]) - 1.25).abs() < 1e-6);
    }

    #[test]
    fn shape_mismatch_is_an_error_not_a_crash() {
        let y_pred = Tensor::zeros(
            [4, 10],
            (
                fe_plugin_api::tch::Kind::Float,
                fe_plugin_api::tch::Device::Cpu,
            ),
        );
        let y_true = Tensor::zeros(
            [4, 3],
            (
                fe_plugin_api::tch::Kind::Float,
                fe_plugin_api::tch::Device::Cpu,
            ),
        );
        let mut op = testing::tensor_op("MeanSquaredError", "", &["p", "y"], &["mse"]).unwrap();
        let err = op.forward(&[&y_pred, &y_true]).unwrap_err();
        assert!(err.message.contains("must match the size"), "{err}");
        assert!(
            !err.message.contains('\n'),
            "libtorch backtrace must be cut: {err}"
        );
    }
}
