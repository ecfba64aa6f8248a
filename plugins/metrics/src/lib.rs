//! Metrics for fe-host, ported from FastEstimator's metric traces: `Accuracy`, `Precision`,
//! `Recall`, `F1Score`, `ConfusionMatrix`, `MCC` and `Dice`; and `ROCAUC` and
//! `ExpectedCalibrationError` (scikit-learn's and torchmetrics' definitions); and `BleuScore`
//! (NLTK's corpus BLEU with FastEstimator's smoothing); `MeanAveragePrecision` (pycocotools'
//! box mAP); and `LabelTracker`, FastEstimator's per-label summary of a per-sample value.
//!
//! Every metric accumulates per batch into an additive partial state (confusion counts, or
//! per-channel fixed-point sums for Dice) and reduces the partial states of all workers
//! (Determined's MetricReducer), so its value is identical for any split of the batches.
//! See the crate's README.md for inputs, outputs and configuration.

#![warn(missing_docs)]

use fe_plugin_api::{inventory, Field, Registration};

mod accuracy;
mod bleu;
mod calibration;
mod classes;
mod coco;
mod confusion;
mod confusion_matrix;
mod detection;
mod dice;
mod label_tracker;
mod mcc;
mod roc_auc;
mod scores;
#[cfg(test)]
mod test_support;

pub use accuracy::Accuracy;
pub use bleu::{BleuConfig, BleuScore};
pub use calibration::{CalibrationConfig, CalibrationError, Norm};
pub use confusion_matrix::{ConfusionMatrix, ConfusionMatrixConfig, Normalize};
pub use detection::MeanAveragePrecision;
pub use dice::{Dice, DiceConfig, Off, Threshold};
pub use label_tracker::{Bounds, LabelTracker, LabelTrackerConfig};
pub use mcc::{Mcc, MccConfig};
pub use roc_auc::{AucAverage, RocAuc, RocAucConfig};
pub use scores::{
    Average, ClassScore, F1Measure, F1Score, Precision, PrecisionScore, Recall, RecallScore, Score,
    ScoreConfig,
};

/// The configuration `Precision`, `Recall` and `F1Score` share ([`ScoreConfig`]).
const SCORE_FIELDS: &[Field] = &[
    Field::optional(
        "average",
        "\"auto\" | \"binary\" | \"none\" | \"macro\" | \"micro\" | \"weighted\"",
        "\"auto\"",
        "How classes combine (sklearn semantics)",
    ),
    Field::optional(
        "num_classes",
        "integer",
        "C of [N, C] predictions, else 2",
        "Number of classes; labels lie in 0..num_classes",
    ),
    Field::optional(
        "pos_label",
        "integer",
        "1",
        "The class reported by average = \"binary\"",
    ),
    Field::optional(
        "threshold",
        "float",
        "0.5",
        "One value per sample: class 1 when above this",
    ),
    Field::optional(
        "zero_division",
        "0 | 1 | nan",
        "0",
        "Value of an undefined ratio; nan leaves it out of averages",
    ),
];

inventory::submit! {
    Registration::metric::<Accuracy>(
        "Accuracy",
        "Fraction of samples whose predicted class (argmax, or >0.5 for one output) equals the label",
    )
    .default_mode("eval,test")
    .fields(&[])
}

inventory::submit! {
    Registration::metric::<Precision>(
        "Precision",
        "Precision tp/(tp+fp): binary, per class, or macro/micro/weighted average (sklearn semantics)",
    )
    .default_mode("eval,test")
    .fields(SCORE_FIELDS)
}

inventory::submit! {
    Registration::metric::<Recall>(
        "Recall",
        "Recall tp/(tp+fn): binary, per class, or macro/micro/weighted average (sklearn semantics)",
    )
    .default_mode("eval,test")
    .fields(SCORE_FIELDS)
}

inventory::submit! {
    Registration::metric::<F1Score>(
        "F1Score",
        "F1 2tp/(2tp+fp+fn): binary, per class, or macro/micro/weighted average (sklearn semantics)",
    )
    .default_mode("eval,test")
    .fields(SCORE_FIELDS)
}

