//! FastEstimator's `L1_Loss` TensorOp (`fe.op.tensorop.loss.L1_Loss`), ported from the PyTorch
//! branch of `fe.backend.l1_loss`, `smooth_l1_loss` and `huber`.

use fe_plugin_api::tch::{Reduction, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

/// Which member of the L1 family to compute, on `d = |y_pred - y_true|` element by element.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum L1Type {
    /// Mean absolute error: `d`.
    #[default]
    L1,
    /// Smooth L1 (PyTorch's `SmoothL1Loss`): `0.5 d² / beta` where `d < beta`, else
    /// `d - 0.5 beta`.
    Smooth,
    /// Huber (PyTorch's `HuberLoss` with `delta = beta`): `0.5 d²` where `d < beta`, else
    /// `beta (d - 0.5 beta)`.
    Huber,
}

/// `L1Loss` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct L1LossConfig {
    /// `"L1"` (default), `"Smooth"` or `"Huber"` (exactly these spellings, as in
    /// FastEstimator).
    #[serde(default)]
    pub loss_type: L1Type,
    /// Where `Smooth` and `Huber` switch from the squared to the linear part (Huber's `delta`);
    /// must be greater than 0. Ignored by `L1`. Default 1.0.
    #[serde(default = "one")]
    pub beta: f64,
    /// `true` (default): output the mean loss over the batch (a scalar). `false`: one loss per
    /// sample (the element losses averaged over the last dimension).
    #[serde(default = "super::yes")]
    pub average_loss: bool,
}

fn one() -> f64 {
    1.0
}

/// Inputs `[y_pred, y_true]`, output `[loss]`: the element-wise loss averaged over the last
/// dimension, then (by default) over everything.
pub struct L1Loss {
    loss_type: L1Type,
    beta: f64,
    average: bool,
}

impl FromConfig for L1Loss {
    type Config = L1LossConfig;
    fn from_config(config: L1LossConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(1))?;
        if !(config.beta > 0.0 && config.beta.is_finite()) {
            return Err(Error::config(
                "beta",
                format!(
                    "must be a finite number greater than 0, got {}",
                    config.beta
                ),
            ));
        }
        Ok(Self {
            loss_type: config.loss_type,
            beta: config.beta,
            average: config.average_loss,
        })
    }
}

