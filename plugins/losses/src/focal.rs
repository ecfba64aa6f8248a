//! FastEstimator's `FocalLoss` TensorOp (`fe.op.tensorop.loss.FocalLoss`), ported from the
//! PyTorch branch of `fe.backend.focal_loss` (itself fvcore's sigmoid focal loss, RetinaNet).

use fe_plugin_api::tch::{Reduction, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

/// How to reduce a set of dimensions.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Reduce {
    /// Keep them.
    None,
    /// Average over them.
    Mean,
    /// Sum over them.
    Sum,
}

/// `FocalLoss` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct FocalLossConfig {
    /// Exponent of the modulating factor `(1 - p_t)^gamma` that down-weights easy examples;
    /// must be >= 0 (0 gives plain binary cross-entropy). Default 2.0.
    #[serde(default = "two")]
    pub gamma: f64,
    /// Weight of the positive class (negatives get `1 - alpha`), in [0, 1]; -1 disables the
    /// weighting. Default 0.25.
    #[serde(default = "quarter")]
    pub alpha: f64,
    /// `true` when predictions are logits (a sigmoid is applied); `false` (default) when they are
    /// probabilities in [0, 1].
    #[serde(default)]
    pub from_logits: bool,
    /// `true` (default): divide each sample's loss by its number of positive labels (the sum of
    /// its `y_true`, at least 1), as RetinaNet normalizes by the number of anchors with objects.
    #[serde(default = "super::yes")]
    pub normalize: bool,
    /// Reduction over every dimension but the batch: `"sum"` (default), `"mean"` or `"none"`.
    #[serde(default = "sum")]
    pub shape_reduction: Reduce,
    /// Reduction over what is left after `shape_reduction` (the batch): `"mean"` (default,
    /// a scalar), `"sum"` (a scalar) or `"none"`.
    #[serde(default = "mean")]
    pub sample_reduction: Reduce,
}

fn two() -> f64 {
    2.0
}

fn quarter() -> f64 {
    0.25
}

fn sum() -> Reduce {
    Reduce::Sum
}

fn mean() -> Reduce {
    Reduce::Mean
}

/// Inputs `[y_pred, y_true]` (probabilities or logits, and 0/1 labels of the same shape),
/// output `[loss]`.
pub struct FocalLoss {
    gamma: f64,
    alpha: Option<f64>,
    from_logits: bool,
    normalize: bool,
    shape_reduction: Reduce,
    sample_reduction: Reduce,
    probabilities: super::ProbabilityCheck,
}

impl FromConfig for FocalLoss {
    type Config = FocalLossConfig;
    fn from_config(config: FocalLossConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(1))?;
        if !(config.gamma >= 0.0 && config.gamma.is_finite()) {
            return Err(Error::config(
                "gamma",
                format!("must be a finite number >= 0, got {}", config.gamma),
            ));
        }
        let alpha = if config.alpha == -1.0 {
            None
        } else if (0.0..=1.0).contains(&config.alpha) {
            Some(config.alpha)
        } else {
            return Err(Error::config(
                "alpha",
                format!(
                    "must lie in [0, 1], or be -1 to disable the weighting; got {}",
                    config.alpha
                ),
            ));
        };
        Ok(Self {
            gamma: config.gamma,
            alpha,
            from_logits: config.from_logits,
            normalize: config.normalize,
            shape_reduction: config.shape_reduction,
            sample_reduction: config.sample_reduction,
            probabilities: super::ProbabilityCheck::new(),
        })
    }
}

