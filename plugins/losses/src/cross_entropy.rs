//! FastEstimator's `CrossEntropy` TensorOp.

use std::collections::BTreeMap;

use fe_plugin_api::tch::{Kind, Reduction, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

/// FastEstimator clamps probabilities into [EPSILON, 1 - EPSILON] before taking logs.
const EPSILON: f64 = 1e-7;

/// Which cross-entropy to compute.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Form {
    /// One probability (or logit) per sample against 0/1 labels.
    Binary,
    /// Class probabilities against one-hot (or soft) labels of the same shape.
    Categorical,
    /// Class probabilities against integer class labels.
    Sparse,
}

/// `CrossEntropy` configuration.
#[derive(Deserialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct CrossEntropyConfig {
    /// `true` when predictions are logits rather than probabilities.
    #[serde(default)]
    pub from_logits: bool,
    /// The form; inferred from the shapes on every call when absent.
    #[serde(default)]
    pub form: Option<Form>,
    /// Weight of each class (by class index); other classes weigh 1.
    #[serde(default)]
    pub class_weights: Option<BTreeMap<String, f64>>,
    /// Return the mean over the batch (default) or one loss per sample.
    #[serde(default = "yes")]
    pub average_loss: bool,
}

fn yes() -> bool {
    true
}

/// Inputs `[y_pred, y_true]`, output `[loss]`.
pub struct CrossEntropy {
    from_logits: bool,
    form: Option<Form>,
    class_weights: Option<(Vec<i64>, Vec<f64>)>,
    weight_table: Option<Tensor>,
    average: bool,
}

impl FromConfig for CrossEntropy {
    type Config = CrossEntropyConfig;
    fn from_config(config: CrossEntropyConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(1))?;
        let class_weights = match config.class_weights {
            None => None,
            Some(map) => {
                let mut classes = Vec::new();
                let mut weights = Vec::new();
                for (class, weight) in map {
                    let index: i64 = class.parse().map_err(|_| {
                        Error::config(
                            format!("class_weights.{class}"),
                            "class keys must be class indices",
                        )
                    })?;
                    classes.push(index);
                    weights.push(weight);
                }
                Some((classes, weights))
            }
        };
        Ok(Self {
            from_logits: config.from_logits,
            form: config.form,
            class_weights,
            weight_table: None,
            average: config.average_loss,
        })
    }
}

impl CrossEntropy {
    fn form_for(&self, y_pred: &Tensor, y_true: &Tensor) -> Form {
        if let Some(form) = self.form {
            return form;
        }
        let pred = y_pred.size();
        match pred.last() {
            Some(&classes) if pred.len() >= 2 && classes > 1 => {
                if y_true.size() == pred {
                    Form::Categorical
                } else {
                    Form::Sparse
                }
            }
            _ => Form::Binary,
        }
    }

    fn log_probs(&self, y_pred: &Tensor) -> Result<Tensor> {
        Ok(if self.from_logits {
            y_pred.f_log_softmax(-1, y_pred.kind())?
        } else {
            y_pred.f_clamp(EPSILON, 1.0 - EPSILON)?.f_log()?
        })
    }

    fn per_sample(&self, form: Form, y_pred: &Tensor, y_true: &Tensor) -> Result<Tensor> {
        match form {
            Form::Sparse => {
                let mut labels = y_true.f_to_kind(Kind::Int64)?;
                if labels.dim() == y_pred.dim() && labels.size().last() == Some(&1) {
                    labels = labels.f_squeeze_dim(-1)?;
                }
                let log_probs = self.log_probs(y_pred)?;
                if log_probs.dim() == 2 {
                    // One fused kernel (and backward node) instead of gather/squeeze/neg.
                    return Ok(log_probs.f_nll_loss::<Tensor>(
                        &labels,
                        None,
                        Reduction::None,
                        -100,
                    )?);
                }
                let picked = log_probs.f_gather(-1, &labels.f_unsqueeze(-1)?, false)?;
                Ok(picked.f_squeeze_dim(-1)?.f_neg()?)
            }
            Form::Categorical => {
                let log_probs = self.log_probs(y_pred)?;
                let y = y_true.f_to_kind(log_probs.kind())?;
                Ok(y.f_mul(&log_probs)?
                    .f_sum_dim_intlist(-1, false, log_probs.kind())?
                    .f_neg()?)
            }
            Form::Binary => {
                let y = y_true.f_to_kind(y_pred.kind())?.f_reshape(y_pred.size())?;
                let loss = if self.from_logits {
                    y_pred.f_binary_cross_entropy_with_logits::<Tensor>(
                        &y,
                        None,
                        None,
                        Reduction::None,
                    )?
                } else {
                    let p = y_pred.f_clamp(EPSILON, 1.0 - EPSILON)?;
                    let pos = y.f_mul(&p.f_log()?)?;
                    let neg = y
                        .f_neg()?
                        .f_add_scalar(1.0)?
                        .f_mul(&p.f_neg()?.f_add_scalar(1.0)?.f_log()?)?;
                    pos.f_add(&neg)?.f_neg()?
                };
                // One loss per sample: average any trailing dimensions.
                if loss.dim() > 1 {
                    Ok(loss.f_flatten(1, -1)?.f_mean_dim(-1, false, loss.kind())?)
                } else {
                    Ok(loss)
                }
            }
        }
    }

