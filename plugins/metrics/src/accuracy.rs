//! FastEstimator's `Accuracy` trace.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, FromConfig, Metric, NoConfig, Result, State, Value};

use crate::classes::{classes, default_threshold, pair};

/// Fraction of samples whose predicted class equals the label.
///
/// Inputs `[y_true, y_pred]` (FastEstimator's `true_key`, `pred_key`), output `[accuracy]`, a
/// float; NaN for an epoch without samples. The partial state is `(correct, total)`.
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

impl Metric for Accuracy {
    fn reset(&mut self) {
        *self = Accuracy::default();
    }

    fn accumulate(&mut self, inputs: &[&Tensor]) -> Result<()> {
        let (y_true, y_pred) = pair(inputs)?;
        let batch = classes(y_true, y_pred, default_threshold())?;
        let correct = batch
            .predicted
            .f_eq_tensor(&batch.truth)?
            .f_sum(Kind::Int64)?;
        self.correct += correct.f_int64_value(&[])? as u64;
        self.total += batch.truth.numel() as u64;
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

    #[test]
    fn one_hot_labels_with_one_value_per_sample() {
        // Labels [[1,0],[0,1],[0,1]] are classes [0, 1, 1]; predictions > 0.5 are [0, 1, 0]:
        // 2 of 3 right.
        let batches = vec![vec![
            Tensor::from_slice(&[1i64, 0, 0, 1, 0, 1]).reshape([3, 2]),
            Tensor::from_slice(&[0.2f32, 0.6, 0.5]).reshape([3, 1]),
        ]];
        let mut acc = testing::trace("Accuracy", "", &["y", "p"], &["acc"]).unwrap();
        let got = value(&acc.metric_epoch(&batches, &[vec![0]]).unwrap());
        assert!((got - 2.0 / 3.0).abs() < 1e-12, "{got}");
    }
}