impl TensorOp for L1Loss {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let (y_pred, y_true) = super::pair(inputs)?;
        let y = super::align_target(y_pred, y_true)?;
        let elements = match self.loss_type {
            L1Type::L1 => y_pred.f_l1_loss(&y, Reduction::None)?,
            L1Type::Smooth => y_pred.f_smooth_l1_loss(&y, Reduction::None, self.beta)?,
            L1Type::Huber => y_pred.f_huber_loss(&y, Reduction::None, self.beta)?,
        };
        let per_sample = super::mean_last_axis(elements)?;
        Ok(vec![super::reduce(per_sample, self.average)?])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Kind, Tensor};
    use fe_plugin_api::testing;

    /// FastEstimator's test data (test/PR_test/integration_test/op/tensorop/loss/test_l1_loss.py).
    fn data() -> (Tensor, Tensor) {
        let y_true = Tensor::from_slice(&[0i64, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0])
            .reshape([4, 4]);
        let y_pred = Tensor::from_slice(&[
            0.1f32, 0.9, 0.05, 0.05, 0.1, 0.2, 0.0, 0.7, 0.0, 0.15, 0.8, 0.05, 1.0, 0.0, 0.0, 0.0,
        ])
        .reshape([4, 4]);
        (y_pred, y_true)
    }

    fn run(config: &str, y_pred: &Tensor, y_true: &Tensor) -> Tensor {
        let mut op = testing::tensor_op("L1Loss", config, &["y_pred", "y"], &["l1"]).unwrap();
        op.forward(&[y_pred, y_true]).unwrap().remove(0)
    }

    fn assert_close(got: &Tensor, expected: &[f64]) {
        let got: Vec<f64> = Vec::try_from(got.to_kind(Kind::Double).flatten(0, -1)).unwrap();
        assert_eq!(got.len(), expected.len(), "{got:?}");
        for (g, e) in got.iter().zip(expected) {
            assert!((g - e).abs() < 1e-5, "{got:?} vs {expected:?}");
        }
    }

    #[test]
    fn fastestimator_l1_values() {
        // test_l1_loss.py: 0.081250004; fe.backend.l1_loss docstring: per sample
        // [0.0750, 0.1500, 0.1000, 0.0000].
        let (y_pred, y_true) = data();
        assert_close(&run("", &y_pred, &y_true), &[0.081_250_004]);
        assert_close(
            &run("average_loss = false", &y_pred, &y_true),
            &[0.075, 0.15, 0.1, 0.0],
        );
    }

    #[test]
    fn fastestimator_smooth_l1_values() {
        // test_l1_loss.py: 0.011057693; smooth_l1_loss docstring: [0.0048, 0.0269, 0.0125, 0].
        let (y_pred, y_true) = data();
        let config = "loss_type = 'Smooth'\nbeta = 0.65";
        assert_close(&run(config, &y_pred, &y_true), &[0.011_057_693]);
        let per_sample = run(&format!("{config}\naverage_loss = false"), &y_pred, &y_true);
        // Hand computation for sample 0: d = [0.1, 0.1, 0.05, 0.05], all below beta:
        // mean(0.5 d² / 0.65) = 0.5 * 0.025 / 4 / 0.65.
        let sample0 = 0.5 * (0.01 + 0.01 + 0.0025 + 0.0025) / 4.0 / 0.65;
        assert!((per_sample.double_value(&[0]) - sample0).abs() < 1e-6);
        assert!((per_sample.double_value(&[1]) - 0.0269).abs() < 1e-4);
    }

    #[test]
    fn fastestimator_huber_values() {
        // test_l1_loss.py: 0.0071875006.
        let (y_pred, y_true) = data();
        assert_close(
            &run("loss_type = 'Huber'\nbeta = 0.65", &y_pred, &y_true),
            &[0.007_187_500_6],
        );
    }

    #[test]
    fn linear_parts_beyond_beta() {
        // smooth_l1_loss / huber docstrings, column labels: d = [1, 3, 0, 1], beta 0.65.
        // Smooth: d - 0.325 = [0.675, 2.675, 0, 0.675]; Huber: 0.65 (d - 0.325).
        let y_true = Tensor::from_slice(&[1i64, 3, 2, 0]).reshape([4, 1]);
        let y_pred = Tensor::from_slice(&[2.0f32, 0.0, 2.0, 1.0]).reshape([4, 1]);
        let smooth = run(
            "loss_type = 'Smooth'\nbeta = 0.65\naverage_loss = false",
            &y_pred,
            &y_true,
        );
        assert_close(&smooth, &[0.675, 2.675, 0.0, 0.675]);
        let huber = run(
            "loss_type = 'Huber'\nbeta = 0.65\naverage_loss = false",
            &y_pred,
            &y_true,
        );
        assert_close(&huber, &[0.438_75, 1.738_75, 0.0, 0.438_75]);
        let l1 = run("average_loss = false", &y_pred, &y_true);
        assert_close(&l1, &[1.0, 3.0, 0.0, 1.0]);
    }

    #[test]
    fn rank_1_inputs_give_one_loss_per_sample() {
        let y_pred = Tensor::from_slice(&[2.0f32, 0.0]);
        let y_true = Tensor::from_slice(&[1.0f32, 3.0]);
        assert_close(&run("average_loss = false", &y_pred, &y_true), &[1.0, 3.0]);
    }

    #[test]
    fn spatial_inputs_average_the_last_dimension_only() {
        // [1, 2, 2]: per-sample output keeps the middle dimension, as FE's reduce_mean(axis=-1).
        let y_pred = Tensor::from_slice(&[1.0f32, 3.0, 0.0, 0.0]).reshape([1, 2, 2]);
        let y_true = Tensor::zeros([1, 2, 2], (Kind::Float, fe_plugin_api::tch::Device::Cpu));
        let out = run("average_loss = false", &y_pred, &y_true);
        assert_eq!(out.size(), [1, 2]);
        assert_close(&out, &[2.0, 0.0]);
    }

    #[test]
    fn gradient_flows() {
        let (y_pred, y_true) = data();
        for loss_type in ["L1", "Smooth", "Huber"] {
            let p = y_pred.copy().set_requires_grad(true);
            let out = run(&format!("loss_type = '{loss_type}'"), &p, &y_true);
            out.backward();
            assert!(
                p.grad().abs().sum(Kind::Float).double_value(&[]) > 0.0,
                "{loss_type}"
            );
        }
    }

    #[test]
    fn config_errors() {
        for (config, field) in [
            ("loss_type = 'l1'", "loss_type"),
            ("loss_type = 'Smooth'\nbeta = 0.0", "beta"),
            ("beta = -1.0", "beta"),
            ("delta = 1.0", "delta"),
        ] {
            let err = testing::tensor_op("L1Loss", config, &["p", "y"], &["l"])
                .err()
                .unwrap();
            assert_eq!(err.field.as_str(), field, "{config}: {err:?}");
        }
        let err = testing::tensor_op("L1Loss", "", &["p", "y", "z"], &["l"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "inputs");
    }

    #[test]
    fn mismatched_shapes_are_an_error() {
        let y_pred = Tensor::from_slice(&[1.0f32, 2.0]);
        let y_true = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
        let mut op = testing::tensor_op("L1Loss", "", &["p", "y"], &["l"]).unwrap();
        let err = op.forward(&[&y_pred, &y_true]).unwrap_err();
        assert!(err.message.contains("does not match"), "{err:?}");
    }
}
