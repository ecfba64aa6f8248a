//! The command line: flags as data (clap), one function per subcommand.

use std::io::Write;
use std::path::PathBuf;

mod checkpoint;
pub use checkpoint::CheckpointCommand;
mod evaluate;
pub use evaluate::EvaluateArgs;
mod checks;
use checks::check_before_building;
mod args;
pub use args::{
    Cli, Command, DatagenCommand, ExportArgs, GeneratedSplits, NewCommand, OverrideArgs,
    PluginArgs, PluginsCommand, PredictArgs, RenderArgs, RunArgs, TrainedArgs, TransformArgs,
};
mod again;
mod diff;
mod launch;
mod recording;
mod resume;
mod run;
pub use checks::{one_line_usage_error, stdout_failure};
mod pipeline;
pub use pipeline::PipelineArgs;
mod scaffold;
mod shards;
pub use scaffold::{BuildPluginArgs, NewPluginArgs};
mod logs;
mod model_summary;
pub use model_summary::SummaryArgs;
mod summary;
mod versions;
pub use logs::LogsArgs;

use crate::components::load_manifest_registry;
use crate::error::{Error, Result};
use crate::estimator::{Estimator, RunOptions};
use crate::manifest::Manifest;
use crate::plugins::{default_search_path, render_list};

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run(mut args) => {
            again::prepare(&mut args)?;
            match args.nproc {
                Some(nproc) => launch::launch(
                    nproc,
                    launch::Launch {
                        quiet: args.quiet,
                        manifest: || again::load(&args),
                        plain_rank0_stdout: false,
                    },
                ),
                None => run::run_manifest(args),
            }
        }
        Command::Transform(args) => transform(args),
        Command::Predict(args) => predict(args),
        Command::Evaluate(args) => evaluate::run(args),
        Command::Export(args) => export(args),
        Command::Summary(args) => model_summary::run(args),
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
        Command::Plugins(PluginsCommand::Build(args)) => {
            let installed = scaffold::build_plugin(&args)?;
            println!("installed {}", installed.display());
            Ok(())
        }
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
        Command::Datagen(DatagenCommand::Shards(args)) => shards::run(args),
        Command::Datagen(DatagenCommand::Text(splits)) => {
            crate::datagen::text::write(&splits.out, splits.spec())?;
            splits.report("sentences (and tokenizer.json)");
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
                "created the plugin crate `{}` in {}\ntest, build and install it: cd {} && cargo test && fe-host plugins build .",
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
    checks::check_output_file("--out", &args.out)?;
    let manifest = args.overrides.load(&args.manifest)?;
    let mode: fe_plugin_api::Mode = args.mode.parse().map_err(Error::Usage)?;
    crate::runtime::set_threads(manifest.run.threads);
    let device = device(args.device.as_deref(), &manifest)?;
    let search = default_search_path(&manifest.plugins.paths, &args.plugins.plugin_dirs);
    let registry = load_manifest_registry(&search, &manifest)?;
    let mut reads = crate::overwrite::Reads::of_manifest(&manifest);
    reads.add_plugins(&registry);
    args.inputs
        .iter()
        .for_each(|spec| reads.add_input_spec(spec));
    if let Some(weights) = &args.weights {
        reads.add(weights, "the weights");
    }
    reads.check("--out", &args.out)?;
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
            let notes = crate::plugins::create::plugin_notes(&registry.plugins);
            let message = format!("no component is called `{name}`{hint}{notes}");
            // As in `run`: a file that failed to load may be the plugin meant to provide it.
            if registry.plugins.skipped.is_empty() {
                Err(Error::Usage(message))
            } else {
                Err(Error::Plugins(vec![message]))
            }
        }
    }
}

