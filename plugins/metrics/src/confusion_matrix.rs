//! FastEstimator's `ConfusionMatrix` trace (sklearn's `confusion_matrix`).

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, Metric, Result, State, Value};
use serde::Deserialize;

use crate::classes::{default_threshold, pair};
use crate::confusion::{check_num_classes, Confusion};

/// How to normalise the matrix (sklearn's `normalize`).
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Normalize {
    /// Divide each row by its sum (the true samples of that class).
    True,
    /// Divide each column by its sum (the predictions of that class).
    Pred,
    /// Divide by the number of samples.
    All,
}

/// Configuration of `ConfusionMatrix`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ConfusionMatrixConfig {
    /// Number of classes; by default `C` for predictions `[N, C]` and 2 for one value per
    /// sample. Labels must lie in `0..num_classes`.
    #[serde(default)]
    pub num_classes: Option<usize>,
    /// Predictions with one value per sample are class 1 when above this (default 0.5).
    #[serde(default = "default_threshold")]
    pub threshold: f64,
    /// `true`, `pred` or `all` for fractions instead of counts (applied to the epoch's
    /// matrix; rows or columns without samples stay 0). Absent: integer counts.
    #[serde(default, deserialize_with = "normalize_or_flag")]
    pub normalize: Option<Normalize>,
}

/// `normalize` as sklearn spells it (`"true"`, `"pred"`, `"all"`), or a TOML boolean:
/// `true` is `"true"` (rows) and `false` counts, as a user reading `true | "pred" | "all"`
/// writes it.
fn normalize_or_flag<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<Normalize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Flag(bool),
        Name(Normalize),
    }
    Ok(
        match Written::deserialize(deserializer).map_err(|_| {
            serde::de::Error::custom(r#"expected true, false, "true", "pred" or "all""#)
        })? {
            Written::Flag(true) => Some(Normalize::True),
            Written::Flag(false) => None,
            Written::Name(name) => Some(name),
        },
    )
}

/// Counts of (true class, predicted class): rows are true classes, columns predictions.
/// Inputs `[y_true, y_pred]`, output `[matrix]`, a `[num_classes, num_classes]` tensor.
pub struct ConfusionMatrix {
    config: ConfusionMatrixConfig,
    counts: Confusion,
}

impl FromConfig for ConfusionMatrix {
    type Config = ConfusionMatrixConfig;
    fn from_config(config: ConfusionMatrixConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(1))?;
        check_num_classes(config.num_classes)?;
        Ok(Self {
            counts: Confusion::new(config.num_classes),
            config,
        })
    }
}

impl Metric for ConfusionMatrix {
    fn reset(&mut self) {
        self.counts = Confusion::new(self.config.num_classes);
    }

    fn accumulate(&mut self, inputs: &[&Tensor]) -> Result<()> {
        let (y_true, y_pred) = pair(inputs)?;
        self.counts
            .accumulate(y_true, y_pred, self.config.threshold)
    }

    fn partial(&self) -> Result<State> {
        self.counts.state()
    }

    fn reduce(&self, partials: &[State]) -> Result<Vec<Value>> {
        let counts = Confusion::merge(partials, self.config.num_classes)?;
        let k = counts.k() as i64;
        let matrix = match self.config.normalize {
            None => {
                let cells: Vec<i64> = counts.counts.iter().map(|&c| c as i64).collect();
                Tensor::from_slice(&cells)
            }
            Some(normalize) => Tensor::from_slice(&normalized(&counts, normalize)),
        };
        let matrix = matrix.f_reshape([k, k]).map_err(Error::from)?;
        Ok(vec![Value::from(matrix)])
    }
}

