//! The command line's flags, as data (clap).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::{
    BuildPluginArgs, CheckpointCommand, EvaluateArgs, LogsArgs, NewPluginArgs, PipelineArgs,
    SummaryArgs,
};
use crate::error::{Error, Result};
use crate::manifest::Manifest;

/// Trains and evaluates deep-learning models described by a TOML manifest; every op, model and
/// metric comes from a plugin.
///
/// Exit codes: 0 success; 1 the run failed (an op, model or trace failed or panicked); 2 bad
/// usage or an invalid manifest; 3 plugin problems; 4 the device is unavailable; 5 bad data;
/// 6 a bad checkpoint; 75 stopped by Ctrl-C or SIGTERM after saving a checkpoint (continue
/// with --resume); 130/143 stopped at once by a second SIGINT/SIGTERM; 70 an internal error.
/// `run --nproc N` and `evaluate --nproc N` exit with the code of the first rank that failed.
#[derive(Parser, Debug)]
#[command(name = "fe-host", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train (and evaluate, and test) what a manifest describes.
    Run(RunArgs),
    /// Print the resolved plan of a manifest: per signature epoch and mode, the data, batch
    /// size, pipeline ops, network ops with their keys, traces and optimizers in force.
    Render(RenderArgs),
    /// Run the network over a dataset (in `infer` mode by default) and write what it produces
    /// to a .safetensors file (FastEstimator's `Network.transform`).
    Transform(TransformArgs),
    /// Run a trained network in `infer` mode over data (IDX, NPY/NPZ, CSV or an image folder)
    /// and write its predictions as CSV (optionally the top-k classes), NPY or safetensors.
    Predict(PredictArgs),
    /// Every loss and metric of a trained model on the eval or test data (or `--input`), per
    /// dataset, without training: Keras' `evaluate`, Lightning's `trainer.test`.
    Evaluate(EvaluateArgs),
    /// Write trained models for other tools: safetensors named as the PyTorch definition, a
    /// JSON model card, TorchScript (`--format torchscript`, the default) and ONNX
    /// (`--format onnx`).
    Export(ExportArgs),
    /// Per model: its layers with their parameter shapes, counts and output shapes, the
    /// trainable and total parameter counts and the size in MB (Keras's `summary()`).
    Summary(SummaryArgs),
    /// Show a few batches of the data pipeline (keys, shapes, dtypes, value ranges), or with
    /// `--benchmark` measure its samples/s overall and op by op.
    Pipeline(PipelineArgs),
    /// Inspect plugins.
    #[command(subcommand)]
    Plugins(PluginsCommand),
    /// Generate a dataset.
    #[command(subcommand)]
    Datagen(DatagenCommand),
    /// List the devices libtorch can use.
    Devices,
    /// Inspect checkpoints.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
    /// Plot and compare runs from their logs (FastEstimator's `fastestimator logs`): every
    /// logged value against steps, one panel per key, one line per run and mode.
    Logs(LogsArgs),
    /// Create something new.
    #[command(subcommand)]
    New(NewCommand),
}

/// `fe-host new ...`
#[derive(Subcommand, Debug)]
pub enum NewCommand {
    /// A plugin crate that builds outside this repository: one component of the chosen kind
    /// with a unit test, the libtorch this fe-host uses, and a README.
    Plugin(NewPluginArgs),
}

