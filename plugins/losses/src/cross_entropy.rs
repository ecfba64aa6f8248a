//! FastEstimator's `CrossEntropy` TensorOp (`fe.op.tensorop.loss.CrossEntropy`), ported from
//! the PyTorch branch of `fe.backend.{binary,categorical,sparse_categorical}_crossentropy`.

use std::collections::BTreeMap;

use fe_plugin_api::tch::{Kind, Reduction, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

/// Which cross-entropy to compute.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Form {
    /// Element-wise binary cross-entropy of probabilities (or logits) against 0/1 labels of the
    /// same number of elements, averaged over every dimension but the batch.
    Binary,
    /// Class probabilities (or logits) `[B, C, ...]` against one-hot or soft labels of the same
    /// shape; classes along dimension 1 (channels first, as in PyTorch).
    Categorical,
    /// Class probabilities (or logits) `[B, C, ...]` against integer class labels `[B, ...]`
    /// (or `[B, 1, ...]`); classes along dimension 1.
    Sparse,
}

/// `CrossEntropy` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct CrossEntropyConfig {
    /// `true` when predictions are logits: a softmax over the classes (a sigmoid for the binary
    /// form) is applied first. Default `false` (predictions are probabilities).
    #[serde(default)]
    pub from_logits: bool,
    /// `"binary"`, `"categorical"` or `"sparse"`. When absent it is chosen on every call from the
    /// shapes, as FastEstimator does: a rank-2 `y_pred` with more than one column is
    /// `categorical` when `y_true` is also rank 2 with more than one column and `sparse`
    /// otherwise; anything else is `binary`.
    #[serde(default)]
    pub form: Option<Form>,
    /// Weight of each class, as a table `{ class index = weight }`; samples (pixels) whose true
    /// class is not listed weigh 1. The true class is the integer label (sparse), the argmax of
    /// the one-hot label (categorical) or the 0/1 label itself (binary). Default: no weighting.
    #[serde(default)]
    pub class_weights: Option<BTreeMap<String, f64>>,
    /// `true` (default): output the mean loss over the batch (a scalar). `false`: one loss per
    /// sample (`[B]`, or `[B, ...]` for sparse/categorical losses over spatial dimensions).
    #[serde(default = "super::yes")]
    pub average_loss: bool,
}

/// Inputs `[y_pred, y_true]`, output `[loss]`.
pub struct CrossEntropy {
    from_logits: bool,
    form: Option<Form>,
    class_weights: Vec<(i64, f64)>,
    average: bool,
    probabilities: super::ProbabilityCheck,
}

impl FromConfig for CrossEntropy {
    type Config = CrossEntropyConfig;
    fn from_config(config: CrossEntropyConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(1))?;
        Self::new(config)
    }
}

impl CrossEntropy {
    /// The loss `config` describes, for ops that compute it inside their own (`MixLoss`).
    pub(crate) fn new(config: CrossEntropyConfig) -> Result<Self> {
        let class_weights = match config.class_weights {
            Some(map) => super::index_weights("class_weights", map)?,
            None => Vec::new(),
        };
        Ok(Self {
            from_logits: config.from_logits,
            form: config.form,
            class_weights,
            average: config.average_loss,
            probabilities: super::ProbabilityCheck::new(),
        })
    }
}

/// The smallest positive normal number of a floating kind: probabilities are clamped up to it
/// before the logarithm, so an exact 0 gives a large finite loss and no gradient instead of
/// FastEstimator's `inf` (sparse) or `0 * -inf = NaN` (categorical). Every probability at or
/// above it gives exactly FastEstimator's value.
fn smallest_normal(kind: Kind) -> f64 {
    match kind {
        Kind::Half => 6.103_515_625e-5,
        Kind::Double => f64::MIN_POSITIVE,
        _ => f64::from(f32::MIN_POSITIVE),
    }
}

impl CrossEntropy {
    /// FastEstimator's rule for a missing `form`.
    fn form_for(&self, y_pred: &Tensor, y_true: &Tensor) -> Form {
        if let Some(form) = self.form {
            return form;
        }
        let wide = |shape: &[i64]| shape.len() == 2 && shape[1] > 1;
        if wide(&y_pred.size()) {
            if wide(&y_true.size()) {
                Form::Categorical
            } else {
                Form::Sparse
            }
        } else {
            Form::Binary
        }
    }

