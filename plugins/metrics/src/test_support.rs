//! Shared test data and helpers.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::testing::TestTrace;
use fe_plugin_api::Value;

/// Scores `[n, k]` (float32) whose argmax is `classes[i]`: 0.6 there, the rest shared.
pub fn scores(classes: &[i64], k: i64) -> Tensor {
    let other = 0.4 / (k - 1) as f32;
    let mut cells = Vec::new();
    for &class in classes {
        cells.extend((0..k).map(|c| if c == class { 0.6f32 } else { other }));
    }
    Tensor::from_slice(&cells).reshape([classes.len() as i64, k])
}

/// Ten samples of three classes in three batches of 4, 3 and 3, with labels
/// `[0,1,2,0 | 1,1,0 | 2,1,0]` and predictions `[0,0,2,1 | 1,2,0 | 2,1,0]`. Confusion matrix
/// (rows true, columns predicted):
///
/// ```text
///        p0 p1 p2 | actual
///   t0 [  3, 1, 0 ]   4
///   t1 [  1, 2, 1 ]   4
///   t2 [  0, 0, 2 ]   2
/// predicted 4  3  3     total 10, correct 7
/// ```
pub fn batches() -> Vec<Vec<Tensor>> {
    let truth = [0i64, 1, 2, 0, 1, 1, 0, 2, 1, 0];
    let predicted = [0i64, 0, 2, 1, 1, 2, 0, 2, 1, 0];
    [(0, 4), (4, 7), (7, 10)]
        .iter()
        .map(|&(a, b)| {
            vec![
                Tensor::from_slice(&truth[a..b]),
                scores(&predicted[a..b], 3),
            ]
        })
        .collect()
}

/// Eight binary samples, one probability each (`[n, 1]`), in batches of 3, 3 and 2:
/// labels `[1,0,1 | 1,0,0 | 1,1]`, probabilities `[.9,.6,.3 | .7,.2,.5 | .8,.1]`, so
/// predictions (> 0.5) `[1,1,0 | 1,0,0 | 1,0]`: tp 3, fp 1, fn 2, tn 2.
pub fn binary_batches() -> Vec<Vec<Tensor>> {
    let truth = [1i64, 0, 1, 1, 0, 0, 1, 1];
    let probability = [0.9f32, 0.6, 0.3, 0.7, 0.2, 0.5, 0.8, 0.1];
    [(0, 3), (3, 6), (6, 8)]
        .iter()
        .map(|&(a, b)| {
            vec![
                Tensor::from_slice(&truth[a..b]),
                Tensor::from_slice(&probability[a..b]).reshape([(b - a) as i64, 1]),
            ]
        })
        .collect()
}

/// The batch indices of `n` batches split over 1, 2 and 3 workers (in shuffled order; a
/// worker may get none).
pub fn splits(n: usize) -> Vec<Vec<Vec<usize>>> {
    let one = vec![(0..n).collect()];
    let two = vec![(0..n.min(1)).collect(), (1.min(n)..n).collect()];
    let mut three = vec![Vec::new(); 3];
    for index in (0..n).rev() {
        three[index % 3].push(index);
    }
    vec![one, two, three]
}

/// A value's shape and its numbers as bit patterns (NaN equals NaN).
fn bits(value: &Value) -> (Vec<i64>, Vec<u64>) {
    match value {
        Value::Float(v) => (Vec::new(), vec![v.to_bits()]),
        Value::Int(v) => (Vec::new(), vec![*v as u64]),
        Value::Tensor(_) => {
            let (shape, cells) = tensor_f64(value);
            (shape, cells.iter().map(|v| v.to_bits()).collect())
        }
        Value::Text(t) => panic!("unexpected text value {t}"),
    }
}

/// Runs one epoch over `batches` on 1, 2 and 3 workers, asserts the reduced values are
/// bit-for-bit identical, and returns them.
pub fn same_for_any_split(metric: &mut TestTrace, batches: &[Vec<Tensor>]) -> Vec<Value> {
    let mut runs = splits(batches.len())
        .into_iter()
        .map(|workers| metric.metric_epoch(batches, &workers).unwrap());
    let first = runs.next().unwrap();
    let expected: Vec<_> = first.iter().map(bits).collect();
    for (workers, values) in runs.enumerate() {
        let got: Vec<_> = values.iter().map(bits).collect();
        assert_eq!(got, expected, "{} workers differ from 1", workers + 2);
    }
    first
}

/// A float value.
pub fn scalar(value: &Value) -> f64 {
    match value {
        Value::Float(v) => *v,
        other => panic!("expected a float, got {other:?}"),
    }
}

/// A tensor value's shape and cells as f64.
pub fn tensor_f64(value: &Value) -> (Vec<i64>, Vec<f64>) {
    let Value::Tensor(t) = value else {
        panic!("expected a tensor, got {value:?}");
    };
    let view = t.view();
    let flat = view.to_kind(Kind::Double).reshape([-1]);
    (view.size(), Vec::<f64>::try_from(&flat).unwrap())
}

/// A tensor value's shape and cells, which must be Int64.
pub fn tensor_i64(value: &Value) -> (Vec<i64>, Vec<i64>) {
    let Value::Tensor(t) = value else {
        panic!("expected a tensor, got {value:?}");
    };
    let view = t.view();
    assert_eq!(view.kind(), Kind::Int64);
    (
        view.size(),
        Vec::<i64>::try_from(&view.reshape([-1])).unwrap(),
    )
}

/// Asserts `got` is within 1e-12 of `want` (or both NaN), element by element.
pub fn assert_close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() < 1e-12;
        assert!(ok, "{got:?} vs {want:?}");
    }
}