/// `--set KEY=VALUE` overrides of manifest values.
#[derive(Args, Debug, Clone, Default)]
pub struct OverrideArgs {
    /// Override a manifest value (repeatable): `run.epochs=5`,
    /// `models.lenet.optimizer.lr=0.01` (an array entry by its `name`), `network.ops[1].inputs=["x"]`
    /// (by index). The value is TOML; a plain word is a string.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

impl RunArgs {
    /// The manifest file named, or the one `--again`'s record names.
    pub fn manifest_path(&self) -> PathBuf {
        match (&self.manifest, &self.recorded) {
            (Some(path), _) => path.clone(),
            (None, Some(recorded)) => recorded.record.manifest.file.clone(),
            (None, None) => PathBuf::new(),
        }
    }
}

impl OverrideArgs {
    /// Reads the manifest at `path` with these overrides applied.
    pub fn load(&self, path: &std::path::Path) -> Result<Manifest> {
        let overrides = self
            .set
            .iter()
            .map(|spec| crate::manifest::Override::parse(spec).map_err(Error::Usage))
            .collect::<Result<Vec<_>>>()?;
        Manifest::load_with(path, &overrides)
    }
}

/// Where to find plugins besides the manifest's `[plugins] paths`.
#[derive(Args, Debug, Clone, Default)]
pub struct PluginArgs {
    /// A plugin file or directory to search (repeatable; before FE_PLUGIN_PATH and the
    /// executable's directory).
    #[arg(long = "plugin-dir", value_name = "PATH")]
    pub plugin_dirs: Vec<PathBuf>,
}

/// `fe-host run`
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("continues").args(["resume", "again"]).multiple(true)))]
pub struct RunArgs {
    /// The manifest.
    #[arg(required_unless_present = "again")]
    pub manifest: Option<PathBuf>,
    /// Run a recorded run again from its record alone: a version directory
    /// (`runs/lenet/version_3`) holding `record.json` and `manifest.toml`. Writes a new
    /// version; refuses a plugin or data file that changed since, unless --allow-changes.
    /// With `--resume`, continues the newest version of that root (`--epochs` to train longer).
    #[arg(long, value_name = "VERSION_DIR", conflicts_with_all = ["manifest", "set", "smoke", "load_weights"])]
    pub again: Option<PathBuf>,
    /// What `--again` read from its record (filled in by the command, not a flag).
    #[arg(skip)]
    pub recorded: Option<Box<super::again::Recorded>>,
    /// auto, cpu, cuda or cuda:N (overrides the manifest's `run.device`).
    #[arg(long)]
    pub device: Option<String>,
    /// libtorch intra-op threads (overrides `run.threads`; default one per core).
    #[arg(long)]
    pub threads: Option<u32>,
    /// Train for this many epochs instead of `run.epochs`.
    #[arg(long)]
    pub epochs: Option<u32>,
    /// Write the logged history (and the graphs traces added, `custom_graphs`; in a
    /// data-parallel run its rank, world size and how gradients were averaged,
    /// `data_parallel`) as JSON to this file when the run ends.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    /// Start from these weights (a directory of `<model>.safetensors`, a checkpoint
    /// directory, or a file for a single model); optimizer state starts fresh.
    #[arg(long, value_name = "PATH", conflicts_with = "resume")]
    pub load_weights: Option<PathBuf>,
    /// Continue from a checkpoint: `latest` (the default) in the manifest's checkpoint
    /// directory, a checkpoint directory, or another checkpoint root; `auto`: from the
    /// newest checkpoint that verifies when there is one, else start fresh (`run.resume`).
    #[arg(long, value_name = "latest|auto|PATH", num_args = 0..=1, default_missing_value = "latest")]
    pub resume: Option<String>,
    /// Resume although the manifest or plugins changed compatibly (more epochs, another log
    /// interval, a rebuilt plugin); other changes are always refused. With `--again`: run
    /// although a recorded plugin or data file changed.
    #[arg(long, requires = "continues")]
    pub allow_changes: bool,
    /// Check the manifest in seconds: one training epoch of 5 steps, 2 evaluation steps, a
    /// checkpoint saved into a temporary directory and loaded back. Everything the run writes
    /// (logs, plots, saved models, TensorBoard events) goes into that directory, removed after.
    #[arg(long, conflicts_with_all = ["resume", "load_weights", "save_weights"])]
    pub smoke: bool,
    /// With `--smoke`: keep its temporary directory and print where it is.
    #[arg(long, requires = "smoke")]
    pub keep: bool,
    /// Write every model's weights into this directory when training ends.
    #[arg(long, value_name = "DIR")]
    pub save_weights: Option<PathBuf>,
    /// Export every model into this new directory when training ends (see `fe-host export`).
    #[arg(long, value_name = "DIR", conflicts_with = "smoke")]
    pub export: Option<PathBuf>,
    /// What `--export` writes besides the weights and the card, as `export --format`
    /// (`torchscript`, `onnx`, `safetensors`; comma-separated). A Python for ONNX is looked
    /// for before training starts.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "torchscript",
        requires = "export"
    )]
    pub export_format: Vec<crate::predict::export::Format>,
    /// Write the per-epoch log (`log.jsonl`) and, at the end, a plot of every logged value
    /// (`metrics.svg`) into this directory (overrides `run.log_dir`).
    #[arg(long, value_name = "DIR", conflicts_with = "smoke")]
    pub log_dir: Option<PathBuf>,
    /// Print only errors.
    #[arg(long, short)]
    pub quiet: bool,
    /// Start N data-parallel ranks on this machine (torchrun's variables, a free loopback
    /// port), each line of their output prefixed `[rank R] `; exits with the code of the first
    /// rank that fails. Several machines: torchrun (see the README).
    #[arg(long, value_name = "N", conflicts_with = "smoke")]
    pub nproc: Option<usize>,
    /// Plugin search.
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// Manifest overrides.
    #[command(flatten)]
    pub overrides: OverrideArgs,
}