impl FocalLoss {
    /// The element-wise focal loss (fvcore's `sigmoid_focal_loss` with `reduction="none"`).
    fn elements(&self, y_pred: &Tensor, y: &Tensor) -> Result<Tensor> {
        let (p, ce) = if self.from_logits {
            (
                y_pred.f_sigmoid()?,
                y_pred.f_binary_cross_entropy_with_logits::<Tensor>(
                    y,
                    None,
                    None,
                    Reduction::None,
                )?,
            )
        } else {
            (
                y_pred.shallow_clone(),
                y_pred.f_binary_cross_entropy::<Tensor>(y, None, Reduction::None)?,
            )
        };
        // p_t = p y + (1 - p)(1 - y); loss = ce (1 - p_t)^gamma
        let not_y = y.f_neg()?.f_add_scalar(1.0)?;
        let p_t = p
            .f_mul(y)?
            .f_add(&p.f_neg()?.f_add_scalar(1.0)?.f_mul(&not_y)?)?;
        let modulation = p_t
            .f_neg()?
            .f_add_scalar(1.0)?
            .f_pow_tensor_scalar(self.gamma)?;
        let loss = ce.f_mul(&modulation)?;
        match self.alpha {
            // alpha_t = alpha y + (1 - alpha)(1 - y)
            Some(alpha) => {
                let alpha_t = y
                    .f_mul_scalar(alpha)?
                    .f_add(&not_y.f_mul_scalar(1.0 - alpha)?)?;
                Ok(alpha_t.f_mul(&loss)?)
            }
            None => Ok(loss),
        }
    }
}

impl TensorOp for FocalLoss {
    fn forward(&mut self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let (y_pred, y_true) = super::pair(inputs)?;
        if !self.from_logits {
            self.probabilities.check(y_pred, ctx.warmup, "a sigmoid")?;
        }
        let y = super::align_target(y_pred, y_true)?;
        let mut loss = self.elements(y_pred, &y)?;
        let kind = loss.kind();
        // Every dimension but the batch. A rank-1 input is one value per sample: nothing to
        // reduce (FastEstimator's PyTorch branch would sum the whole batch here, its TensorFlow
        // branch keeps the values; we follow the latter).
        let shape_dims: Vec<i64> = (1..loss.dim() as i64).collect();
        if self.normalize {
            let positives = if shape_dims.is_empty() {
                y.shallow_clone()
            } else {
                y.f_sum_dim_intlist(shape_dims.as_slice(), true, kind)?
            };
            loss = loss.f_div(&positives.f_clamp_min(1.0)?)?;
        }
        if !shape_dims.is_empty() {
            loss = match self.shape_reduction {
                Reduce::Sum => loss.f_sum_dim_intlist(shape_dims.as_slice(), false, kind)?,
                Reduce::Mean => loss.f_mean_dim(shape_dims.as_slice(), false, kind)?,
                Reduce::None => loss,
            };
        }
        let loss = match self.sample_reduction {
            Reduce::Mean => loss.f_mean(kind)?,
            Reduce::Sum => loss.f_sum(kind)?,
            Reduce::None => loss,
        };
        Ok(vec![loss])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Kind, Tensor};
    use fe_plugin_api::testing;

    fn run(config: &str, y_pred: &Tensor, y_true: &Tensor) -> Tensor {
        let mut op = testing::tensor_op("FocalLoss", config, &["y_pred", "y"], &["fl"]).unwrap();
        op.forward(&[y_pred, y_true]).unwrap().remove(0)
    }

    /// fe.backend.focal_loss docstring example: one column per sample.
    fn docstring_data() -> (Tensor, Tensor) {
        let y_true = Tensor::from_slice(&[1i64, 1, 1, 0, 0, 0]).reshape([6, 1]);
        let y_pred = Tensor::from_slice(&[0.97f32, 0.91, 0.73, 0.27, 0.09, 0.03]).reshape([6, 1]);
        (y_pred, y_true)
    }

    /// Hand computation of one element: -ln(p_t) (1 - p_t)^gamma alpha_t.
    fn element(p_t: f64, gamma: f64, alpha_t: f64) -> f64 {
        -p_t.ln() * (1.0 - p_t).powf(gamma) * alpha_t
    }