    /// Log-probabilities over the class dimension (1).
    fn log_probs(&self, y_pred: &Tensor) -> Result<Tensor> {
        if y_pred.dim() < 2 {
            return Err(Error::msg(format!(
                "sparse and categorical cross-entropy need y_pred of shape [batch, classes, ...], \
                 got {:?}",
                y_pred.size()
            )));
        }
        Ok(if self.from_logits {
            y_pred.f_log_softmax(1, y_pred.kind())?
        } else {
            y_pred
                .f_clamp_min(smallest_normal(y_pred.kind()))?
                .f_log()?
        })
    }

    /// `loss` times the weight of each element's class; `labels` has `loss`'s shape.
    fn weighted(&self, loss: Tensor, labels: &Tensor) -> Result<Tensor> {
        if self.class_weights.is_empty() {
            return Ok(loss);
        }
        let mut weights = Tensor::f_ones(labels.size(), (loss.kind(), loss.device()))?;
        for &(class, weight) in &self.class_weights {
            weights = Tensor::f_where_scalarself(&labels.f_eq(class)?, weight, &weights)?;
        }
        Ok(loss.f_mul(&weights.f_reshape(loss.size())?)?)
    }

    fn sparse(&self, y_pred: &Tensor, y_true: &Tensor) -> Result<Tensor> {
        let mut labels = y_true.f_to_kind(Kind::Int64)?;
        // Labels given as one column ([B, 1] against [B, C], or [B, 1, ...] against
        // [B, C, ...]): drop the singleton class axis.
        if labels.dim() == y_pred.dim() && labels.dim() >= 2 && labels.size()[1] == 1 {
            labels = labels.f_squeeze_dim(1)?;
        }
        // PyTorch's NLLLoss (and CrossEntropyLoss) as FastEstimator calls them: label -100 is
        // ignored (loss 0).
        let loss = self.log_probs(y_pred)?.f_nll_loss_nd::<Tensor>(
            &labels,
            None,
            Reduction::None,
            -100,
        )?;
        self.weighted(loss, &labels)
    }

    fn categorical(&self, y_pred: &Tensor, y_true: &Tensor) -> Result<Tensor> {
        let log_probs = self.log_probs(y_pred)?;
        let y = super::align_target(y_pred, y_true)?;
        let loss = y
            .f_mul(&log_probs)?
            .f_sum_dim_intlist(1, false, log_probs.kind())?
            .f_neg()?;
        if self.class_weights.is_empty() {
            return Ok(loss);
        }
        self.weighted(loss, &y.f_argmax(1, false)?)
    }

    fn binary(&self, y_pred: &Tensor, y_true: &Tensor) -> Result<Tensor> {
        let y = super::align_target(y_pred, y_true)?;
        let loss = if self.from_logits {
            y_pred.f_binary_cross_entropy_with_logits::<Tensor>(&y, None, None, Reduction::None)?
        } else {
            // PyTorch's BCELoss, as FastEstimator uses: logs clamped at -100, inputs must lie
            // in [0, 1].
            y_pred.f_binary_cross_entropy::<Tensor>(&y, None, Reduction::None)?
        };
        // Class weights apply element by element, before the per-sample mean.
        let loss = self.weighted(loss, &y)?;
        if loss.dim() > 1 {
            Ok(loss.f_flatten(1, -1)?.f_mean_dim(-1, false, loss.kind())?)
        } else {
            Ok(loss)
        }
    }
}

impl TensorOp for CrossEntropy {
    fn forward(&mut self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let (y_pred, y_true) = super::pair(inputs)?;
        let form = self.form_for(y_pred, y_true);
        if !self.from_logits {
            let activation = match form {
                Form::Binary => "a sigmoid",
                Form::Categorical | Form::Sparse => "a softmax over dimension 1",
            };
            self.probabilities.check(y_pred, ctx.warmup, activation)?;
        }
        let loss = match form {
            Form::Sparse => self.sparse(y_pred, y_true)?,
            Form::Categorical => self.categorical(y_pred, y_true)?,
            Form::Binary => self.binary(y_pred, y_true)?,
        };
        Ok(vec![super::reduce(loss, self.average)?])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Device, Kind, Tensor};
    use fe_plugin_api::testing;