fn predict(args: PredictArgs) -> Result<()> {
    checks::check_output_file("--out", &args.out)?;
    let weights = crate::predict::Weights::from_flags(
        args.trained.weights,
        args.trained.checkpoint,
        args.trained.best,
        args.random_weights,
    )?;
    let (manifest, weights, registry) =
        trained_model(&args.manifest, weights, &args.overrides, &args.plugins)?;
    model_reads(
        &manifest,
        &args.manifest,
        &registry,
        &args.inputs,
        weights.as_ref(),
    )
    .check("--out", &args.out)?;
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

/// The model `predict` and `evaluate` use, from `path`: a model card (or its export
/// directory), which names its weights and carries its manifest; or a manifest with the
/// `weights` flags (from a checkpoint, the manifest saved in it). With the plugins it needs.
fn trained_model(
    path: &std::path::Path,
    weights: Option<crate::predict::Weights>,
    overrides: &OverrideArgs,
    plugins: &PluginArgs,
) -> Result<(
    Manifest,
    Option<crate::predict::Weights>,
    crate::plugins::Registry,
)> {
    if crate::predict::from_card::is_card(path) {
        if weights.is_some() {
            return Err(Error::Usage(format!(
                "{} is a model card, which names its weights: drop --weights, --checkpoint, --best and --random-weights",
                path.display()
            )));
        }
        if !overrides.set.is_empty() {
            return Err(Error::Usage(format!(
                "{} is a model card, which carries the manifest the model was trained with: drop --set",
                path.display()
            )));
        }
        let model = crate::predict::from_card::open(path)?;
        let mut dirs = plugins.plugin_dirs.clone();
        dirs.extend(model.plugin_dirs());
        let search = default_search_path(&model.manifest.plugins.paths, &dirs);
        let registry = load_manifest_registry(&search, &model.manifest)?;
        model.check_architecture(&registry)?;
        let weights = crate::predict::Weights::Files(model.weights);
        Ok((model.manifest, Some(weights), registry))
    } else {
        let manifest = overrides.load(path)?;
        let weights = weights.map(|w| resolve_best(&manifest, w)).transpose()?;
        let manifest = trained_manifest(manifest, weights.as_ref())?;
        let search = default_search_path(&manifest.plugins.paths, &plugins.plugin_dirs);
        let registry = load_manifest_registry(&search, &manifest)?;
        Ok((manifest, weights, registry))
    }
}

/// What a command using a trained model reads: its manifest (or card, at `path`), plugins,
/// `--input` data and weights.
fn model_reads(
    manifest: &Manifest,
    path: &std::path::Path,
    registry: &crate::plugins::Registry,
    inputs: &[String],
    weights: Option<&crate::predict::Weights>,
) -> crate::overwrite::Reads {
    let mut reads = crate::overwrite::Reads::of_manifest(manifest);
    reads.add(path, "the manifest or model card");
    reads.add_plugins(registry);
    inputs.iter().for_each(|spec| reads.add_input_spec(spec));
    if let Some(weights) = weights {
        reads.add_weights(weights);
    }
    reads
}

/// The manifest to predict or export with: for weights from a checkpoint, the one saved in it,
/// which the model was trained with (`--set` overrides included). The file given may have been
/// edited since, or lack the run's overrides, and would then prepare inputs or build the model
/// otherwise than training did; the command `run` prints ("next: predict") must still give the
/// trained model's predictions, so the saved manifest wins and a note names what differs.
fn trained_manifest(
    given: Manifest,
    weights: Option<&crate::predict::Weights>,
) -> Result<Manifest> {
    let Some(crate::predict::Weights::Checkpoint(checkpoint)) = weights else {
        return Ok(given);
    };
    let trained = crate::predict::checkpoint_manifest(&given, checkpoint)?;
    if !trained.differences.is_empty() {
        eprintln!(
            "note: using {}, the manifest the model was trained with; {} differs from it in (saved -> file): {}",
            trained.saved.display(),
            given.file.display(),
            trained.differences.join("; ")
        );
    }
    Ok(trained.manifest)
}

/// `--best` as the directory the manifest's savers wrote; other weights as given.
fn resolve_best(
    manifest: &Manifest,
    weights: crate::predict::Weights,
) -> Result<crate::predict::Weights> {
    Ok(match weights {
        crate::predict::Weights::Best => {
            crate::predict::Weights::Files(crate::predict::best::best_weights_dir(manifest)?)
        }
        other => other,
    })
}

fn export(args: ExportArgs) -> Result<()> {
    let manifest = args.overrides.load(&args.manifest)?;
    let weights = crate::predict::Weights::from_flags(
        args.trained.weights,
        args.trained.checkpoint,
        args.trained.best,
        false,
    )?
    .ok_or_else(|| {
        Error::Usage(
            "export writes trained weights: pass --weights DIR|FILE, --checkpoint PATH or --best"
                .into(),
        )
    })?;
    let weights = resolve_best(&manifest, weights)?;
    let manifest = trained_manifest(manifest, Some(&weights))?;
    crate::runtime::set_threads(manifest.run.threads);
    let search = default_search_path(&manifest.plugins.paths, &args.plugins.plugin_dirs);
    let registry = load_manifest_registry(&search, &manifest)?;
    let mut reads = crate::overwrite::Reads::of_manifest(&manifest);
    reads.add(&args.manifest, "the manifest");
    reads.add_plugins(&registry);
    reads.add_weights(&weights);
    reads.check("--out", &args.out)?;
    let formats = crate::predict::export::Formats::from(&args.format[..]);
    let written = crate::predict::export::run(&manifest, &registry, &weights, &args.out, formats)?;
    for file in &written {
        println!("wrote {}", file.display());
    }
    Ok(())
}