    #[test]
    fn fastestimator_docstring_values() {
        // gamma 2, alpha 0.25: 0.00395; positives p_t = p with alpha 0.25, negatives
        // p_t = 1 - p with alpha 0.75; each sample has at most one positive (count 1).
        let (y_pred, y_true) = docstring_data();
        let expected = (element(0.97, 2.0, 0.25)
            + element(0.91, 2.0, 0.25)
            + element(0.73, 2.0, 0.25)
            + element(0.73, 2.0, 0.75)
            + element(0.91, 2.0, 0.75)
            + element(0.97, 2.0, 0.75))
            / 6.0;
        assert!((expected - 0.003_955).abs() < 1e-5, "{expected}");
        let got = run("", &y_pred, &y_true).double_value(&[]);
        assert!((got - expected).abs() < 1e-6, "{got} vs {expected}");
        // gamma 0 without alpha (FastEstimator's "None"): plain mean BCE, 0.1464.
        let got = run("gamma = 0.0\nalpha = -1.0", &y_pred, &y_true).double_value(&[]);
        let bce = -2.0 * (0.97f64.ln() + 0.91f64.ln() + 0.73f64.ln()) / 6.0;
        assert!((got - bce).abs() < 1e-6, "{got} vs {bce}");
        assert!((got - 0.1464).abs() < 1e-4);
    }

    /// test/PR_test/unit_test/op/loss/test_focal_loss.py data.
    fn fe_test_data() -> (Tensor, Tensor, Tensor, Tensor) {
        let y_true = Tensor::from_slice(&[
            1.0f32, 0., 0., 0., 0., 1., 0., 0., 0., 0., 1., 0., 1., 0., 0., 0., 1., 0., 0., 0., 0.,
            1., 0., 0.,
        ])
        .reshape([6, 4]);
        let y_pred = Tensor::from_slice(&[
            0.6f32, 0.2, 0.1, 0.1, 0.3, 0.4, 0.2, 0.1, 0.2, 0.2, 0.5, 0.1, 0.6, 0.1, 0.1, 0.2, 0.4,
            0.1, 0.2, 0.3, 0.0, 0.4, 0.6, 0.0,
        ])
        .reshape([6, 4]);
        let seg_true = Tensor::from_slice(&[
            1.0f32, 0., 0., 0., 0., 1., 0., 0., 0., 0., 1., 0., 1., 0., 0., 0., 1., 0., 0., 0., 0.,
            1., 0., 0., 1., 0., 0., 0., 0., 1., 0., 0.,
        ])
        .reshape([2, 4, 4, 1]);
        let seg_pred = Tensor::from_slice(&[
            0.6f32, 0.2, 0.6, 0.1, 0.3, 0.9, 0.4, 0.2, 0.3, 0.2, 0.7, 0., 0.4, 0.1, 0.2, 0.4, 0.9,
            0.3, 0.5, 0.3, 0.4, 0.8, 0.2, 0.3, 0.7, 0.1, 0.2, 0.5, 0.4, 0.6, 0.3, 0.4,
        ])
        .reshape([2, 4, 4, 1]);
        (y_pred, y_true, seg_pred, seg_true)
    }

    #[test]
    fn fastestimator_unit_test_values() {
        // test_focal_loss.py (torch): 0.112 and 0.142 (3-D and 4-D), each within 0.01. The
        // tighter values are what FastEstimator's PyTorch code gives for the same data
        // (0.11213886 and 0.14286934).
        let (y_pred, y_true, seg_pred, seg_true) = fe_test_data();
        let flat = run("", &y_pred, &y_true).double_value(&[]);
        assert!((flat - 0.112).abs() < 0.01, "{flat}");
        assert!((flat - 0.112_138_86).abs() < 1e-6, "{flat}");
        let seg = run("", &seg_pred, &seg_true).double_value(&[]);
        assert!((seg - 0.142).abs() < 0.01, "{seg}");
        assert!((seg - 0.142_869_34).abs() < 1e-6, "{seg}");
        let seg5 = run(
            "",
            &seg_pred.reshape([2, 1, 4, 4, 1]),
            &seg_true.reshape([2, 1, 4, 4, 1]),
        )
        .double_value(&[]);
        assert!((seg5 - seg).abs() < 1e-6, "{seg5} vs {seg}");
        // Sample 0 of the flat data by hand: one positive (p 0.6), negatives 0.2, 0.1, 0.1.
        let per_sample = run("sample_reduction = 'none'", &y_pred, &y_true);
        assert_eq!(per_sample.size(), [6]);
        let sample0 =
            element(0.6, 2.0, 0.25) + element(0.8, 2.0, 0.75) + 2.0 * element(0.9, 2.0, 0.75);
        assert!((per_sample.double_value(&[0]) - sample0).abs() < 1e-6);
    }