    fn t(values: &[f32], shape: &[i64]) -> Tensor {
        Tensor::from_slice(values).reshape(shape)
    }

    fn run(config: &str, y_pred: &Tensor, y_true: &Tensor) -> Tensor {
        let mut op = testing::tensor_op("CrossEntropy", config, &["y_pred", "y"], &["ce"]).unwrap();
        op.forward(&[y_pred, y_true]).unwrap().remove(0)
    }

    fn loss(config: &str, y_pred: &Tensor, y_true: &Tensor) -> f64 {
        run(config, y_pred, y_true).double_value(&[])
    }

    fn assert_values(out: &Tensor, expected: &[f64]) {
        assert_eq!(out.size(), [expected.len() as i64], "{out:?}");
        for (i, want) in expected.iter().enumerate() {
            let got = out.double_value(&[i as i64]);
            assert!((got - want).abs() < 1e-5, "[{i}]: {got} vs {want}");
        }
    }

    /// FastEstimator's 3-sample example (backend docstrings and tests).
    fn three_samples() -> Tensor {
        t(&[0.1, 0.8, 0.1, 0.9, 0.05, 0.05, 0.1, 0.2, 0.7], &[3, 3])
    }

    #[test]
    fn sparse_from_probabilities_matches_hand_computation() {
        // -(ln 0.9 + ln 0.8) / 2
        let y_pred = t(&[0.1, 0.9, 0.8, 0.2], &[2, 2]);
        let y_true = Tensor::from_slice(&[1i64, 0]);
        let expected = -(0.9f64.ln() + 0.8f64.ln()) / 2.0;
        assert!((loss("", &y_pred, &y_true) - expected).abs() < 1e-6);
    }

    #[test]
    fn fastestimator_categorical_test_value() {
        // test/PR_test/integration_test/op/tensorop/loss/test_cross_entropy.py: 0.22839302
        // = -(ln 0.8 + ln 0.9 + ln 0.7) / 3; the form is inferred (both rank 2, 3 columns).
        let y_true = t(&[0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0], &[3, 3]);
        let got = loss("", &three_samples(), &y_true);
        assert!((got - 0.228_393_02).abs() < 1e-6, "{got}");
    }

    #[test]
    #[allow(clippy::approx_constant)] // FastEstimator's expected values, which include ln 10
    fn fastestimator_sparse_test_value_with_column_labels() {
        // test_cross_entropy.py / test_sparse_categorical_crossentropy.py: labels [[0], [1], [0]]
        // (rank 2, one column, so the inferred form is sparse) give 2.5336342 and per sample
        // [2.3025851, 2.9957323, 2.3025851] = -ln [0.1, 0.05, 0.1].
        let y_true = Tensor::from_slice(&[0i64, 1, 0]).reshape([3, 1]);
        let got = loss("", &three_samples(), &y_true);
        assert!((got - 2.533_634_2).abs() < 1e-5, "{got}");
        let out = run("average_loss = false", &three_samples(), &y_true);
        assert_values(&out, &[2.302_585_1, 2.995_732_3, 2.302_585_1]);
    }

    #[test]
    fn fastestimator_binary_test_values() {
        // test/PR_test/unit_test/backend/test_binary_crossentropy.py (torch cases).
        let y_pred = t(&[0.9, 0.3, 0.8, 0.1], &[4, 1]);
        let y_true = Tensor::from_slice(&[1i64, 0, 1, 0]).reshape([4, 1]);
        assert!((loss("", &y_pred, &y_true) - 0.197_634_74).abs() < 1e-6);
        let per_sample = [0.105_360_41, 0.356_674_8, 0.223_143_38, 0.105_360_41];
        assert_values(&run("average_loss = false", &y_pred, &y_true), &per_sample);
        assert_values(
            &run(
                "average_loss = false\nclass_weights = { 1 = 2.0 }",
                &y_pred,
                &y_true,
            ),
            &[0.210_720_82, 0.356_674_8, 0.446_286_76, 0.105_360_41],
        );
        assert!((loss("from_logits = true", &y_pred, &y_true) - 0.577_751_64).abs() < 1e-6);
        assert_values(
            &run(
                "from_logits = true\naverage_loss = false\nclass_weights = { 1 = 2.0 }",
                &y_pred,
                &y_true,
            ),
            &[0.682_307_72, 0.854_355_3, 0.742_201_32, 0.744_396_7],
        );
    }