/// `fe-host render`
#[derive(Args, Debug)]
pub struct RenderArgs {
    /// The manifest.
    pub manifest: PathBuf,
    /// Plan for this many epochs instead of `run.epochs`.
    #[arg(long)]
    pub epochs: Option<u32>,
    /// auto, cpu, cuda or cuda:N (overrides the manifest's `run.device`).
    #[arg(long)]
    pub device: Option<String>,
    /// Plan a data-parallel run of this many ranks (each rank's share of every batch); under
    /// torchrun, its WORLD_SIZE is used.
    #[arg(long)]
    pub nproc: Option<usize>,
    /// Plugin search.
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// Manifest overrides.
    #[command(flatten)]
    pub overrides: OverrideArgs,
}

/// `fe-host transform`
#[derive(Args, Debug)]
pub struct TransformArgs {
    /// The manifest.
    pub manifest: PathBuf,
    /// Where to write the outputs (.safetensors).
    #[arg(long)]
    pub out: PathBuf,
    /// The mode to run in: its dataset, pipeline ops and network ops.
    #[arg(long, default_value = "infer")]
    pub mode: String,
    /// The epoch whose schedules are in force.
    #[arg(long, default_value_t = 1)]
    pub epoch: u32,
    /// Read KEY from FILE instead of the manifest's dataset (repeatable; IDX, NPY, or one
    /// CSV/NPZ/image folder whose keys come from the file).
    #[arg(long = "input", value_name = "KEY=FILE")]
    pub inputs: Vec<String>,
    /// Weights to load (see `run --load-weights`).
    #[arg(long, value_name = "PATH")]
    pub weights: Option<PathBuf>,
    /// Run the models untrained (without it, a network with models needs --weights).
    #[arg(long, conflicts_with = "weights")]
    pub random_weights: bool,
    /// Keys to write (repeatable); default: everything the network produces.
    #[arg(long = "key", value_name = "KEY")]
    pub keys: Vec<String>,
    /// Transform at most this many samples.
    #[arg(long, value_parser = at_least_one)]
    pub limit: Option<usize>,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long)]
    pub device: Option<String>,
    /// Plugin search.
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// Manifest overrides.
    #[command(flatten)]
    pub overrides: OverrideArgs,
}

/// Where a trained model's weights come from.
#[derive(Args, Debug)]
pub struct TrainedArgs {
    /// A directory of `<model>.safetensors` (from `run --save-weights` or `export`), or one
    /// file for a single model.
    #[arg(long, value_name = "DIR|FILE")]
    pub weights: Option<PathBuf>,
    /// A checkpoint directory, or a checkpoint root (its `latest`).
    #[arg(long, value_name = "PATH", conflicts_with = "weights")]
    pub checkpoint: Option<PathBuf>,
    /// The best model the manifest's `BestModelSaver` kept in its newest run
    /// (`<save_dir>/<model>_best_<metric>.safetensors`, in the `latest` version of
    /// `run.log_dir`).
    #[arg(long, conflicts_with_all = ["weights", "checkpoint"])]
    pub best: bool,
}

/// `fe-host predict`
#[derive(Args, Debug)]
pub struct PredictArgs {
    /// The manifest the model was trained with; or, alone, a model card `fe-host export`
    /// wrote (`<model>.json`, or its directory when it holds one card), which names its
    /// weights and carries the rest.
    #[arg(value_name = "MANIFEST|CARD|EXPORT_DIR")]
    pub manifest: PathBuf,
    /// Trained weights.
    #[command(flatten)]
    pub trained: TrainedArgs,
    /// Run the models untrained.
    #[arg(long, conflicts_with_all = ["weights", "checkpoint", "best"])]
    pub random_weights: bool,
    /// The data: a file or directory in any format the pipeline reads, or KEY=FILE for
    /// single-array files (repeatable).
    #[arg(long = "input", value_name = "FILE|DIR|KEY=FILE", required = true)]
    pub inputs: Vec<String>,
    /// Where to write: `.csv`, `.npy` or `.safetensors`.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// In a CSV, the k best classes of each sample with their scores.
    #[arg(long, value_name = "K", value_parser = at_least_one)]
    pub top_k: Option<usize>,
    /// Keys to write (repeatable); default: the ModelOps' outputs.
    #[arg(long = "key", value_name = "KEY")]
    pub keys: Vec<String>,
    /// Predict at most this many samples.
    #[arg(long, value_parser = at_least_one)]
    pub limit: Option<usize>,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long)]
    pub device: Option<String>,
    /// Plugin search.
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// Manifest overrides: the run's own, for weights it saved outside a checkpoint (a
    /// checkpoint keeps them).
    #[command(flatten)]
    pub overrides: OverrideArgs,
}

