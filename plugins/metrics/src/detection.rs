//! `MeanAveragePrecision`: COCO's box mAP (see [`crate::coco`]) as a metric.
//!
//! The partial state is every image's ground truth and detections (padding rows dropped), so
//! the reduction evaluates exactly the images one process would: data parallelism gathers
//! detections, it never averages per-rank mAPs.

use std::collections::BTreeMap;

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Metric, NoConfig, Result, State, Value};

use crate::coco::{mean_average_precision, Image};

/// Inputs `[y_true, y_pred]`: ground truth `[N, M, 5]` rows `(x, y, w, h, class)` (or
/// `[N, M, 6]` with COCO's `iscrowd` last) and detections `[N, K, 6]` rows
/// `(x, y, w, h, class, score)`, COCO's boxes (top-left corner, width, height). A row whose
/// class is negative or whose width or height is not positive is padding. Outputs:
/// mAP@[.5:.95], then optionally mAP@.5, mAP@.75 and mAP of small, medium and large objects.
pub struct MeanAveragePrecision {
    outputs: usize,
    /// Rows `(image, x, y, w, h, class, crowd)` of this worker's ground truth.
    truth: Vec<Tensor>,
    /// Rows `(image, x, y, w, h, class, score)` of this worker's detections.
    detections: Vec<Tensor>,
    images: i64,
}

impl FromConfig for MeanAveragePrecision {
    type Config = NoConfig;
    fn from_config(_: NoConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), None)?;
        let outputs = ctx.outputs.len();
        if !(1..=6).contains(&outputs) {
            return Err(Error::config(
                "outputs",
                format!("expected 1 to 6 key(s) (mAP, AP50, AP75, APs, APm, APl), got {outputs}"),
            ));
        }
        Ok(Self {
            outputs,
            truth: Vec::new(),
            detections: Vec::new(),
            images: 0,
        })
    }
}

/// The real rows of `boxes` `[N, R, width]` as `[rows, 1 + width]` with the image index first
/// (`first` plus the row's position in the batch).
fn rows(boxes: &Tensor, width: i64, first: i64, what: &str) -> Result<Tensor> {
    let size = boxes.size();
    if size.len() != 3 || size[2] != width {
        return Err(Error::msg(format!(
            "MeanAveragePrecision: {what} must be [N, rows, {width}], got shape {size:?}"
        )));
    }
    let boxes = boxes.f_to_kind(Kind::Double)?.f_to_device(Device::Cpu)?;
    let (n, r) = (size[0], size[1]);
    let image = Tensor::f_arange(n, (Kind::Double, Device::Cpu))?
        .f_add_scalar(first as f64)?
        .f_reshape([n, 1, 1])?
        .f_expand([n, r, 1], false)?;
    let all = Tensor::f_cat(&[image, boxes], 2)?.f_reshape([-1, width + 1])?;
    let real = all
        .f_select(1, 5)?
        .f_ge(0.0)?
        .f_logical_and(&all.f_select(1, 3)?.f_gt(0.0)?)?
        .f_logical_and(&all.f_select(1, 4)?.f_gt(0.0)?)?;
    Ok(all.f_index_select(0, &real.f_nonzero()?.f_reshape([-1])?)?)
}

/// [`rows`] of ground truth `[N, M, 5]` (no crowds) or `[N, M, 6]` (an `iscrowd` column), as
/// `[rows, 7]` with the crowd flag last.
fn truth_rows(y_true: &Tensor, first: i64) -> Result<Tensor> {
    let size = y_true.size();
    let widened = match size.as_slice() {
        [n, m, 5] => Tensor::f_cat(
            &[
                y_true.f_to_kind(Kind::Double)?.f_to_device(Device::Cpu)?,
                Tensor::f_zeros([*n, *m, 1], (Kind::Double, Device::Cpu))?,
            ],
            2,
        )?,
        [_, _, 6] => y_true.shallow_clone(),
        _ => {
            return Err(Error::msg(format!(
                "MeanAveragePrecision: ground truth must be [N, rows, 5] or [N, rows, 6] (x, y, w, h, class[, iscrowd]), got shape {size:?}"
            )))
        }
    };
    rows(&widened, 6, first, "ground truth")
}

impl Metric for MeanAveragePrecision {
    fn reset(&mut self) {
        self.truth.clear();
        self.detections.clear();
        self.images = 0;
    }