    #[test]
    fn class_weights_match_fastestimator_examples() {
        // fe.backend.categorical_crossentropy / sparse_categorical_crossentropy docstrings:
        // weights {1: 2.0, 2: 3.0} give [2 * -ln 0.8, -ln 0.9, 3 * -ln 0.7].
        let config = "average_loss = false\nclass_weights = { 1 = 2.0, 2 = 3.0 }";
        let expected = [-2.0 * 0.8f64.ln(), -(0.9f64.ln()), -3.0 * 0.7f64.ln()];
        let one_hot = t(&[0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0], &[3, 3]);
        assert_values(&run(config, &three_samples(), &one_hot), &expected);
        let sparse = Tensor::from_slice(&[1i64, 0, 2]);
        assert_values(&run(config, &three_samples(), &sparse), &expected);
    }

    #[test]
    fn binary_class_weights_apply_per_element_before_the_sample_mean() {
        // One sample, two outputs: (2 * -ln 0.9 + -ln 0.7) / 2.
        let y_pred = t(&[0.9, 0.3], &[1, 2]);
        let y_true = t(&[1.0, 0.0], &[1, 2]);
        let got = loss(
            "form = 'binary'\nclass_weights = { 1 = 2.0 }",
            &y_pred,
            &y_true,
        );
        let expected = (-2.0 * 0.9f64.ln() - 0.7f64.ln()) / 2.0;
        assert!((got - expected).abs() < 1e-6, "{got} vs {expected}");
    }

    #[test]
    fn one_hot_and_sparse_agree() {
        let y_pred = t(&[0.7, 0.2, 0.1, 0.1, 0.3, 0.6], &[2, 3]);
        let sparse = Tensor::from_slice(&[0i64, 2]);
        let one_hot = t(&[1.0, 0.0, 0.0, 0.0, 0.0, 1.0], &[2, 3]);
        let a = loss("", &y_pred, &sparse);
        let b = loss("", &y_pred, &one_hot);
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }

    #[test]
    fn from_logits_equals_softmax_then_probabilities() {
        let logits = t(&[2.0, -1.0, 0.5, 0.0, 3.0, -2.0], &[2, 3]);
        let labels = Tensor::from_slice(&[2i64, 1]);
        let a = loss("from_logits = true", &logits, &labels);
        let b = loss("", &logits.softmax(-1, Kind::Float), &labels);
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }

    #[test]
    fn rank_3_predictions_default_to_binary_like_fastestimator() {
        // FastEstimator infers sparse/categorical only for rank-2 y_pred; a [1, 2, 2] y_pred is
        // binary: the mean of the four element-wise BCEs.
        let y_pred = t(&[0.9, 0.2, 0.4, 0.7], &[1, 2, 2]);
        let y_true = t(&[1.0, 0.0, 0.0, 1.0], &[1, 2, 2]);
        let expected = -(0.9f64.ln() + 0.8f64.ln() + 0.6f64.ln() + 0.7f64.ln()) / 4.0;
        let out = run("average_loss = false", &y_pred, &y_true);
        assert_values(&out, &[expected]);
    }

