//! The command line: flags as data (clap), one function per subcommand.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod checkpoint;
pub use checkpoint::CheckpointCommand;
mod checks;
use checks::check_before_building;
mod launch;
pub use checks::{one_line_usage_error, stdout_failure};
mod pipeline;
pub use pipeline::PipelineArgs;
mod scaffold;
pub use scaffold::NewPluginArgs;
mod logs;
mod summary;
mod versions;
pub use logs::LogsArgs;

use crate::components::load_manifest_registry;
use crate::error::{Error, Result};
use crate::estimator::{Estimator, RunOptions};
use crate::manifest::Manifest;
use crate::plugins::{default_search_path, render_list};

/// Trains and evaluates deep-learning models described by a TOML manifest; every op, model and
/// metric comes from a plugin.
///
/// Exit codes: 0 success; 1 the run failed (an op, model or trace failed or panicked); 2 bad
/// usage or an invalid manifest; 3 plugin problems; 4 the device is unavailable; 5 bad data;
/// 6 a bad checkpoint; 75 stopped by Ctrl-C or SIGTERM after saving a checkpoint (continue
/// with --resume); 130/143 stopped at once by a second SIGINT/SIGTERM; 70 an internal error.
/// `run --nproc N` exits with the code of the first rank that failed.
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
    /// Write trained models for other tools: safetensors named as the PyTorch definition, a
    /// JSON model card, and TorchScript for a TorchScript architecture.
    Export(ExportArgs),
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
pub struct RunArgs {
    /// The manifest.
    pub manifest: PathBuf,
    /// auto, cpu, cuda or cuda:N (overrides the manifest's `run.device`).
    #[arg(long)]
    pub device: Option<String>,
    /// libtorch intra-op threads (overrides `run.threads`; default one per core).
    #[arg(long)]
    pub threads: Option<u32>,
    /// Train for this many epochs instead of `run.epochs`.
    #[arg(long)]
    pub epochs: Option<u32>,
    /// Write the logged history (and the graphs traces added, `custom_graphs`) as JSON to this
    /// file when the run ends.
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
    /// interval, a rebuilt plugin); other changes are always refused.
    #[arg(long, requires = "resume")]
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
    #[arg(long)]
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
    #[arg(long, conflicts_with_all = ["weights", "checkpoint"])]
    pub random_weights: bool,
    /// The data: a file or directory in any format the pipeline reads, or KEY=FILE for
    /// single-array files (repeatable).
    #[arg(long = "input", value_name = "FILE|DIR|KEY=FILE", required = true)]
    pub inputs: Vec<String>,
    /// Where to write: `.csv`, `.npy` or `.safetensors`.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// In a CSV, the k best classes of each sample with their scores.
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Keys to write (repeatable); default: the ModelOps' outputs.
    #[arg(long = "key", value_name = "KEY")]
    pub keys: Vec<String>,
    /// Predict at most this many samples.
    #[arg(long)]
    pub limit: Option<usize>,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long)]
    pub device: Option<String>,
    /// Plugin search.
    #[command(flatten)]
    pub plugins: PluginArgs,
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
    /// Plugin search.
    #[command(flatten)]
    pub plugins: PluginArgs,
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
    fn spec(&self) -> crate::datagen::digits::Spec {
        crate::datagen::digits::Spec {
            train: self.train,
            eval: self.eval,
            test: self.test,
            seed: self.seed,
        }
    }

    fn report(&self, what: &str) {
        println!(
            "wrote {} train, {} eval and {} test {what} to {}",
            self.train,
            self.eval,
            self.test,
            self.out.display()
        );
    }
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run(RunArgs {
            nproc: Some(nproc),
            quiet,
            ..
        }) => launch::launch(nproc, quiet),
        Command::Run(args) => run_manifest(args),
        Command::Transform(args) => transform(args),
        Command::Predict(args) => predict(args),
        Command::Export(args) => export(args),
        Command::Render(args) => render(args),
        Command::Pipeline(args) => pipeline::run(args),
        Command::Plugins(PluginsCommand::List { manifest, plugins }) => {
            list_plugins(manifest, plugins)
        }
        Command::Plugins(PluginsCommand::Show {
            name,
            manifest,
            plugins,
        }) => show_plugin_component(&name, manifest, plugins),
        Command::Datagen(DatagenCommand::Digits {
            out,
            train,
            eval,
            test,
            seed,
        }) => {
            crate::datagen::digits::write(
                &out,
                crate::datagen::digits::Spec {
                    train,
                    eval,
                    test,
                    seed,
                },
            )?;
            println!(
                "wrote {train} train, {eval} eval and {test} test digits to {}",
                out.display()
            );
            Ok(())
        }
        Command::Datagen(DatagenCommand::Cifar(splits)) => {
            crate::datagen::cifar::write(&splits.out, splits.spec())?;
            splits.report("CIFAR-shaped images");
            Ok(())
        }
        Command::Datagen(DatagenCommand::Masks(splits)) => {
            crate::datagen::masks::write(&splits.out, splits.spec())?;
            splits.report("images with masks");
            Ok(())
        }
        Command::Datagen(DatagenCommand::Tokens {
            splits,
            length,
            vocab,
            classes,
        }) => {
            let shape = crate::datagen::tokens::Shape {
                length,
                vocab,
                classes,
            };
            crate::datagen::tokens::write(&splits.out, splits.spec(), shape)?;
            splits.report("token sequences");
            Ok(())
        }
        Command::Checkpoint(command) => checkpoint::run(command),
        Command::Logs(args) => logs::run(args),
        Command::Devices => {
            print!("{}", crate::device::report());
            Ok(())
        }
        Command::New(NewCommand::Plugin(args)) => {
            let dir = scaffold::new_plugin(&args)?;
            println!(
                "created the plugin crate `{}` in {}\nbuild and test it: cd {} && cargo test && cargo build",
                args.name,
                dir.display(),
                dir.display()
            );
            Ok(())
        }
    }
}

