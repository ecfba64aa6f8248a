//! FastEstimator's `MCC` trace (sklearn's `matthews_corrcoef`).

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, FromConfig, Metric, Result, State, Value};
use serde::Deserialize;

use crate::classes::{default_threshold, pair};
use crate::confusion::{check_num_classes, Confusion};

/// Configuration of `MCC`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct MccConfig {
    /// Number of classes; by default `C` for predictions `[N, C]` and 2 for one value per
    /// sample. Labels must lie in `0..num_classes`. Classes without samples do not change
    /// the value.
    #[serde(default)]
    pub num_classes: Option<usize>,
    /// Predictions with one value per sample are class 1 when above this (default 0.5).
    #[serde(default = "default_threshold")]
    pub threshold: f64,
}

/// Matthews correlation coefficient, multiclass form (Gorodkin's R_K), in [-1, 1].
/// Inputs `[y_true, y_pred]`, output `[mcc]`, a float.
pub struct Mcc {
    config: MccConfig,
    counts: Confusion,
}

impl FromConfig for Mcc {
    type Config = MccConfig;
    fn from_config(config: MccConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(1))?;
        check_num_classes(config.num_classes)?;
        Ok(Self {
            counts: Confusion::new(config.num_classes),
            config,
        })
    }
}

/// MCC from confusion counts, as sklearn computes it: with `s` samples, `c` correct, `t_k`
/// true and `p_k` predicted samples of class `k`,
/// `(c·s − Σ t_k·p_k) / sqrt((s² − Σ p_k²)(s² − Σ t_k²))`; 0 when the denominator is 0
/// (all labels or all predictions one class), NaN without samples. The covariances are
/// exact integers.
pub(crate) fn mcc(counts: &Confusion) -> f64 {
    let s = counts.total() as i128;
    if s == 0 {
        return f64::NAN;
    }
    let k = counts.k();
    let correct: i128 = (0..k).map(|c| counts.hits(c) as i128).sum();
    let (mut tp, mut pp, mut tt) = (0i128, 0i128, 0i128);
    for class in 0..k {
        let t = counts.actual(class) as i128;
        let p = counts.predicted(class) as i128;
        tp += t * p;
        pp += p * p;
        tt += t * t;
    }
    let cov_ytyp = correct * s - tp;
    let cov_ypyp = s * s - pp;
    let cov_ytyt = s * s - tt;
    if cov_ypyp == 0 || cov_ytyt == 0 {
        return 0.0;
    }
    cov_ytyp as f64 / (cov_ytyt as f64 * cov_ypyp as f64).sqrt()
}

impl Metric for Mcc {
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
        Ok(vec![Value::Float(mcc(&counts))])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::Tensor;
    use fe_plugin_api::testing;

    use crate::test_support::{batches, binary_batches, same_for_any_split, scalar, scores};

    fn mcc(config: &str, batches: &[Vec<Tensor>]) -> f64 {
        let mut metric = testing::trace("MCC", config, &["y", "p"], &["mcc"]).unwrap();
        scalar(&same_for_any_split(&mut metric, batches)[0])
    }

    #[test]
    fn multiclass_matches_hand_computed_value() {
        // Matrix [[3,1,0],[1,2,1],[0,0,2]]: s = 10, c = 7, t = [4,4,2], p = [4,3,3].
        // cov(yt,yp) = 7·10 − (16+12+6) = 36; cov(yp,yp) = 100 − 34 = 66;
        // cov(yt,yt) = 100 − 36 = 64. MCC = 36 / sqrt(64·66).
        let got = mcc("", &batches());
        assert_eq!(got, 36.0 / (64.0f64 * 66.0).sqrt());
        assert!((got - 0.553_911_709_4).abs() < 1e-10, "{got}");
    }

    #[test]
    fn fastestimator_reference_values() {
        // FastEstimator's test: labels [0,0,0,1,1,2], argmax predictions [0,1,2,0,1,2].
        let batch = vec![vec![
            Tensor::from_slice(&[0i64, 0, 0, 1, 1, 2]),
            Tensor::from_slice(&[
                0.2f32, 0.1, -0.6, 0.6, 2.0, 0.1, 0.1, 0.1, 0.8, 0.4, 0.1, -0.3, 0.2, 0.7, 0.1,
                0.3, 0.6, 1.5,
            ])
            .reshape([6, 3]),
        ]];
        assert!((mcc("", &batch) - 0.261_116_483_933_546_75).abs() < 1e-15);
        // Binary with one-hot labels [0,1,1,1] and predictions [0,1,1,0]:
        // tp 2, tn 1, fp 0, fn 1 → (2·1 − 0) / sqrt(2·3·1·2).
        let binary = vec![vec![
            Tensor::from_slice(&[1i64, 0, 0, 1, 0, 1, 0, 1]).reshape([4, 2]),
            Tensor::from_slice(&[0.2f32, 0.6, 0.8, 0.1]).reshape([4, 1]),
        ]];
        assert!((mcc("", &binary) - 2.0 / 12.0f64.sqrt()).abs() < 1e-15);
    }

    #[test]
    fn binary_matches_tp_tn_fp_fn_formula() {
        // See test_support::binary_batches: tp 3, tn 2, fp 1, fn 2.
        // (3·2 − 1·2) / sqrt((3+1)(3+2)(2+1)(2+2)) = 4 / sqrt(240).
        let got = mcc("", &binary_batches());
        assert!((got - 4.0 / 240.0f64.sqrt()).abs() < 1e-15, "{got}");
    }

    #[test]
    fn absent_class_and_constant_predictions() {
        // 4 score columns, class 3 never seen: t = [2,2,1,0], p = [2,3,0,0], c = 3, s = 5.
        // cov(yt,yp) = 15 − (4+6) = 5; cov(yp,yp) = 25 − 13 = 12; cov(yt,yt) = 25 − 9 = 16.
        let absent = vec![vec![
            Tensor::from_slice(&[0i64, 0, 1, 1, 2]),
            scores(&[0, 1, 1, 1, 0], 4),
        ]];
        let got = mcc("", &absent);
        assert!((got - 5.0 / 192.0f64.sqrt()).abs() < 1e-15, "{got}");
        // Every prediction class 1: cov(yp,yp) = 0, so MCC is 0 (sklearn).
        let constant = vec![vec![
            Tensor::from_slice(&[0i64, 1, 2, 1]),
            scores(&[1, 1, 1, 1], 3),
        ]];
        assert_eq!(mcc("", &constant), 0.0);
        // No samples at all: NaN.
        let mut metric = testing::trace("MCC", "", &["y", "p"], &["mcc"]).unwrap();
        assert!(scalar(&metric.metric_epoch(&[], &[vec![]]).unwrap()[0]).is_nan());
    }
}
