//! FastEstimator's `MixLoss` for MixUp/CutMix training (≤ 1.4's pairing with `MixUpBatch`):
//! `λ · CE(y_pred, y) + (1 − λ) · CE(y_pred, roll(y, 1, 0))`, per sample, with λ the weight
//! the mixing op gave each sample's own image (its optional last output).
//!
//! FastEstimator's `MixLoss` wraps any loss op; a manifest cannot pass an op as a value, so
//! this one computes `CrossEntropy` with `CrossEntropy`'s configuration.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, StepContext, TensorOp};

use crate::cross_entropy::{CrossEntropy, CrossEntropyConfig};

/// Inputs `[y_pred, y_true, lambda]`, output `[loss]`.
pub struct MixLoss {
    inner: CrossEntropy,
    average: bool,
}

impl FromConfig for MixLoss {
    type Config = CrossEntropyConfig;
    fn from_config(mut config: CrossEntropyConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(3), Some(1))?;
        let average = config.average_loss;
        config.average_loss = false;
        Ok(Self {
            inner: CrossEntropy::new(config)?,
            average,
        })
    }
}

impl TensorOp for MixLoss {
    fn forward(&mut self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let [y_pred, y_true, lam] = inputs else {
            return Err(Error::msg("expected inputs [y_pred, y_true, lambda]"));
        };
        let own = self.inner.forward(&[y_pred, y_true], ctx)?.remove(0);
        let rolled = y_true.f_roll([1], [0])?;
        let other = self.inner.forward(&[y_pred, &rolled], ctx)?.remove(0);
        let batch = own.size().first().copied().unwrap_or(1);
        let lam = match lam.numel() as i64 {
            1 => lam.f_reshape([1])?,
            n if n == batch => lam.f_reshape([-1])?,
            _ => {
                return Err(Error::msg(format!(
                    "lambda has shape {:?}: expected one value, or one per sample ({batch})",
                    lam.size()
                )))
            }
        };
        let mut shape = vec![-1i64];
        shape.resize(own.dim().max(1), 1);
        let lam = lam.f_to_kind(own.kind())?.f_reshape(&shape)?;
        let loss = own
            .f_mul(&lam)?
            .f_add(&other.f_mul(&lam.f_neg()?.f_add_scalar(1.0)?)?)?;
        Ok(vec![super::reduce(loss, self.average)?])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::Tensor;
    use fe_plugin_api::testing;

    #[test]
    fn weighs_each_samples_own_and_neighbours_label_by_its_lambda() {
        // Probabilities of 3 samples over 2 classes, labels [0, 1, 1], λ [0.7, 0.6, 0.9]:
        // sample i is scored against label i (weight λ_i) and label i-1 (weight 1 − λ_i).
        let y_pred = Tensor::from_slice(&[0.8f32, 0.2, 0.4, 0.6, 0.3, 0.7]).reshape([3, 2]);
        let y = Tensor::from_slice(&[0i64, 1, 1]);
        let lam = Tensor::from_slice(&[0.7f32, 0.6, 0.9]);
        let ln = |p: f64| -(p as f32 as f64).ln();
        let want = [
            0.7 * ln(0.8) + 0.3 * ln(0.2),
            0.6 * ln(0.6) + 0.4 * ln(0.4),
            0.9 * ln(0.7) + 0.1 * ln(0.7),
        ];
        let mut op = testing::tensor_op(
            "MixLoss",
            "average_loss = false",
            &["p", "y", "lam"],
            &["l"],
        )
        .unwrap();
        let got = Vec::<f32>::try_from(&op.forward(&[&y_pred, &y, &lam]).unwrap()[0]).unwrap();
        for (g, w) in got.iter().zip(want) {
            assert!((f64::from(*g) - w).abs() < 1e-6, "{got:?} vs {want:?}");
        }
        let mut mean = testing::tensor_op("MixLoss", "", &["p", "y", "lam"], &["l"]).unwrap();
        let got = mean.forward(&[&y_pred, &y, &lam]).unwrap()[0].double_value(&[]);
        assert!((got - want.iter().sum::<f64>() / 3.0).abs() < 1e-6, "{got}");
    }

    #[test]
    fn lambda_of_the_wrong_size_is_refused() {
        let mut op = testing::tensor_op("MixLoss", "", &["p", "y", "lam"], &["l"]).unwrap();
        let y_pred = Tensor::from_slice(&[0.5f32; 6]).reshape([3, 2]);
        let error = op
            .forward(&[
                &y_pred,
                &Tensor::from_slice(&[0i64, 1, 1]),
                &Tensor::from_slice(&[0.5f32, 0.5]),
            ])
            .unwrap_err();
        assert!(error.to_string().contains("one per sample (3)"), "{error}");
    }
}
