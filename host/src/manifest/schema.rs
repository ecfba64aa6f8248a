//! The manifest as written: what serde reads before validation.
//!
//! Component tables (ops, traces, models, datasets) stay as TOML tables here: the host takes
//! the keys it owns (`op`, `inputs`, `outputs`, `mode`, `ds_id`, ...) and hands the rest to the
//! component, whose plugin deserializes and checks it.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The whole manifest.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawManifest {
    /// Run-wide settings.
    #[serde(default)]
    pub run: RawRun,
    /// Where plugins come from.
    #[serde(default)]
    pub plugins: RawPlugins,
    /// Data in, per mode.
    pub pipeline: RawPipeline,
    /// Models and their optimizers.
    #[serde(default)]
    pub models: Vec<toml::Table>,
    /// The network: ops, post-processing, slicers.
    #[serde(default)]
    pub network: RawNetwork,
    /// Traces: metrics and callbacks.
    #[serde(default)]
    pub traces: Vec<toml::Table>,
    /// When checkpoints are written and which are kept.
    #[serde(default)]
    pub checkpoint: Option<RawCheckpoint>,
}

/// `[checkpoint]`
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawCheckpoint {
    /// Where checkpoints go, relative to the manifest (default `checkpoints`).
    #[serde(default)]
    pub dir: Option<String>,
    /// Save at the end of every N-th epoch (and of the last one).
    #[serde(default)]
    pub every_epochs: Option<u32>,
    /// Save after every N-th training step, mid-epoch included.
    #[serde(default)]
    pub every_steps: Option<u64>,
    /// Keep the N newest checkpoints.
    #[serde(default)]
    pub keep_last: Option<u32>,
    /// Keep the N best checkpoints by `monitor`.
    #[serde(default)]
    pub keep_best: Option<u32>,
    /// The logged evaluation value `keep_best` ranks by.
    #[serde(default)]
    pub monitor: Option<String>,
    /// `min` (default) or `max`: which `monitor` values are better.
    #[serde(default)]
    pub best_mode: Option<String>,
    /// Write checkpoints on a background thread while training continues (default `true`).
    #[serde(default)]
    pub background: Option<bool>,
}

/// `[run]`
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawRun {
    /// Number of training epochs.
    #[serde(default = "one")]
    pub epochs: u32,
    /// Seed for everything random (data order, initialisation, augmentation).
    #[serde(default)]
    pub seed: u64,
    /// `auto`, `cpu`, `cuda` or `cuda:N`; the command line overrides it.
    #[serde(default)]
    pub device: Option<String>,
    /// libtorch intra-op threads; 0 or absent means one per core.
    #[serde(default)]
    pub threads: Option<u32>,
    /// Log training every N steps; 0 turns training logs off.
    #[serde(default = "hundred")]
    pub log_steps: u64,
    /// Cut short or extend each training epoch to N steps.
    #[serde(default)]
    pub train_steps_per_epoch: Option<u64>,
    /// Cut short or extend each evaluation epoch to N steps.
    #[serde(default)]
    pub eval_steps_per_epoch: Option<u64>,
    /// Run one batch of every mode and dataset through the network before training (updates
    /// off, no side effects), so a broken network fails in the first second.
    #[serde(default = "yes_run")]
    pub warmup: bool,
    /// libtorch's deterministic algorithms (an op without one fails, naming itself) and
    /// deterministic cuDNN.
    #[serde(default)]
    pub deterministic: bool,
    /// cuDNN autotuning of convolutions (CUDA; excludes `deterministic`).
    #[serde(default)]
    pub cudnn_benchmark: bool,
    /// Evaluation batches after which a progress line is printed (FastEstimator's
    /// `eval_log_steps`), e.g. `[100, 200]`.
    #[serde(default)]
    pub eval_log_steps: Vec<u64>,
    /// Write `log.jsonl` (a row per epoch and mode) and, at the end, `metrics.svg` here.
    #[serde(default)]
    pub log_dir: Option<String>,
    /// How evaluation losses are averaged: `per_sample` (default: every sample weighs the
    /// same) or `per_batch` (FastEstimator's mean of batch means).
    #[serde(default)]
    pub eval_loss: EvalLoss,
    /// Network keys logged besides the losses the UpdateOps train on (FastEstimator's
    /// Estimator `monitor_names`): averaged over each evaluation epoch, and printed with the
    /// training loss every `log_steps`.
    #[serde(default)]
    pub monitor_names: Vec<String>,
    /// Seconds a data-parallel rank waits for the others (rendezvous and every collective)
    /// before giving up, naming what it waited for; torch.distributed's 1800 when absent.
    #[serde(default)]
    pub process_group_timeout: Option<u64>,
    /// Data parallel: before every collective the ranks compare what it is and where in the
    /// code it was issued, and all fail at the first difference, naming both call sites
    /// (also turned on by `FE_CHECK_COLLECTIVES=1`).
    #[serde(default)]
    pub check_collectives: bool,
    /// `never` (default): start fresh unless `--resume` says otherwise; `auto`: continue from
    /// the newest checkpoint that verifies when there is one (what a job restarted by
    /// `torchrun --max-restarts` or a scheduler needs), else start fresh.
    #[serde(default)]
    pub resume: Resume,
}

