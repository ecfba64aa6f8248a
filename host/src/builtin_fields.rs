//! The configuration fields of fe-host's own components, declared as plugins declare theirs
//! (`fe_plugin_api::Field`), so that `fe-host plugins show NAME` documents a built-in the way it
//! documents a plugin component. Keys the host takes out of every table (`op`/`trace`,
//! `inputs`, `outputs`, `mode`, `ds_id`) are not listed, as for plugins. Keep each list in step
//! with the config struct named beside it: a test checks every built-in has one.

use fe_plugin_api::{ComponentKind, Field};

const MODEL_OP: &[Field] = &[
    Field::required("model", "string", "The model to run (`[[models]] name`)"),
    Field::optional("intermediate_layers", "[string]", "[]", "Layers to expose too, written after the model's outputs in `outputs`"),
    Field::optional("trainable", "bool", "true", "false runs the model in inference behaviour (dropout off, batch-norm frozen) even in training"),
];

const UPDATE_OP: &[Field] = &[
    Field::required("model", "string", "The model to update"),
    Field::required("loss", "string", "The key of its loss, mean-reduced before differentiating; with `gradients`, the loss logged"),
    Field::optional("gradients", "string | [string]", "none", "Gradients to apply instead: one key flattened, or one per trainable parameter (GradientOp's outputs)"),
    Field::optional("merge_grad", "integer", "1", "Accumulate the gradients of this many calls and apply their average"),
    Field::optional("defer", "bool", "false", "Apply the update after every op of the step has run (trailing updates always are)"),
    Field::optional("clip_norm", "float", "none", "Scale the gradients to this total norm at most (torch.nn.utils.clip_grad_norm_)"),
    Field::optional("norm_type", "float", "2", "The p of clip_norm's p-norm; inf for the largest magnitude"),
    Field::optional("clip_value", "float", "none", "Clamp every gradient element into [-clip_value, clip_value] (clip_grad_value_); not with clip_norm"),
];

const GRADIENT_OP: &[Field] = &[
    Field::required("finals", "string", "The key to differentiate (its sum); `inputs` are the keys to differentiate with respect to"),
    Field::optional("model", "string", "none", "Differentiate with respect to this model's trainable parameters instead of `inputs`: one output per parameter, or one flattened"),
];

const L2_REGULARIZATION: &[Field] = &[
    Field::required(
        "model",
        "string",
        "The model whose trainable weights are penalised",
    ),
    Field::optional(
        "beta",
        "float",
        "0.01",
        "Weight of the penalty beta * sum(w^2) / 2",
    ),
];

const NO_FIELDS: &[Field] = &[];

/// The op `Sometimes` and `Repeat` wrap.
const WRAP: Field = Field::required(
    "wrap",
    "table",
    "The wrapped op, written as a [[...ops]] entry",
);

/// What both model savers save, and where.
const SAVED_MODEL: Field = Field::required("model", "string", "The model to save");
const SAVE_DIR: Field = Field::required(
    "save_dir",
    "path",
    "Where to save it (relative to the manifest, or moved into the run's version)",
);

const SOMETIMES: &[Field] = &[
    Field::optional(
        "prob",
        "float",
        "0.5",
        "Probability of running the wrapped op in a step",
    ),
    WRAP,
];

const ONE_OF_OR_FUSE: &[Field] = &[Field::required(
    "ops",
    "[table]",
    "The wrapped ops, each written as a [[...ops]] entry",
)];

const REPEAT: &[Field] = &[
    WRAP,
    Field::optional("repeat", "integer", "none", "Run it this many times (or use `while`)"),
    Field::optional("while", "{ key, compare, value, reduce }", "none", "Keep running while `reduce`(key) `compare` value holds (lt le gt ge eq ne; reduce sum mean min max any all, default max)"),
    Field::optional("max_iter", "integer", "none", "Upper bound on runs with `while`"),
];

const BATCH: &[Field] = &[
    Field::optional(
        "batch_size",
        "integer",
        "[pipeline] batch_size",
        "Samples per batch",
    ),
    Field::optional(
        "drop_last",
        "bool",
        "[pipeline] drop_last",
        "Drop a last batch shorter than the others",
    ),
    Field::optional(
        "pad_value",
        "float",
        "[pipeline] pad_value",
        "Pad samples of different shapes to the largest with this value",
    ),
];

const IDX: &[Field] = &[Field::required(
    "files",
    "{ key = path }",
    "One IDX file per key (relative to the manifest)",
)];