    fn accumulate(&mut self, inputs: &[&Tensor]) -> Result<()> {
        let (y_true, y_pred) = (inputs[0], inputs[1]);
        let n = y_true.size().first().copied().unwrap_or(0);
        if y_pred.size().first() != Some(&n) {
            return Err(Error::msg(format!(
                "MeanAveragePrecision: {n} ground-truth image(s) but predictions {:?}",
                y_pred.size()
            )));
        }
        self.truth.push(truth_rows(y_true, self.images)?);
        self.detections
            .push(rows(y_pred, 6, self.images, "predictions")?);
        self.images += n;
        Ok(())
    }

    fn partial(&self) -> Result<State> {
        if self.truth.is_empty() {
            return Ok(State::empty());
        }
        Ok(State::empty()
            .with_tensor("truth", Tensor::f_cat(&self.truth, 0)?)
            .with_tensor("detections", Tensor::f_cat(&self.detections, 0)?))
    }

    fn reduce(&self, partials: &[State]) -> Result<Vec<Value>> {
        let mut images: BTreeMap<(usize, i64), Image> = BTreeMap::new();
        for (p, partial) in partials.iter().enumerate() {
            let (Some(truth), Some(dets)) = (partial.tensor("truth"), partial.tensor("detections"))
            else {
                continue;
            };
            let truth = Vec::<f64>::try_from(&truth.f_reshape([-1])?)?;
            for row in truth.chunks_exact(7) {
                let image = images.entry((p, row[0] as i64)).or_default();
                let b = [row[1], row[2], row[3], row[4]];
                image.truth.push((b, row[5] as i64, row[6] != 0.0));
            }
            let dets = Vec::<f64>::try_from(&dets.f_reshape([-1])?)?;
            for row in dets.chunks_exact(7) {
                let image = images.entry((p, row[0] as i64)).or_default();
                let b = [row[1], row[2], row[3], row[4]];
                image.detections.push((b, row[5] as i64, row[6]));
            }
        }
        let images: Vec<Image> = images.into_values().collect();
        let values = mean_average_precision(&images);
        Ok(values[..self.outputs]
            .iter()
            .map(|&v| Value::Float(v))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::Tensor;
    use fe_plugin_api::testing;

    use crate::test_support::{same_for_any_split, scalar};

    /// Two images a batch: one ground-truth box each (a padding row after it), detected
    /// exactly, plus a padding detection (class -1) and a zero-width one.
    fn batch(offset: f32) -> Vec<Tensor> {
        let gt = [
            offset, 0.0, 10.0, 10.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, //
            offset, 5.0, 4.0, 8.0, 1.0, 0.0, 0.0, 0.0, 0.0, -1.0,
        ];
        let pred = [
            offset, 0.0, 10.0, 10.0, 0.0, 0.9, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, //
            offset, 5.0, 4.0, 8.0, 1.0, 0.8, 3.0, 3.0, 0.0, 5.0, 1.0, 0.99,
        ];
        vec![
            Tensor::from_slice(&gt).reshape([2, 2, 5]),
            Tensor::from_slice(&pred).reshape([2, 2, 6]),
        ]
    }

    #[test]
    fn padding_rows_are_ignored_and_any_split_agrees() {
        let batches: Vec<_> = (0..3).map(|i| batch(i as f32 * 20.0)).collect();
        let mut metric =
            testing::trace("MeanAveragePrecision", "", &["gt", "pred"], &["m", "a"]).unwrap();
        let values = same_for_any_split(&mut metric, &batches);
        // pycocotools' precision tp / (tp + fp + eps): 1 up to the eps.
        assert!((scalar(&values[0]) - 1.0).abs() < 1e-15);
        assert!((scalar(&values[1]) - 1.0).abs() < 1e-15);
    }

    #[test]
    fn wrong_shapes_name_the_input() {
        let mut metric =
            testing::trace("MeanAveragePrecision", "", &["gt", "pred"], &["m"]).unwrap();
        let bad = vec![vec![
            Tensor::zeros(
                [2, 5],
                (
                    fe_plugin_api::tch::Kind::Float,
                    fe_plugin_api::tch::Device::Cpu,
                ),
            ),
            batch(0.0)[1].shallow_clone(),
        ]];
        let err = metric
            .metric_epoch(&bad, &[vec![0]])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ground truth must be [N, rows, 5] or [N, rows, 6]"),
            "{err}"
        );
    }
}