    #[test]
    fn explicit_sparse_uses_dimension_1_for_classes() {
        // Segmentation, channels first: y_pred [1, 2 classes, 2 pixels], labels [1, 2 pixels].
        // Pixel 0 has p(class 0) = 0.9, pixel 1 has p(class 1) = 0.8.
        let y_pred = t(&[0.9, 0.2, 0.1, 0.8], &[1, 2, 2]);
        let labels = Tensor::from_slice(&[0i64, 1]).reshape([1, 2]);
        let out = run("form = 'sparse'\naverage_loss = false", &y_pred, &labels);
        assert_eq!(out.size(), [1, 2]);
        assert!((out.double_value(&[0, 0]) + 0.9f64.ln()).abs() < 1e-6);
        assert!((out.double_value(&[0, 1]) + 0.8f64.ln()).abs() < 1e-6);
        // The same as one-hot labels [1, 2 classes, 2 pixels] in categorical form.
        let one_hot = t(&[1.0, 0.0, 0.0, 1.0], &[1, 2, 2]);
        let cat = run(
            "form = 'categorical'\naverage_loss = false",
            &y_pred,
            &one_hot,
        );
        assert!(cat.allclose(&out, 1e-6, 1e-6, false), "{cat:?}");
    }

    #[test]
    fn from_logits_softmax_runs_over_dimension_1() {
        // [1, 3 classes, 2 pixels] logits: the softmax is per pixel, over the classes.
        let logits = t(&[2.0, -1.0, 0.5, 0.0, 3.0, -2.0], &[1, 3, 2]);
        let labels = Tensor::from_slice(&[2i64, 0]).reshape([1, 2]);
        let config = "form = 'sparse'\nfrom_logits = true\naverage_loss = false";
        let out = run(config, &logits, &labels);
        // Pixel 0: logits (2, 0.5, 3), class 2; pixel 1: logits (-1, 0, -2), class 0.
        let lse = |v: [f64; 3]| v.iter().map(|x| x.exp()).sum::<f64>().ln();
        let expected = [lse([2.0, 0.5, 3.0]) - 3.0, lse([-1.0, 0.0, -2.0]) + 1.0];
        assert_eq!(out.size(), [1, 2]);
        for (i, want) in expected.iter().enumerate() {
            let got = out.double_value(&[0, i as i64]);
            assert!((got - want).abs() < 1e-5, "[{i}] {got} vs {want}");
        }
    }

    #[test]
    fn label_minus_100_is_ignored_like_pytorch_nll_loss() {
        let y_pred = t(&[0.1, 0.9, 0.8, 0.2], &[2, 2]);
        let y_true = Tensor::from_slice(&[1i64, -100]);
        let out = run("average_loss = false", &y_pred, &y_true);
        assert_values(&out, &[-(0.9f64.ln()), 0.0]);
    }

    #[test]
    fn exact_zero_probabilities_give_finite_losses_and_gradients() {
        // Categorical: a zero on a class the label does not select contributes nothing (not
        // 0 * ln 0 = NaN); sparse: a zero on the true class is large but finite.
        let y_pred = t(&[1.0, 0.0, 0.5, 0.5], &[2, 2]).set_requires_grad(true);
        let one_hot = t(&[1.0, 0.0, 1.0, 0.0], &[2, 2]);
        let out = run("average_loss = false", &y_pred, &one_hot);
        assert_values(&out, &[0.0, -(0.5f64.ln())]);
        let sparse = Tensor::from_slice(&[1i64, 0]);
        let out = run("", &y_pred, &sparse);
        let value = out.double_value(&[]);
        assert!(value.is_finite() && value > 40.0, "{value}");
        out.backward();
        let grad = y_pred.grad();
        assert!(
            grad.isfinite().all().int64_value(&[]) == 1,
            "gradient must be finite: {grad:?}"
        );
    }

    #[test]
    fn binary_probabilities_outside_0_1_are_an_error() {
        let y_pred = t(&[1.5, 0.2], &[2, 1]);
        let y_true = t(&[1.0, 0.0], &[2, 1]);
        let mut op = testing::tensor_op("CrossEntropy", "", &["p", "y"], &["ce"]).unwrap();
        // The first call's own check; after it, libtorch's.
        let err = op.forward(&[&y_pred, &y_true]).unwrap_err();
        assert!(err.message.contains("outside [0, 1]"), "{err:?}");
        let err = op.forward(&[&y_pred, &y_true]).unwrap_err();
        assert!(err.message.contains("between 0 and 1"), "{err:?}");
    }