const CSV: &[Field] = &[
    Field::required("file", "path", "The CSV file (relative to the manifest)"),
    Field::optional(
        "columns",
        "[string]",
        "every column",
        "Columns to read, in key order",
    ),
    Field::optional(
        "delimiter",
        "string",
        "\",\"",
        "Field separator: one ASCII character",
    ),
    Field::optional(
        "header",
        "bool",
        "true",
        "The first line names the columns; without one they are `0`, `1`, ...",
    ),
    Field::optional(
        "paths",
        "[string]",
        "[]",
        "Columns holding file paths relative to the CSV file",
    ),
];

const NPY: &[Field] = &[Field::required(
    "files",
    "{ key = path }",
    "One .npy file per key (relative to the manifest), memory-mapped",
)];

const NPZ: &[Field] = &[
    Field::required(
        "file",
        "path",
        "The .npz archive (relative to the manifest)",
    ),
    Field::optional(
        "keys",
        "{ key = array }",
        "every array, by its name",
        "Key -> array name in the archive",
    ),
];

const IMAGE_FOLDER: &[Field] = &[
    Field::required(
        "dir",
        "path",
        "The root directory, one subdirectory per class (relative to the manifest)",
    ),
    Field::optional(
        "file_extension",
        "string",
        "none",
        "Only files whose names end with this (\".png\")",
    ),
    Field::optional(
        "keys",
        "[string; 2]",
        "[\"x\", \"y\"]",
        "The keys of the file path and of the label",
    ),
    Field::optional(
        "classes",
        "[string]",
        "sorted directory names",
        "Class names in label order; a directory not listed is an error",
    ),
];

const WEBDATASET: &[Field] = &[
    Field::required(
        "urls",
        "string | [string]",
        "Tar shards with WebDataset's brace expansion (\"s-{000000..000039}.tar\"): local paths (relative to the manifest), http(s):// URLs or pipe:COMMAND",
    ),
    Field::optional(
        "shuffle_buffer",
        "integer",
        "1000",
        "Samples in the shuffle buffer of a shuffled epoch (0 or 1: shard order only)",
    ),
    Field::optional(
        "keys",
        "{ extension = key }",
        "each extension its own key",
        "Renames extensions to keys ({ jpg = \"x\", cls = \"y\" })",
    ),
    Field::optional(
        "stream_cache",
        "integer",
        "shuffle_buffer + 1024",
        "Samples a worker keeps per http/pipe shard it reads forward",
    ),
];

const TABLE: &[Field] = &[
    Field::required(
        "path",
        "path | [path]",
        "A file, a directory (its .parquet / .arrow files, by name) or a glob in the file name (\"data/train-*.parquet\"); relative to the manifest",
    ),
    Field::optional(
        "columns",
        "[string] | { column = key }",
        "every column",
        "Columns to read: names (each its own key, in this order) or renamed to keys",
    ),
];

const LR_SCHEDULER: &[Field] = &[
    Field::required("model", "string", "The model whose learning rate follows the schedule"),
    Field::required("lr", "{ schedule = ..., by = \"step\" | \"epoch\", ... }", "cosine_decay, step_decay, exponential or linear_warmup (see the README); the model's only learning-rate source"),
];

const REDUCE_LR: &[Field] = &[
    Field::required(
        "model",
        "string",
        "The model whose learning rate is reduced; its optimizer's `lr` must be fixed",
    ),
    Field::optional(
        "metric",
        "string",
        "the model's loss",
        "The monitored value; required when several losses train the model",
    ),
    Field::optional(
        "patience",
        "integer",
        "10",
        "Evaluations without improvement before reducing",
    ),
    Field::optional("factor", "float", "0.1", "Multiplies the rate; in (0, 1)"),
    Field::optional("min_lr", "float", "1e-6", "The rate never goes below this"),
    Field::optional(
        "best_mode",
        "\"min\" | \"max\"",
        "\"min\"",
        "Whether smaller or larger values are better",
    ),
    Field::optional(
        "min_delta",
        "float",
        "0.0",
        "Improvements smaller than this do not count",
    ),
];