fn load_manifest(
    path: &std::path::Path,
    overrides: &OverrideArgs,
    epochs: Option<u32>,
) -> Result<Manifest> {
    let mut manifest = overrides.load(path)?;
    if let Some(epochs) = epochs {
        if epochs == 0 {
            return Err(Error::Usage("--epochs must be at least 1".into()));
        }
        manifest.run.epochs = epochs;
    }
    Ok(manifest)
}

fn render(args: RenderArgs) -> Result<()> {
    let manifest = load_manifest(&args.manifest, &args.overrides, args.epochs)?;
    crate::runtime::set_threads(manifest.run.threads);
    let device = device(args.device.as_deref(), &manifest)?;
    let search = default_search_path(&manifest.plugins.paths, &args.plugins.plugin_dirs);
    let registry = load_manifest_registry(&search, &manifest)?;
    let options = RunOptions {
        quiet: true,
        out: Box::new(std::io::sink()),
        progress: false,
    };
    let mut estimator = Estimator::build(&manifest, &registry, device, options)?;
    let vars: std::collections::HashMap<String, String> = std::env::vars().collect();
    let from_env = crate::dist::membership(&vars)
        .map_err(Error::Usage)?
        .map(|m| m.world);
    let world = args.nproc.or(from_env).unwrap_or(1);
    if world == 0 {
        return Err(Error::Usage("--nproc must be at least 1".into()));
    }
    if world > 1 {
        estimator.pipeline.shard(0, world, &manifest)?;
    }
    let text = crate::render::render(&manifest, &estimator);
    let _ = std::io::stdout().write_all(text.as_bytes());
    Ok(())
}