/// `run.resume`: whether a run continues from its checkpoints by itself.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Resume {
    /// Start fresh unless `--resume` is given.
    #[default]
    Never,
    /// Continue from the newest valid checkpoint when there is one.
    Auto,
}

/// How evaluation losses are averaged over an epoch.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum EvalLoss {
    /// Every sample weighs the same (a short last batch counts for its size).
    #[default]
    PerSample,
    /// Every batch weighs the same (FastEstimator).
    PerBatch,
}

fn yes_run() -> bool {
    true
}

impl Default for RawRun {
    fn default() -> Self {
        Self {
            epochs: 1,
            seed: 0,
            device: None,
            threads: None,
            log_steps: 100,
            train_steps_per_epoch: None,
            eval_steps_per_epoch: None,
            warmup: true,
            deterministic: false,
            cudnn_benchmark: false,
            eval_log_steps: Vec::new(),
            log_dir: None,
            eval_loss: EvalLoss::PerSample,
            monitor_names: Vec::new(),
            process_group_timeout: None,
            check_collectives: false,
            resume: Resume::Never,
        }
    }
}

fn one() -> u32 {
    1
}

fn hundred() -> u64 {
    100
}

/// `[plugins]`
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct RawPlugins {
    /// Plugin files or directories to search first, relative to the manifest.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Expected sha256 of plugin files, by file name; a mismatch refuses the file.
    #[serde(default)]
    pub sha256: BTreeMap<String, String>,
}

/// `[pipeline]`
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawPipeline {
    /// Samples per batch (schedulable).
    pub batch_size: toml::Value,
    /// Shuffle training data each epoch (default); evaluation data is never shuffled.
    #[serde(default = "yes")]
    pub shuffle: bool,
    /// Drop the last, incomplete batch of an epoch.
    #[serde(default)]
    pub drop_last: bool,
    /// Worker threads for per-sample ops; absent means one per core.
    #[serde(default)]
    pub workers: Option<usize>,
    /// Batches prepared ahead of the network, per worker.
    #[serde(default = "two")]
    pub prefetch: usize,
    /// Collate batches into page-locked memory when training on CUDA (default: yes).
    #[serde(default)]
    pub pin_memory: Option<bool>,
    /// Cache the leading deterministic ops' outputs: `true` (the user cache directory) or a
    /// directory (relative to the manifest).
    #[serde(default)]
    pub cache: Option<toml::Value>,
    /// Datasets by mode: a table, or an array of tables each with a `ds_id`.
    #[serde(default)]
    pub data: BTreeMap<String, toml::Value>,
    /// Per-sample ops, in order.
    #[serde(default)]
    pub ops: Vec<toml::Table>,
}

fn yes() -> bool {
    true
}

fn two() -> usize {
    2
}

/// `[network]`
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct RawNetwork {
    /// Tensor ops, in order.
    #[serde(default)]
    pub ops: Vec<toml::Table>,
    /// Batch-level numpy ops run on the CPU after the tensor ops.
    #[serde(default)]
    pub postprocessing: Vec<toml::Table>,
    /// Slicers that cut each batch into minibatches.
    #[serde(default)]
    pub slicers: Vec<toml::Table>,
}