    #[test]
    fn normalize_divides_by_the_number_of_positives() {
        // Two positives in the sample: the summed loss is halved.
        let y_pred = Tensor::from_slice(&[0.6f32, 0.7, 0.2]).reshape([1, 3]);
        let y_true = Tensor::from_slice(&[1.0f32, 1.0, 0.0]).reshape([1, 3]);
        let total = element(0.6, 2.0, 0.25) + element(0.7, 2.0, 0.25) + element(0.8, 2.0, 0.75);
        let normalized = run("", &y_pred, &y_true).double_value(&[]);
        assert!((normalized - total / 2.0).abs() < 1e-6);
        let raw = run("normalize = false", &y_pred, &y_true).double_value(&[]);
        assert!((raw - total).abs() < 1e-6);
        let mean = run(
            "normalize = false\nshape_reduction = 'mean'",
            &y_pred,
            &y_true,
        );
        assert!((mean.double_value(&[]) - total / 3.0).abs() < 1e-6);
    }

    #[test]
    fn reductions_shape_the_output() {
        let (y_pred, y_true, seg_pred, seg_true) = fe_test_data();
        let none = run(
            "shape_reduction = 'none'\nsample_reduction = 'none'",
            &seg_pred,
            &seg_true,
        );
        assert_eq!(none.size(), [2, 4, 4, 1]);
        let summed = run("sample_reduction = 'sum'", &y_pred, &y_true).double_value(&[]);
        let mean = run("", &y_pred, &y_true).double_value(&[]);
        assert!((summed - 6.0 * mean).abs() < 1e-6);
        // Rank-1 inputs: one value per sample, nothing to reduce.
        let p = Tensor::from_slice(&[0.6f32, 0.2]);
        let y = Tensor::from_slice(&[1.0f32, 0.0]);
        let out = run("sample_reduction = 'none'", &p, &y);
        assert_eq!(out.size(), [2]);
        assert!((out.double_value(&[0]) - element(0.6, 2.0, 0.25)).abs() < 1e-6);
        assert!((out.double_value(&[1]) - element(0.8, 2.0, 0.75)).abs() < 1e-6);
    }

    #[test]
    fn from_logits_equals_sigmoid_then_probabilities() {
        let logits = Tensor::from_slice(&[2.0f32, -1.0, 0.5, -3.0]).reshape([2, 2]);
        let y_true = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0]).reshape([2, 2]);
        let a = run("from_logits = true", &logits, &y_true).double_value(&[]);
        let b = run("", &logits.sigmoid(), &y_true).double_value(&[]);
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }

    #[test]
    fn gradient_flows() {
        let (y_pred, y_true, _, _) = fe_test_data();
        for config in ["", "from_logits = true"] {
            let p = y_pred.copy().set_requires_grad(true);
            run(config, &p, &y_true).backward();
            let grad = p.grad();
            assert!(
                grad.abs().sum(Kind::Float).double_value(&[]) > 0.0,
                "{config}"
            );
            assert_eq!(grad.isfinite().all().int64_value(&[]), 1, "{config}");
        }
    }

    #[test]
    fn config_errors() {
        for (config, field) in [
            ("gamma = -1.0", "gamma"),
            ("alpha = 1.5", "alpha"),
            ("alpha = -0.5", "alpha"),
            ("shape_reduction = 'max'", "shape_reduction"),
            ("sample_reduction = 'avg'", "sample_reduction"),
            ("average_loss = true", "average_loss"),
        ] {
            let err = testing::tensor_op("FocalLoss", config, &["p", "y"], &["l"])
                .err()
                .unwrap();
            assert_eq!(err.field.as_str(), field, "{config}: {err:?}");
        }
    }
}