    /// Weight of each sample's true class (binary: the 0/1 label; one-hot: the argmax).
    fn sample_weights(
        &mut self,
        form: Form,
        y_pred: &Tensor,
        y_true: &Tensor,
    ) -> Result<Option<Tensor>> {
        let Some((classes, weights)) = &self.class_weights else {
            return Ok(None);
        };
        let labels = match form {
            Form::Categorical => y_true.f_argmax(-1, false)?,
            Form::Sparse | Form::Binary => y_true.f_to_kind(Kind::Int64)?.f_flatten(0, -1)?,
        };
        let needed = classes
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .max(y_pred.size().last().copied().unwrap_or(1))
            + 1;
        let table = match &self.weight_table {
            Some(table) if table.size()[0] >= needed && table.device() == y_pred.device() => {
                table.shallow_clone()
            }
            _ => {
                let mut values = vec![1.0f32; needed as usize];
                for (&class, &weight) in classes.iter().zip(weights) {
                    if class >= 0 {
                        values[class as usize] = weight as f32;
                    }
                }
                let table = Tensor::from_slice(&values).f_to_device(y_pred.device())?;
                self.weight_table = Some(table.shallow_clone());
                table
            }
        };
        Ok(Some(table.f_index_select(
            0,
            &labels.f_to_device(y_pred.device())?,
        )?))
    }
}

impl TensorOp for CrossEntropy {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let [y_pred, y_true] = inputs else {
            return Err(Error::msg(format!(
                "expected inputs [y_pred, y_true], got {} tensors",
                inputs.len()
            )));
        };
        let form = self.form_for(y_pred, y_true);
        let mut loss = self.per_sample(form, y_pred, y_true)?;
        if let Some(weights) = self.sample_weights(form, y_pred, y_true)? {
            loss = loss.f_mul(&weights.f_to_kind(loss.kind())?.f_reshape(loss.size())?)?;
        }
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

    fn loss(config: &str, y_pred: &Tensor, y_true: &Tensor) -> f64 {
        let mut op = testing::tensor_op("CrossEntropy", config, &["y_pred", "y"], &["ce"]).unwrap();
        op.forward(&[y_pred, y_true]).unwrap()[0].double_value(&[])
    }

    #[test]
    fn sparse_from_probabilities_matches_hand_computation() {
        // FastEstimator's test: -(ln 0.9 + ln 0.8) / 2
        let y_pred = t(&[0.1, 0.9, 0.8, 0.2], &[2, 2]);
        let y_true = Tensor::from_slice(&[1i64, 0]);
        let expected = -(0.9f64.ln() + 0.8f64.ln()) / 2.0;
        assert!((loss("", &y_pred, &y_true) - expected).abs() < 1e-6);
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
    fn binary_form_and_per_sample_losses() {
        let y_pred = t(&[0.9, 0.2], &[2, 1]);
        let y_true = t(&[1.0, 0.0], &[2, 1]);
        let mut op =
            testing::tensor_op("CrossEntropy", "average_loss = false", &["p", "y"], &["ce"])
                .unwrap();
        let out = op.forward(&[&y_pred, &y_true]).unwrap().remove(0);
        assert_eq!(out.size(), [2]);
        assert!((out.double_value(&[0]) + 0.9f64.ln()).abs() < 1e-6);
        assert!((out.double_value(&[1]) + 0.8f64.ln()).abs() < 1e-6);
    }

    #[test]
    fn class_weights_scale_each_sample() {
        let y_pred = t(&[0.1, 0.9, 0.8, 0.2], &[2, 2]);
        let y_true = Tensor::from_slice(&[1i64, 0]);
        let mut op = testing::tensor_op(
            "CrossEntropy",
            "average_loss = false\nclass_weights = { 1 = 2.0 }",
            &["p", "y"],
            &["ce"],
        )
        .unwrap();
        let out = op.forward(&[&y_pred, &y_true]).unwrap().remove(0);
        assert!((out.double_value(&[0]) + 2.0 * 0.9f64.ln()).abs() < 1e-6);
        assert!((out.double_value(&[1]) + 0.8f64.ln()).abs() < 1e-6);
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
    fn wrong_arity_and_unknown_field_are_config_errors() {
        let err = testing::tensor_op("CrossEntropy", "", &["p"], &["ce"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "inputs");
        let err = testing::tensor_op("CrossEntropy", "from_logit = true", &["p", "y"], &["ce"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "from_logit");
    }
}