    #[test]
    fn mismatched_binary_shapes_are_an_error() {
        let y_pred = t(&[0.9, 0.2], &[2, 1]);
        let y_true = t(&[1.0, 0.0, 1.0], &[3]);
        let mut op = testing::tensor_op("CrossEntropy", "", &["p", "y"], &["ce"]).unwrap();
        let err = op.forward(&[&y_pred, &y_true]).unwrap_err();
        assert!(err.message.contains("does not match"), "{err:?}");
    }

    #[test]
    fn rank_1_predictions_in_sparse_form_are_an_error() {
        let y_pred = t(&[0.9, 0.2], &[2]);
        let y_true = Tensor::from_slice(&[0i64, 1]);
        let mut op =
            testing::tensor_op("CrossEntropy", "form = 'sparse'", &["p", "y"], &["ce"]).unwrap();
        let err = op.forward(&[&y_pred, &y_true]).unwrap_err();
        assert!(err.message.contains("[batch, classes"), "{err:?}");
    }

    #[test]
    fn logits_without_from_logits_are_refused_in_the_warm_up_and_on_the_first_call() {
        let logits = t(&[2.5, -1.0, 0.3, -4.0, 7.0, 0.0], &[2, 3]);
        let labels = Tensor::from_slice(&[0i64, 1]);
        let warmup = fe_plugin_api::StepContext {
            warmup: true,
            ..fe_plugin_api::StepContext::for_tests()
        };
        for first in [warmup, fe_plugin_api::StepContext::for_tests()] {
            let mut op = testing::tensor_op("CrossEntropy", "", &["p", "y"], &["ce"]).unwrap();
            let err = op.forward_with(&[&logits, &labels], &first).unwrap_err();
            assert!(
                err.message
                    .contains("from -4.0000 to 7.0000, outside [0, 1]")
                    && err.message.contains("set `from_logits = true`")
                    && err.message.contains("a softmax over dimension 1"),
                "{err:?}"
            );
        }
        // Binary form: the sigmoid is named.
        let mut op = testing::tensor_op("CrossEntropy", "", &["p", "y"], &["ce"]).unwrap();
        let err = op
            .forward(&[&t(&[1.5, -0.5], &[2, 1]), &t(&[1.0, 0.0], &[2, 1])])
            .unwrap_err();
        assert!(err.message.contains("applies a sigmoid"), "{err:?}");
        // Probabilities pass (an exact 0 and 1 included), and so do logits with from_logits.
        let mut op = testing::tensor_op("CrossEntropy", "", &["p", "y"], &["ce"]).unwrap();
        let probabilities = t(&[1.0, 0.0, 0.0, 0.2, 0.3, 0.5], &[2, 3]);
        assert!(op.forward(&[&probabilities, &labels]).is_ok());
        let mut op =
            testing::tensor_op("CrossEntropy", "from_logits = true", &["p", "y"], &["ce"]).unwrap();
        assert!(op.forward(&[&logits, &labels]).is_ok());
    }

    #[test]
    fn gradient_flows_to_predictions() {
        let logits = Tensor::zeros([3, 4], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let labels = Tensor::from_slice(&[0i64, 1, 2]);
        let mut op =
            testing::tensor_op("CrossEntropy", "from_logits = true", &["p", "y"], &["ce"]).unwrap();
        let out = op.forward(&[&logits, &labels]).unwrap().remove(0);
        out.backward();
        assert!(logits.grad().abs().sum(Kind::Float).double_value(&[]) > 0.0);
    }

    #[test]
    fn config_errors_name_the_field() {
        let err = testing::tensor_op("CrossEntropy", "", &["p"], &["ce"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "inputs");
        let err = testing::tensor_op("CrossEntropy", "from_logit = true", &["p", "y"], &["ce"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "from_logit");
        let err = testing::tensor_op("CrossEntropy", "form = 'dense'", &["p", "y"], &["ce"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "form");
        let err = testing::tensor_op(
            "CrossEntropy",
            "class_weights = { cat = 2.0 }",
            &["p", "y"],
            &["ce"],
        )
        .err()
        .unwrap();
        assert_eq!(err.field.as_str(), "class_weights.cat");
    }
}
