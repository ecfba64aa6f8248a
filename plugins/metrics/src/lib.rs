//! Metrics for fe-host: `Accuracy`. Metrics accumulate per batch into a partial state and
//! reduce across workers (Determined's MetricReducer), so they stay exact when split.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{
    inventory, CreateContext, Error, FromConfig, Metric, NoConfig, Registration, Result, State,
    Value,
};

inventory::submit! {
    Registration::metric::<Accuracy>(
        "Accuracy",
        "Fraction of samples whose predicted class (argmax, or >0.5 for one output) equals the label",
    )
    .default_mode("eval,test")
}

fe_plugin_api::export_plugin!();

/// Inputs `[y_true, y_pred]` (FastEstimator's `true_key`, `pred_key`), output `[accuracy]`.
#[derive(Default)]
pub struct Accuracy {
    correct: u64,
    total: u64,
}

impl FromConfig for Accuracy {
    type Config = NoConfig;
    fn from_config(_: NoConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(1))?;
        Ok(Accuracy::default())
    }
}

/// Class indices from predictions: argmax over the last dimension, or a 0.5 threshold when
/// there is a single output per sample (binary).
fn predicted_classes(y_pred: &Tensor) -> Result<Tensor> {
    let size = y_pred.size();
    if size.len() >= 2 && size[size.len() - 1] > 1 {
        Ok(y_pred.f_argmax(-1, false)?)
    } else {
        Ok(y_pred
            .f_reshape([size.first().copied().unwrap_or(1), -1])?
            .f_gt(0.5)?
            .f_to_kind(Kind::Int64)?)
    }
}

/// Class indices from labels: argmax for one-hot labels, else the labels themselves.
fn true_classes(y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    if y_true.size() == y_pred.size() && y_pred.dim() >= 2 && y_pred.size()[y_pred.dim() - 1] > 1 {
        Ok(y_true.f_argmax(-1, false)?)
    } else {
        Ok(y_true.f_to_kind(Kind::Int64)?)
    }
}

impl Metric for Accuracy {
    fn reset(&mut self) {
        *self = Accuracy::default();
    }

    fn accumulate(&mut self, inputs: &[&Tensor]) -> Result<()> {
        let [y_true, y_pred] = inputs else {
            return Err(Error::msg(format!(
                "expected inputs [y_true, y_pred], got {}",
                inputs.len()
            )));
        };
        let predicted = predicted_classes(y_pred)?.f_reshape([-1])?;
        let labels = true_classes(y_true, y_pred)?.f_reshape([-1])?;
        if predicted.numel() != labels.numel() {
            return Err(Error::msg(format!(
                "{} predictions but {} labels",
                predicted.numel(),
                labels.numel()
            )));
        }
        let correct = predicted
            .f_eq_tensor(&labels.f_to_device(predicted.device())?)?
            .f_sum(Kind::Int64)?;
        self.correct += correct.int64_value(&[]) as u64;
        self.total += labels.numel() as u64;
        Ok(())
    }

    fn partial(&self) -> Result<State> {
        State::from_json(&(self.correct, self.total))
    }

    fn reduce(&self, partials: &[State]) -> Result<Vec<Value>> {
        let (mut correct, mut total) = (0u64, 0u64);
        for partial in partials {
            let (c, t): (u64, u64) = partial.json()?;
            correct += c;
            total += t;
        }
        let accuracy = if total == 0 {
            f64::NAN
        } else {
            correct as f64 / total as f64
        };
        Ok(vec![Value::Float(accuracy)])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::Tensor;
    use fe_plugin_api::testing;

    fn value(values: &[fe_plugin_api::Value]) -> f64 {
        values[0].as_f64().unwrap()
    }

    #[test]
    fn accuracy_is_exact_for_any_split_across_workers() {
        // 3 batches; 5 of 8 predictions right.
        let batches = vec![
            vec![
                Tensor::from_slice(&[0i64, 1, 2]),
                Tensor::from_slice(&[0.9f32, 0.1, 0.2, 0.8, 0.3, 0.7]).reshape([3, 2]),
            ],
            vec![
                Tensor::from_slice(&[1i64, 1]),
                Tensor::from_slice(&[0.4f32, 0.6, 0.1, 0.9]).reshape([2, 2]),
            ],
            vec![
                Tensor::from_slice(&[0i64, 0, 1]),
                Tensor::from_slice(&[0.2f32, 0.8, 0.6, 0.4, 0.7, 0.3]).reshape([3, 2]),
            ],
        ];
        let mut acc = testing::trace("Accuracy", "", &["y", "y_pred"], &["accuracy"]).unwrap();
        let one = value(&acc.metric_epoch(&batches, &[vec![0, 1, 2]]).unwrap());
        let two = value(&acc.metric_epoch(&batches, &[vec![0], vec![1, 2]]).unwrap());
        let three = value(
            &acc.metric_epoch(&batches, &[vec![2], vec![0], vec![1]])
                .unwrap(),
        );
        assert!((one - 5.0 / 8.0).abs() < 1e-12, "{one}");
        assert_eq!(one, two);
        assert_eq!(one, three);
    }

    #[test]
    fn one_hot_labels_and_binary_predictions() {
        let batches = vec![vec![
            Tensor::from_slice(&[0.0f32, 1.0, 1.0, 0.0]).reshape([2, 2]),
            Tensor::from_slice(&[0.3f32, 0.7, 0.2, 0.8]).reshape([2, 2]),
        ]];
        let mut acc = testing::trace("Accuracy", "", &["y", "p"], &["acc"]).unwrap();
        assert_eq!(value(&acc.metric_epoch(&batches, &[vec![0]]).unwrap()), 0.5);
        let binary = vec![vec![
            Tensor::from_slice(&[1i64, 0, 1]),
            Tensor::from_slice(&[0.9f32, 0.4, 0.2]).reshape([3, 1]),
        ]];
        assert!((value(&acc.metric_epoch(&binary, &[vec![0]]).unwrap()) - 2.0 / 3.0).abs() < 1e-12);
    }
}