const EARLY_STOPPING: &[Field] = &[
    Field::optional(
        "monitor",
        "string",
        "the loss the UpdateOps train on",
        "The value watched (with several losses, name one)",
    ),
    Field::optional(
        "min_delta",
        "float",
        "0.0",
        "Changes smaller than this are no improvement",
    ),
    Field::optional(
        "patience",
        "integer",
        "0",
        "Epochs without improvement before stopping",
    ),
    Field::optional(
        "compare",
        "\"min\" | \"max\"",
        "\"min\"",
        "Whether smaller or larger values are better",
    ),
    Field::optional(
        "baseline",
        "float",
        "none",
        "A value the monitor must improve on from the start",
    ),
];

const TERMINATE_ON_NAN: &[Field] = &[Field::optional(
    "monitor_names",
    "[string]",
    "every loss",
    "Keys to watch: losses and trace outputs",
)];

const BEST_MODEL_SAVER: &[Field] = &[
    SAVED_MODEL,
    SAVE_DIR,
    Field::optional(
        "metric",
        "string",
        "the model's loss",
        "The evaluation value to rank by",
    ),
    Field::optional(
        "save_best_mode",
        "\"min\" | \"max\"",
        "\"min\"",
        "Whether smaller or larger values are better",
    ),
    Field::optional(
        "load_best_final",
        "bool",
        "false",
        "Load the best weights back into the model when training ends",
    ),
];

const MODEL_SAVER: &[Field] = &[
    SAVED_MODEL,
    SAVE_DIR,
    Field::optional("frequency", "integer", "1", "Save every N-th epoch"),
    Field::optional(
        "max_to_keep",
        "integer",
        "every file",
        "Keep only the N newest files",
    ),
];

const CSV_LOGGER: &[Field] = &[
    Field::required(
        "filename",
        "path",
        "The log file (relative to the manifest)",
    ),
    Field::optional(
        "monitor_names",
        "[string]",
        "everything logged",
        "Only these keys",
    ),
];

const JSONL_LOGGER: &[Field] = &[
    Field::required(
        "filename",
        "path",
        "The log file (relative to the manifest)",
    ),
    Field::optional(
        "monitor_names",
        "[string]",
        "everything logged",
        "Only these keys",
    ),
    Field::optional(
        "instance_id_key",
        "string",
        "none",
        "The batch key naming each sample, for a row per sample",
    ),
    Field::optional(
        "instance_keys",
        "[string]",
        "[]",
        "Per-sample batch keys written in those rows",
    ),
];

const TENSORBOARD: &[Field] = &[Field::required(
    "log_dir",
    "path",
    "The event directory (relative to the manifest); each mode writes into a subdirectory",
)];

/// The fields of the built-in `name` of `kind`; `None` for a name fe-host does not provide.
pub fn fields(kind: ComponentKind, name: &str) -> Option<&'static [Field]> {
    use ComponentKind::{Dataset, NumpyOp, TensorOp, Trace};
    Some(match (kind, name) {
        (TensorOp, "ModelOp") => MODEL_OP,
        (TensorOp, "UpdateOp") => UPDATE_OP,
        (TensorOp, "GradientOp") => GRADIENT_OP,
        (TensorOp, "L2Regularization" | "L2Regularizaton") => L2_REGULARIZATION,
        (TensorOp | NumpyOp, "Delete") => NO_FIELDS,
        (TensorOp | NumpyOp, "Sometimes") => SOMETIMES,
        (TensorOp | NumpyOp, "OneOf" | "Fuse") => ONE_OF_OR_FUSE,
        (TensorOp | NumpyOp, "Repeat") => REPEAT,
        (NumpyOp, "Batch") => BATCH,
        (Dataset, "idx") => IDX,
        (Dataset, "csv") => CSV,
        (Dataset, "npy") => NPY,
        (Dataset, "npz") => NPZ,
        (Dataset, "image_folder") => IMAGE_FOLDER,
        (Dataset, "webdataset") => WEBDATASET,
        (Dataset, "parquet" | "arrow") => TABLE,
        (Trace, "LRScheduler") => LR_SCHEDULER,
        (Trace, "ReduceLROnPlateau") => REDUCE_LR,
        (Trace, "EarlyStopping") => EARLY_STOPPING,
        (Trace, "TerminateOnNaN") => TERMINATE_ON_NAN,
        (Trace, "Timer") => NO_FIELDS,
        (Trace, "BestModelSaver") => BEST_MODEL_SAVER,
        (Trace, "ModelSaver") => MODEL_SAVER,
        (Trace, "CSVLogger") => CSV_LOGGER,
        (Trace, "JSONLLogger") => JSONL_LOGGER,
        (Trace, "TensorBoard") => TENSORBOARD,
        _ => return None,
    })
}
