//! `fe-host evaluate`: every loss and metric of a trained model on a mode's data, per dataset,
//! without training or writing anything but the `--csv` asked for.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use fe_plugin_api::Mode;

use super::{device, OverrideArgs, PluginArgs, TrainedArgs};
use crate::error::{Error, Result};
use crate::estimator::evaluate::{Evaluated, LEFT_OUT};
use crate::estimator::{Estimator, RunOptions};
use crate::manifest::{DatasetConfig, DatasetEntry, KeyPath, Manifest};
use crate::predict::Weights;
use crate::schedule::Scheduled;

/// `fe-host evaluate`
#[derive(Args, Debug)]
pub struct EvaluateArgs {
    /// The manifest the model was trained with; or, alone, a model card `fe-host export`
    /// wrote (or its directory), which names its weights and carries the rest.
    #[arg(value_name = "MANIFEST|CARD|EXPORT_DIR")]
    pub manifest: PathBuf,
    /// Trained weights.
    #[command(flatten)]
    pub trained: TrainedArgs,
    /// Evaluate the models untrained.
    #[arg(long, conflicts_with_all = ["weights", "checkpoint"])]
    pub random_weights: bool,
    /// The mode whose data, pipeline ops, network ops and traces run: eval or test.
    #[arg(long, default_value = "eval")]
    pub mode: String,
    /// Data with its labels instead of the manifest's dataset of --mode: a file or directory
    /// in any format the pipeline reads, or KEY=FILE for single-array files (repeatable).
    #[arg(long = "input", value_name = "FILE|DIR|KEY=FILE")]
    pub inputs: Vec<String>,
    /// The epoch whose schedules are in force (default: the last, `run.epochs`).
    #[arg(long)]
    pub epoch: Option<u32>,
    /// Print the results as one JSON document.
    #[arg(long)]
    pub json: bool,
    /// Also write the results as CSV (a row per dataset).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long)]
    pub device: Option<String>,
    /// libtorch intra-op threads (default one per core).
    #[arg(long)]
    pub threads: Option<u32>,
    /// Evaluate as N data-parallel ranks on this machine (as `run --nproc`): each takes its
    /// share of every dataset, the metrics are reduced across ranks, and the numbers are those
    /// of one process. Under torchrun, its variables make each process a rank.
    #[arg(long, value_name = "N")]
    pub nproc: Option<usize>,
    /// Plugin search.
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// Manifest overrides: the run's own, for weights saved outside a checkpoint.
    #[command(flatten)]
    pub overrides: OverrideArgs,
}

/// Runs `fe-host evaluate`: in this process, or with `--nproc N` as N ranks that share each
/// dataset and reduce their metrics, giving the numbers one process gives.
pub fn run(args: EvaluateArgs) -> Result<()> {
    if let Some(nproc) = args.nproc {
        return super::launch::launch(
            nproc,
            super::launch::Launch {
                quiet: true,
                manifest: || prepare(&args).map(|prepared| prepared.manifest),
                plain_rank0_stdout: true,
            },
        );
    }
    let membership = super::run::data_parallel_membership(false)?;
    let speaks = membership.as_ref().is_none_or(|m| m.rank == 0);
    let Prepared {
        mode,
        manifest,
        weights,
        registry,
    } = prepare(&args)?;
    let epoch = args.epoch.unwrap_or(manifest.run.epochs).max(1);
    crate::runtime::set_threads(args.threads.or(manifest.run.threads));
    let mut device = device(args.device.as_deref(), &manifest)?;
    if let Some(membership) = &membership {
        device = crate::dist::role::rank_device(device, membership).map_err(Error::Usage)?;
    }
    let options = RunOptions {
        quiet: true,
        out: Box::new(std::io::sink()),
        progress: false,
    };
    let mut estimator = Estimator::build(&manifest, &registry, device, options)?;
    let source = weights.path()?;
    if let Some(path) = &source {
        crate::system::weights::load(&mut estimator.network, path)?;
    }
    if let Some(membership) = &membership {
        // Each rank evaluates its share of every dataset; the traces reduce across ranks as
        // they do in a run's evaluation, so every rank ends with the numbers of the whole.
        let sharded = crate::dist::startup::shard(&mut estimator.pipeline, membership, &manifest)?;
        let joined = sharded.join(&manifest, device)?;
        estimator.join(joined, &manifest)?;
    }
    let results = estimator
        .evaluate(mode, epoch)
        .map_err(|error| estimator.strategy.own_failure(error))?;
    if !speaks {
        estimator.strategy.ended_well();
        return Ok(());
    }
    let from = source.map_or_else(
        || "untrained weights".to_owned(),
        |p| p.display().to_string(),
    );
    if let Some(file) = &args.csv {
        write_csv(file, mode, &results)?;
    }
    let text = if args.json {
        json(mode, epoch, &from, &results)
    } else {
        lines(mode, &from, &results)
    };
    let _ = std::io::stdout().write_all(text.as_bytes());
    Ok(())
}

/// The evaluation every process (launcher and ranks) sets up the same way.
struct Prepared {
    mode: Mode,
    manifest: Manifest,
    weights: Weights,
    registry: crate::plugins::Registry,
}

