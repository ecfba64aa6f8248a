//! FastEstimator's `Hinge` TensorOp (`fe.op.tensorop.loss.Hinge`, `fe.backend.hinge`).

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

/// `Hinge` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct HingeConfig {
    /// `true` (default): output the mean loss over the batch (a scalar). `false`: one loss per
    /// sample (the element losses averaged over the last dimension).
    #[serde(default = "super::yes")]
    pub average_loss: bool,
}

/// Inputs `[y_pred, y_true]`, output `[loss]`: `max(0, 1 - y_true * y_pred)` element by element,
/// averaged over the last dimension, then (by default) over everything. Labels must be -1 or
/// +1; like FastEstimator (and unlike Keras) 0/1 labels are not converted.
pub struct Hinge {
    average: bool,
}

impl FromConfig for Hinge {
    type Config = HingeConfig;
    fn from_config(config: HingeConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(1))?;
        Ok(Self {
            average: config.average_loss,
        })
    }
}

impl TensorOp for Hinge {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let (y_pred, y_true) = super::pair(inputs)?;
        let y = super::align_target(y_pred, y_true)?;
        let elements = y
            .f_mul(y_pred)?
            .f_neg()?
            .f_add_scalar(1.0)?
            .f_clamp_min(0.0)?;
        let per_sample = super::mean_last_axis(elements)?;
        Ok(vec![super::reduce(per_sample, self.average)?])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Kind, Tensor};
    use fe_plugin_api::testing;

    /// FastEstimator's test data (test/PR_test/integration_test/op/tensorop/loss/test_hinge.py).
    fn data() -> (Tensor, Tensor) {
        let y_true =
            Tensor::from_slice(&[-1i64, 1, 1, -1, 1, 1, 1, 1, -1, -1, 1, -1, 1, -1, -1, -1])
                .reshape([4, 4]);
        let y_pred = Tensor::from_slice(&[
            0.1f32, 0.9, 0.05, 0.05, 0.1, -0.2, 0.0, -0.7, 0.0, 0.15, 0.8, 0.05, 1.0, -1.0, -1.0,
            -1.0,
        ])
        .reshape([4, 4]);
        (y_pred, y_true)
    }

    fn run(config: &str, y_pred: &Tensor, y_true: &Tensor) -> Tensor {
        let mut op = testing::tensor_op("Hinge", config, &["y_pred", "y"], &["hinge"]).unwrap();
        op.forward(&[y_pred, y_true]).unwrap().remove(0)
    }

    #[test]
    fn fastestimator_values() {
        // test_hinge.py: 0.7125; fe.backend.hinge docstring: per sample [0.8, 1.2, 0.85, 0].
        let (y_pred, y_true) = data();
        let mean = run("", &y_pred, &y_true);
        assert!((mean.double_value(&[]) - 0.7125).abs() < 1e-6);
        let per_sample = run("average_loss = false", &y_pred, &y_true);
        // Sample 0 by hand: max(0, 1 - y p) = [1.1, 0.1, 0.95, 1.05], mean 0.8.
        for (i, want) in [0.8, 1.2, 0.85, 0.0].into_iter().enumerate() {
            let got = per_sample.double_value(&[i as i64]);
            assert!((got - want).abs() < 1e-6, "[{i}] {got} vs {want}");
        }
    }

    #[test]
    fn margins_beyond_one_cost_nothing() {
        let y_pred = Tensor::from_slice(&[3.0f32, -2.0]).set_requires_grad(true);
        let y_true = Tensor::from_slice(&[1.0f32, -1.0]);
        let out = run("average_loss = false", &y_pred, &y_true);
        assert_eq!(out.size(), [2]);
        assert_eq!(out.double_value(&[0]), 0.0);
        assert_eq!(out.double_value(&[1]), 0.0);
        out.sum(Kind::Float).backward();
        assert_eq!(y_pred.grad().abs().sum(Kind::Float).double_value(&[]), 0.0);
    }

    #[test]
    fn gradient_flows() {
        let (y_pred, y_true) = data();
        let p = y_pred.set_requires_grad(true);
        run("", &p, &y_true).backward();
        // d/dp mean(max(0, 1 - y p)) = -y / 16 where the margin is active.
        let grad = p.grad();
        assert!((grad.double_value(&[0, 0]) - 1.0 / 16.0).abs() < 1e-7);
        assert!((grad.double_value(&[0, 1]) + 1.0 / 16.0).abs() < 1e-7);
        assert!(grad.abs().sum(Kind::Float).double_value(&[]) > 0.0);
    }

    #[test]
    fn config_errors() {
        let err = testing::tensor_op("Hinge", "average = true", &["p", "y"], &["h"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "average");
        let err = testing::tensor_op("Hinge", "average_loss = 1", &["p", "y"], &["h"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "average_loss");
        let err = testing::tensor_op("Hinge", "", &["p", "y"], &["h", "i"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "outputs");
    }
}