/// `fe-host export`
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The manifest the model was trained with.
    pub manifest: PathBuf,
    /// Trained weights.
    #[command(flatten)]
    pub trained: TrainedArgs,
    /// The directory to create.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// What to write besides the safetensors weights and the card (comma-separated):
    /// `torchscript` (`<model>.pt`, traced for plugin architectures; needs no Python),
    /// `onnx` (also `<model>.onnx`, converted by a Python with torch and onnx: $FE_HOST_PYTHON,
    /// a .venv here or above, or python3 on PATH), `safetensors` (nothing more).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "torchscript")]
    pub format: Vec<crate::predict::export::Format>,
    /// Plugin search.
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// Manifest overrides: the run's own, for weights it saved outside a checkpoint (a
    /// checkpoint keeps them).
    #[command(flatten)]
    pub overrides: OverrideArgs,
}

/// `fe-host plugins ...`
#[derive(Subcommand, Debug)]
pub enum PluginsCommand {
    /// Show every plugin found, its file, version and what it provides.
    List {
        /// Also search the plugin paths of this manifest.
        #[arg(long)]
        manifest: Option<PathBuf>,
        /// Plugin search.
        #[command(flatten)]
        plugins: PluginArgs,
    },
    /// Show one component: what it does and its configuration fields (type, default, doc).
    Show {
        /// The component's name, as a manifest writes it (`CrossEntropy`, `LeNet`, ...).
        name: String,
        /// Also search the plugin paths of this manifest.
        #[arg(long)]
        manifest: Option<PathBuf>,
        /// Plugin search.
        #[command(flatten)]
        plugins: PluginArgs,
    },
    /// Build a plugin crate with this fe-host's libtorch, profile and shared target directory
    /// (its dependencies compile once for every plugin), check that it loads, and install it
    /// into the plugin root beside fe-host.
    Build(BuildPluginArgs),
}

/// `fe-host datagen ...`
#[derive(Subcommand, Debug)]
pub enum DatagenCommand {
    /// Synthetic handwritten-style digits in the MNIST (IDX) format.
    Digits {
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Training samples.
        #[arg(long, default_value_t = 20_000)]
        train: usize,
        /// Evaluation samples.
        #[arg(long, default_value_t = 4_000)]
        eval: usize,
        /// Test samples.
        #[arg(long, default_value_t = 2_000)]
        test: usize,
        /// Seed.
        #[arg(long, default_value_t = 2026)]
        seed: u64,
    },
    /// CIFAR-shaped images (IDX, uint8 [N, 32, 32, 3]) with ten learnable classes: five
    /// shapes in two palettes over noisy backgrounds.
    Cifar(GeneratedSplits),
    /// Images (uint8 [N, 32, 32, 3]) with segmentation masks (uint8 [N, 1, 32, 32], 0 or 1).
    Masks(GeneratedSplits),
    /// Token sequences (uint8 [N, length]) whose label is planted in them as class tokens.
    Tokens {
        /// Output directory, sizes and seed.
        #[command(flatten)]
        splits: GeneratedSplits,
        /// Tokens per sequence.
        #[arg(long, default_value_t = 32)]
        length: usize,
        /// Distinct token ids (at most 256).
        #[arg(long, default_value_t = 64)]
        vocab: usize,
        /// Classes.
        #[arg(long, default_value_t = 4)]
        classes: usize,
    },
    /// Sentences on four topics (`<split>.csv`: text, label) and a word-level tokenizer.json
    /// trained on them.
    Text(GeneratedSplits),
    /// A manifest's dataset (image folder, NPY, CSV, IDX, Parquet, ...) cut into WebDataset
    /// tar shards.
    Shards(super::shards::ShardsArgs),
}

/// Where a generated dataset goes, its split sizes and seed.
#[derive(Args, Debug)]
pub struct GeneratedSplits {
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// Training samples.
    #[arg(long, default_value_t = 5_000)]
    pub train: usize,
    /// Evaluation samples.
    #[arg(long, default_value_t = 1_000)]
    pub eval: usize,
    /// Test samples.
    #[arg(long, default_value_t = 1_000)]
    pub test: usize,
    /// Seed.
    #[arg(long, default_value_t = 2026)]
    pub seed: u64,
}

impl GeneratedSplits {
    pub(super) fn spec(&self) -> crate::datagen::digits::Spec {
        crate::datagen::digits::Spec {
            train: self.train,
            eval: self.eval,
            test: self.test,
            seed: self.seed,
        }
    }

    pub(super) fn report(&self, what: &str) {
        println!(
            "wrote {} train, {} eval and {} test {what} to {}",
            self.train,
            self.eval,
            self.test,
            self.out.display()
        );
    }
}

/// A count that must be positive (`--limit`, `--top-k`): zero is a mistake to say before any
/// model runs, not an empty output.
fn at_least_one(text: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(count) => Ok(count),
        Err(error) => Err(error.to_string()),
    }
}