fn run_manifest(args: RunArgs) -> Result<()> {
    let mut manifest = load_manifest(&args.manifest, &args.overrides, args.epochs)?;
    let membership = data_parallel_membership(args.smoke)?;
    // Ranks other than 0 train in step with rank 0 and say nothing: rank 0 speaks for the run.
    let speaks = membership.as_ref().is_none_or(|m| m.rank == 0);
    let quiet = args.quiet || !speaks;
    let smoke_dir = args
        .smoke
        .then(|| std::env::temp_dir().join(format!("fe-host-smoke-{}", std::process::id())));
    let from_flag = args.log_dir.is_some();
    let named_root = manifest.run.log_dir.clone();
    if let Some(dir) = args.log_dir {
        manifest.run.log_dir = Some(dir);
    }
    if let Some(dir) = &smoke_dir {
        checkpoint::smoke_manifest(&mut manifest, dir);
    }
    check_before_building(&manifest, args.threads, from_flag)?;
    let version = match smoke_dir {
        Some(_) => None,
        None => {
            let request = checkpoint::resume_request(args.resume.as_deref(), &manifest, false);
            versions::choose(&mut manifest, named_root, request)?
        }
    };
    // Every rank resolves the version (a resume reads its checkpoints from it); rank 0 alone
    // makes it, points `latest` at it and removes it after a failed start.
    let version = version.filter(|_| speaks);
    crate::runtime::tune_malloc();
    crate::runtime::set_threads(args.threads.or(manifest.run.threads));
    crate::runtime::set_determinism(manifest.run.deterministic, manifest.run.cudnn_benchmark)?;
    let mut device = device(args.device.as_deref(), &manifest)?;
    if let Some(membership) = &membership {
        device = crate::dist::role::rank_device(device, membership).map_err(Error::Usage)?;
    }
    let search = default_search_path(&manifest.plugins.paths, &args.plugins.plugin_dirs);
    let registry = load_manifest_registry(&search, &manifest)?;
    if let Some(membership) = &membership {
        let rank = crate::plugins::Membership::of(membership);
        registry.announce(&crate::plugins::run_info(&manifest, rank));
    }
    let options = RunOptions {
        quiet,
        out: Box::new(std::io::stdout()),
        progress: std::io::stdout().is_terminal(),
    };
    let mut estimator = Estimator::build(&manifest, &registry, device, options)?;
    // Decided before the weights are touched: with `auto`, --load-weights is for a fresh start.
    let resume_from =
        match checkpoint::resume_request(args.resume.as_deref(), &manifest, args.smoke) {
            Some(request) => checkpoint::resume_source(&manifest, request, quiet)?,
            None => None,
        };
    if let (None, Some(path)) = (&resume_from, &args.load_weights) {
        crate::system::weights::load(&mut estimator.network, path)?;
    }
    if let Some(membership) = &membership {
        // Before the rendezvous: a rank refusing the batch after it would leave the others
        // waiting on a store that is gone.
        (estimator.pipeline).shard(membership.rank, membership.world, &manifest)?;
        let group = join_group(membership, &manifest, device)?;
        estimator.join(group, &manifest)?;
    }
    if let Some(path) = &resume_from {
        let options = crate::estimator::checkpointing::ResumeOptions {
            allow_changes: args.allow_changes,
            epochs: args.epochs,
        };
        checkpoint::resume(&mut estimator, path, options, quiet)?;
    }
    if let Some(dir) = &smoke_dir {
        estimator.test = false;
        let outcome = estimator.fit_then(|estimator| {
            checkpoint::smoke_reload(estimator, &checkpoint::smoke_checkpoints(dir))
        });
        if args.keep {
            println!(
                "fe-host smoke: kept everything it wrote in {}",
                dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(dir);
        }
        return outcome;
    }
    if let Some(version) = &version {
        let run_id = &estimator.checkpointing.run_id;
        // The run checks this again when it starts; here, so that a refused run leaves no
        // version directory behind either.
        if let Some(config) = &manifest.checkpoint {
            crate::checkpoint::check_owner(&config.dir, run_id)?;
        }
        version.create(run_id, &args.manifest, args.quiet)?;
    }
    crate::stop::install();
    let mut outcome = estimator.fit();
    if let (Err(_), Some(version)) = (&outcome, &version) {
        version.forget_if_unused();
    }
    if let Err(Error::Stopped {
        resume, checkpoint, ..
    }) = &mut outcome
    {
        let root = crate::checkpoint::default_root(&manifest);
        *resume = format!("fe-host run {} --resume", args.manifest.display());
        if checkpoint.parent() != Some(root.as_path()) {
            resume.push_str(&format!(" {}", checkpoint.display()));
        }
    }
    if !speaks {
        // Saved weights, exports and summaries are rank 0's to write.
        return outcome;
    }
    if let (Ok(()), Some(dir)) = (&outcome, &args.save_weights) {
        outcome = crate::system::weights::save(&estimator.network, dir).map(|_| ());
    }
    if let (Ok(()), Some(dir)) = (&outcome, &args.export) {
        let system = serde_json::to_value(&estimator.system).ok();
        outcome = crate::predict::export::write(
            &manifest,
            &registry,
            &estimator.network.models,
            &format!("the run of {}", args.manifest.display()),
            system.as_ref(),
            dir,
        )
        .map(|_| ());
    }
    if outcome.is_ok() && !args.quiet {
        for line in summary::lines(&estimator, &manifest, &args.manifest) {
            println!("{line}");
        }
    }
    if let Some(path) = &args.summary {
        let json = crate::system::summary_json(&estimator.system)
            .map_err(|e| Error::Internal(format!("cannot serialize the summary: {e}")))?;
        std::fs::write(path, json).map_err(|e| Error::io(path, e))?;
    }
    outcome
}

/// This process's place in a data-parallel run, from torchrun's variables (`None`: it trains
/// alone, also as the only rank of one).
fn data_parallel_membership(smoke: bool) -> Result<Option<crate::dist::Membership>> {
    let vars: std::collections::HashMap<String, String> = std::env::vars().collect();
    let membership = crate::dist::membership(&vars).map_err(Error::Usage)?;
    let Some(membership) = membership.filter(|m| m.world > 1) else {
        return Ok(None);
    };
    if smoke {
        return Err(Error::Usage(format!(
            "--smoke checks a manifest in one process, but this is rank {} of {} (RANK/WORLD_SIZE are set); run the smoke test without torchrun",
            membership.rank, membership.world
        )));
    }
    Ok(Some(membership))
}

/// Joins the process group of `membership`, waiting at most `run.process_group_timeout` for
/// the other ranks (the same timeout bounds every collective of the run).
fn join_group(
    membership: &crate::dist::Membership,
    manifest: &Manifest,
    device: tch::Device,
) -> Result<crate::dist::SharedGroup> {
    let cuda = match device {
        tch::Device::Cuda(index) => Some(index),
        _ => None,
    };
    let group =
        crate::dist::ProcessGroup::join(membership, manifest.run.process_group_timeout, cuda)
            .map_err(Error::Run)?;
    crate::dist::role::set(membership.rank, membership.world);
    Ok(crate::dist::SharedGroup::new(group))
}

fn device(requested: Option<&str>, manifest: &Manifest) -> Result<tch::Device> {
    let request = match (requested, manifest.run.device.as_deref()) {
        (Some(flag), _) => flag.parse().map_err(Error::Usage)?,
        (None, Some(setting)) => setting.parse().map_err(|message: String| {
            manifest.error_at(
                &crate::manifest::KeyPath::root("run").key("device"),
                message,
            )
        })?,
        (None, None) => crate::device::Request::Auto,
    };
    crate::device::resolve(request)
}

fn transform(args: TransformArgs) -> Result<()> {
    let manifest = args.overrides.load(&args.manifest)?;
    let mode: fe_plugin_api::Mode = args.mode.parse().map_err(Error::Usage)?;
    crate::runtime::set_threads(manifest.run.threads);
    let device = device(args.device.as_deref(), &manifest)?;
    let search = default_search_path(&manifest.plugins.paths, &args.plugins.plugin_dirs);
    let registry = load_manifest_registry(&search, &manifest)?;
    let request = crate::predict::transform::Request {
        mode,
        epoch: args.epoch,
        inputs: args.inputs,
        weights: args.weights,
        random_weights: args.random_weights,
        keys: args.keys,
        limit: args.limit,
        out: args.out.clone(),
    };
    let written = crate::predict::transform::run(&manifest, &registry, device, &request)?;
    let keys: Vec<String> = written
        .keys
        .iter()
        .map(|(k, shape)| format!("{k} {shape:?}"))
        .collect();
    println!(
        "transformed {} samples in {mode} mode; wrote {} to {}",
        written.samples,
        keys.join(", "),
        args.out.display()
    );
    Ok(())
}

/// The plugin search path and sha256 pins of `plugins list/show`: the flags', plus the
/// manifest's when one is given.
fn plugin_search(
    manifest: Option<PathBuf>,
    plugins: PluginArgs,
) -> Result<(
    Vec<crate::plugins::SearchEntry>,
    std::collections::BTreeMap<String, String>,
)> {
    let (paths, pins) = match manifest {
        Some(path) => {
            let manifest = Manifest::load(&path)?;
            (manifest.plugins.paths, manifest.plugins.sha256)
        }
        None => (Vec::new(), Default::default()),
    };
    Ok((default_search_path(&paths, &plugins.plugin_dirs), pins))
}

fn list_plugins(manifest: Option<PathBuf>, plugins: PluginArgs) -> Result<()> {
    let (search, pins) = plugin_search(manifest, plugins)?;
    // Every plugin that loads is listed, next to the files that were refused and why; the
    // refusals still make the exit code say that something is wrong.
    let set = crate::plugins::load_all_listing(&search, &pins);
    let refused = set.refused.clone();
    let registry = crate::components::registry(set)?;
    let text = render_list(&registry, &search);
    let _ = std::io::stdout().write_all(text.as_bytes());
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Error::Plugins(refused))
    }
}