/// Checks the flags and builds the manifest the evaluation runs: the `--input` data in place
/// of the mode's datasets, nothing that trains or writes.
fn prepare(args: &EvaluateArgs) -> Result<Prepared> {
    let mode: Mode = args.mode.parse().map_err(Error::Usage)?;
    if !matches!(mode, Mode::Eval | Mode::Test) {
        return Err(Error::Usage(format!(
            "--mode {mode}: evaluate runs eval or test (train would update the weights, infer has no labels)"
        )));
    }
    if let Some(file) = &args.csv {
        super::checks::check_output_file("--csv", file)?;
    }
    let weights = Weights::from_flags(
        args.trained.weights.clone(),
        args.trained.checkpoint.clone(),
        args.trained.best,
        args.random_weights,
    )?;
    let (mut manifest, weights, registry) =
        super::trained_model(&args.manifest, weights, &args.overrides, &args.plugins)?;
    let Some(weights) = weights.or_else(|| manifest.models.is_empty().then_some(Weights::Random))
    else {
        let names: Vec<&str> = manifest.models.iter().map(|m| m.name.as_str()).collect();
        return Err(Error::Usage(format!(
            "no trained weights for model(s) {}: pass --weights, --checkpoint or a model card, or --random-weights to evaluate the models as built",
            names.join(", ")
        )));
    };
    if let Some(file) = &args.csv {
        super::model_reads(
            &manifest,
            &args.manifest,
            &registry,
            &args.inputs,
            Some(&weights),
        )
        .check("--csv", file)?;
    }
    if !args.inputs.is_empty() {
        use_input(&mut manifest, mode, &args.inputs)?;
    }
    // An evaluation trains nothing and writes nothing: no checkpoints, run log, savers or
    // loggers, nothing that steers training.
    manifest.checkpoint = None;
    manifest.run.log_dir = None;
    manifest.traces.retain(|trace| {
        trace
            .variants()
            .iter()
            .all(|(spec, _)| !LEFT_OUT.contains(&spec.name.as_str()))
    });
    let epoch = args.epoch.unwrap_or(manifest.run.epochs).max(1);
    manifest.run.epochs = manifest.run.epochs.max(epoch);
    Ok(Prepared {
        mode,
        manifest,
        weights,
        registry,
    })
}

/// Puts the `--input` data in place of the manifest's datasets of `mode`, so the pipeline
/// reads it as it would read a dataset of the manifest.
fn use_input(manifest: &mut Manifest, mode: Mode, inputs: &[String]) -> Result<()> {
    let key = crate::predict::transform::default_input_key(manifest);
    let data = crate::predict::input::describe(manifest, inputs, &key)?;
    if let Some(note) = crate::predict::input::unlike_training(manifest, data.format) {
        eprintln!("note: {note}");
    }
    let path = KeyPath::root("--input");
    manifest.pipeline.data.retain(|entry| entry.mode != mode);
    manifest.pipeline.data.push(DatasetEntry {
        path: path.clone(),
        mode,
        ds_id: String::new(),
        datasets: Scheduled::fixed(DatasetConfig {
            path,
            kind: data.kind.to_owned(),
            split_from: None,
            config: data.table,
        }),
    });
    Ok(())
}

fn lines(mode: Mode, from: &str, results: &[Evaluated]) -> String {
    let mut text = format!("fe-host evaluate: {mode} with {from};\n");
    for result in results {
        let mut line = format!("fe-host {mode}:");
        if !result.ds_id.is_empty() {
            line.push_str(&format!(" ds_id: {};", result.ds_id));
        }
        line.push_str(&format!(" samples: {};", result.samples));
        for (key, value) in &result.values {
            line.push_str(&format!(
                " {key}: {};",
                crate::estimator::data::format_number(*value)
            ));
        }
        text.push_str(&line);
        text.push('\n');
    }
    text
}

fn json(mode: Mode, epoch: u32, from: &str, results: &[Evaluated]) -> String {
    let datasets: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            serde_json::json!({
                "ds_id": r.ds_id,
                "samples": r.samples,
                "values": r.values,
            })
        })
        .collect();
    let document = serde_json::json!({
        "mode": mode.as_str(),
        "epoch": epoch,
        "weights": from,
        "datasets": datasets,
    });
    format!(
        "{}\n",
        serde_json::to_string_pretty(&document).unwrap_or_default()
    )
}

/// One row per dataset; a column per key any dataset logged (empty where one did not).
fn write_csv(file: &std::path::Path, mode: Mode, results: &[Evaluated]) -> Result<()> {
    let mut keys: Vec<&String> = results.iter().flat_map(|r| r.values.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut text = String::from("mode,ds_id,samples");
    for key in &keys {
        text.push(',');
        text.push_str(&csv_field(key));
    }
    text.push('\n');
    for result in results {
        text.push_str(&format!(
            "{mode},{},{}",
            csv_field(&result.ds_id),
            result.samples
        ));
        for key in &keys {
            text.push(',');
            if let Some(value) = result.values.get(*key) {
                text.push_str(&crate::report::format_value(*value));
            }
        }
        text.push('\n');
    }
    crate::predict::output::write_file(file, text.as_bytes())
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}