/// The matrix as fractions; a cell whose divisor is 0 is 0 (sklearn's `nan_to_num`).
fn normalized(counts: &Confusion, normalize: Normalize) -> Vec<f64> {
    let k = counts.k();
    let total = counts.total();
    let mut cells = Vec::with_capacity(k * k);
    for t in 0..k {
        for p in 0..k {
            let divisor = match normalize {
                Normalize::True => counts.actual(t),
                Normalize::Pred => counts.predicted(p),
                Normalize::All => total,
            };
            cells.push(if divisor == 0 {
                0.0
            } else {
                counts.get(t, p) as f64 / divisor as f64
            });
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::Tensor;
    use fe_plugin_api::testing;

    use crate::test_support::{batches, same_for_any_split, scores, tensor_f64, tensor_i64};

    fn matrix(config: &str, batches: &[Vec<Tensor>]) -> fe_plugin_api::Value {
        let mut metric = testing::trace("ConfusionMatrix", config, &["y", "p"], &["cm"]).unwrap();
        same_for_any_split(&mut metric, batches).remove(0)
    }

    #[test]
    fn counts_match_hand_computed_matrix_for_any_split() {
        // See test_support::batches: rows true, columns predicted
        //   [[3, 1, 0],
        //    [1, 2, 1],
        //    [0, 0, 2]]
        let (shape, cells) = tensor_i64(&matrix("", &batches()));
        assert_eq!(shape, [3, 3]);
        assert_eq!(cells, [3, 1, 0, 1, 2, 1, 0, 0, 2]);
    }

    #[test]
    fn empty_batches_count_nothing() {
        let mut with_empty = batches();
        with_empty.insert(1, vec![Tensor::from_slice::<i64>(&[]), scores(&[], 3)]);
        let (_, cells) = tensor_i64(&matrix("", &with_empty));
        assert_eq!(cells, [3, 1, 0, 1, 2, 1, 0, 0, 2]);
    }

    #[test]
    fn normalized_by_rows_columns_and_total() {
        // Row sums [4, 4, 2], column sums [4, 3, 3], total 10.
        let (_, rows) = tensor_f64(&matrix("normalize = \"true\"", &batches()));
        let (_, flag) = tensor_f64(&matrix("normalize = true", &batches()));
        assert_eq!(flag, rows, "the boolean true normalises rows too");
        let (_, counts) = tensor_i64(&matrix("", &batches()));
        let (_, unnormalized) = tensor_i64(&matrix("normalize = false", &batches()));
        assert_eq!(unnormalized, counts);
        assert_eq!(rows, [0.75, 0.25, 0.0, 0.25, 0.5, 0.25, 0.0, 0.0, 1.0]);
        let (_, cols) = tensor_f64(&matrix("normalize = \"pred\"", &batches()));
        let third = 1.0 / 3.0;
        assert_eq!(
            cols,
            [
                0.75,
                third,
                0.0,
                0.25,
                2.0 * third,
                third,
                0.0,
                0.0,
                2.0 * third
            ]
        );
        let (_, all) = tensor_f64(&matrix("normalize = \"all\"", &batches()));
        assert_eq!(all, [0.3, 0.1, 0.0, 0.1, 0.2, 0.1, 0.0, 0.0, 0.2]);
    }

    #[test]
    fn absent_classes_give_empty_rows_and_columns() {
        // FastEstimator's own test: labels [[1,2],[3,4]] are one-hot-argmaxed to [1, 1];
        // predictions [[1,5,3],[2,1,0]] are [1, 0]. Classes 0 and 2 have no true samples.
        let batch = vec![vec![
            Tensor::from_slice(&[1i64, 2, 3, 4]).reshape([2, 2]),
            Tensor::from_slice(&[1.0f32, 5.0, 3.0, 2.0, 1.0, 0.0]).reshape([2, 3]),
        ]];
        let (_, cells) = tensor_i64(&matrix("num_classes = 3", &batch));
        assert_eq!(cells, [0, 0, 0, 1, 1, 0, 0, 0, 0]);
        // Empty rows normalise to 0, not NaN.
        let (_, rows) = tensor_f64(&matrix("normalize = \"true\"", &batch));
        assert_eq!(rows, [0.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn binary_predictions_and_bad_labels() {
        // One value per sample: > 0.5 is class 1. Pairs (t, p): (1,1) (0,0) (1,0) (0,1).
        let batch = vec![vec![
            Tensor::from_slice(&[1i64, 0, 1, 0]),
            Tensor::from_slice(&[0.9f32, 0.5, 0.2, 0.7]).reshape([4, 1]),
        ]];
        let (shape, cells) = tensor_i64(&matrix("", &batch));
        assert_eq!((shape, cells), (vec![2, 2], vec![1, 1, 1, 1]));
        let bad = vec![vec![Tensor::from_slice(&[0i64, 3]), scores(&[0, 1], 3)]];
        let mut metric = testing::trace("ConfusionMatrix", "", &["y", "p"], &["cm"]).unwrap();
        let err = metric.metric_epoch(&bad, &[vec![0]]).unwrap_err();
        assert!(
            err.message.contains("label 3 is outside the classes 0..3"),
            "{err}"
        );
        let err =
            testing::trace("ConfusionMatrix", "num_classes = 1", &["y", "p"], &["cm"]).unwrap_err();
        assert_eq!(err.field.as_str(), "num_classes");
    }
}