fn show_plugin_component(name: &str, manifest: Option<PathBuf>, plugins: PluginArgs) -> Result<()> {
    let (search, pins) = plugin_search(manifest, plugins)?;
    let registry = crate::components::load_registry(&search, &pins)?;
    match crate::plugins::show::render_show(&registry, name) {
        Some(text) => {
            let _ = std::io::stdout().write_all(text.as_bytes());
            Ok(())
        }
        None => {
            let hint = crate::plugins::show::suggest(&registry, name)
                .map(|close| format!("; did you mean `{close}`?"))
                .unwrap_or_else(|| "; `fe-host plugins list` shows every component".to_owned());
            Err(Error::Usage(format!(
                "no component is called `{name}`{hint}"
            )))
        }
    }
}

fn predict(args: PredictArgs) -> Result<()> {
    let weights = crate::predict::Weights::from_flags(
        args.trained.weights,
        args.trained.checkpoint,
        args.random_weights,
    )?;
    let (manifest, weights, registry) = if crate::predict::from_card::is_card(&args.manifest) {
        if weights.is_some() {
            return Err(Error::Usage(format!(
                "{} is a model card, which names its weights: drop --weights, --checkpoint and --random-weights",
                args.manifest.display()
            )));
        }
        let model = crate::predict::from_card::open(&args.manifest)?;
        let mut dirs = args.plugins.plugin_dirs.clone();
        dirs.extend(model.plugin_dirs());
        let search = default_search_path(&model.manifest.plugins.paths, &dirs);
        let registry = load_manifest_registry(&search, &model.manifest)?;
        model.check_architecture(&registry)?;
        let weights = crate::predict::Weights::Files(model.weights);
        (model.manifest, Some(weights), registry)
    } else {
        let manifest = Manifest::load(&args.manifest)?;
        let search = default_search_path(&manifest.plugins.paths, &args.plugins.plugin_dirs);
        let registry = load_manifest_registry(&search, &manifest)?;
        (manifest, weights, registry)
    };
    crate::runtime::set_threads(manifest.run.threads);
    let device = device(args.device.as_deref(), &manifest)?;
    let prediction = crate::predict::Prediction {
        weights,
        inputs: args.inputs,
        keys: args.keys,
        out: args.out.clone(),
        top_k: args.top_k,
        limit: args.limit,
    };
    let written = crate::predict::run(&manifest, &registry, device, &prediction)?;
    let keys: Vec<String> = written
        .keys
        .iter()
        .map(|(k, s)| format!("{k} {s:?}"))
        .collect();
    println!(
        "predicted {} samples; wrote {} to {}",
        written.samples,
        keys.join(", "),
        args.out.display()
    );
    Ok(())
}

fn export(args: ExportArgs) -> Result<()> {
    let manifest = Manifest::load(&args.manifest)?;
    let weights =
        crate::predict::Weights::from_flags(args.trained.weights, args.trained.checkpoint, false)?
            .ok_or_else(|| {
                Error::Usage(
                    "export writes trained weights: pass --weights DIR|FILE or --checkpoint PATH"
                        .into(),
                )
            })?;
    crate::runtime::set_threads(manifest.run.threads);
    let search = default_search_path(&manifest.plugins.paths, &args.plugins.plugin_dirs);
    let registry = load_manifest_registry(&search, &manifest)?;
    let written = crate::predict::export::run(&manifest, &registry, &weights, &args.out)?;
    for file in &written {
        println!("wrote {}", file.display());
    }
    Ok(())
}