inventory::submit! {
    Registration::metric::<ConfusionMatrix>(
        "ConfusionMatrix",
        "Confusion matrix [num_classes, num_classes]: rows true classes, columns predictions",
    )
    .default_mode("eval,test")
    .fields(&[
        Field::optional("num_classes", "integer", "C of [N, C] predictions, else 2", "Number of classes; labels lie in 0..num_classes"),
        Field::optional("threshold", "float", "0.5", "One value per sample: class 1 when above this"),
        Field::optional("normalize", "true | \"true\" | \"pred\" | \"all\"", "none (counts)", "Fractions over true classes, predictions or everything"),
    ])
}

inventory::submit! {
    Registration::metric::<Mcc>(
        "MCC",
        "Matthews correlation coefficient (multiclass R_K), in [-1, 1]",
    )
    .default_mode("eval,test")
    .fields(&[
        Field::optional("num_classes", "integer", "C of [N, C] predictions, else 2", "Number of classes; labels lie in 0..num_classes"),
        Field::optional("threshold", "float", "0.5", "One value per sample: class 1 when above this"),
    ])
}

inventory::submit! {
    Registration::metric::<Dice>(
        "Dice",
        "Mean Dice score of [N, C, ...] masks: per channel over samples, then over channels",
    )
    .default_mode("eval,test")
    .fields(&[
        Field::optional("threshold", "float | \"none\"", "0.5", "Predictions above this are mask; \"none\" skips binarisation"),
        Field::optional("mask_overlap", "bool", "true", "A pixel may belong to several channels; false: only the highest keeps its value"),
        Field::optional("exclude_channels", "[integer]", "[]", "Channels left out of the mean (NaN per channel)"),
    ])
}

inventory::submit! {
    Registration::metric::<RocAuc>(
        "ROCAUC",
        "Area under the ROC curve: binary, or one-vs-rest per class and their macro mean (sklearn)",
    )
    .default_mode("eval,test")
    .fields(&[
        Field::optional("average", "\"macro\" | \"none\"", "\"macro\"", "Mean over classes with a defined AUC, or the per-class tensor"),
    ])
}

inventory::submit! {
    Registration::metric::<CalibrationError>(
        "ExpectedCalibrationError",
        "Calibration error of probabilities over equal-width confidence bins (torchmetrics' ECE)",
    )
    .default_mode("eval,test")
    .fields(&[
        Field::optional("n_bins", "integer", "15", "Equal-width bins over [0, 1]; a confidence of 1 has its own"),
        Field::optional("norm", "\"l1\" | \"l2\" | \"max\"", "\"l1\"", "ECE, root-mean-square or maximum calibration error"),
    ])
}

inventory::submit! {
    Registration::metric::<BleuScore>(
        "BleuScore",
        "Corpus BLEU of token sequences [N, L] (0 = padding), NLTK's corpus_bleu with smoothing method 4",
    )
    .default_mode("eval,test")
    .fields(&[
        Field::optional("n_gram", "integer", "4", "Largest n-gram order, uniformly weighted (BLEU-4)"),
    ])
}

inventory::submit! {
    Registration::metric::<LabelTracker>(
        "LabelTracker",
        "Per-sample values (e.g. an unreduced loss) by label: mean ± std or min/max per label, a summary graph per label over epochs",
    )
    .default_mode("eval")
    .fields(&[
        Field::optional("label_mapping", "{name = integer}", "every label seen", "Only these labels, shown under these names"),
        Field::optional("bounds", "\"std\" | \"range\" | [both] | \"none\"", "\"std\"", "Mean ± population std, and/or min and max per label"),
    ])
}

inventory::submit! {
    Registration::metric::<MeanAveragePrecision>(
        "MeanAveragePrecision",
        "COCO box mAP@[.5:.95] (and AP50, AP75, APs, APm, APl) of [N, K, 6] detections against [N, M, 5|6] ground truth (iscrowd optional; pycocotools)",
    )
    .default_mode("eval,test")
    .fields(&[])
}

fe_plugin_api::export_plugin!();
