//! `fe-host run`: one training run of a manifest, as a single process or as one rank of a
//! data-parallel group.

use std::io::IsTerminal;

use super::{check_before_building, checkpoint, device, summary, versions, RunArgs};
use crate::components::load_manifest_registry;
use crate::error::{Error, Result};
use crate::estimator::{Estimator, RunOptions};
use crate::plugins::default_search_path;

pub(super) fn run_manifest(args: RunArgs) -> Result<()> {
    // Before anything slow: a signal during set-up must stop the run, even when the process
    // was started with it ignored.
    crate::stop::install_for_setup();
    let mut manifest = super::again::load(&args)?;
    let membership = data_parallel_membership(args.smoke)?;
    if membership.is_some() {
        crate::stop::parent_forwards_signals();
    }
    // Ranks other than 0 train in step with rank 0 and say nothing: rank 0 speaks for the run.
    let speaks = membership.as_ref().is_none_or(|m| m.rank == 0);
    crate::stop::speaks_for_the_run(speaks);
    let quiet = args.quiet || !speaks;
    let smoke_dir = args
        .smoke
        .then(|| std::env::temp_dir().join(format!("fe-host-smoke-{}", std::process::id())));
    let from_flag = args.log_dir.is_some();
    let named_root = manifest.run.log_dir.clone();
    if let Some(dir) = &args.log_dir {
        manifest.run.log_dir = Some(dir.clone());
    }
    if let Some(dir) = &smoke_dir {
        checkpoint::smoke_manifest(&mut manifest, dir);
    }
    check_before_building(&manifest, args.threads, from_flag)?;
    if let Some(dir) = args.export.as_deref().filter(|_| speaks) {
        crate::predict::export::refuse_existing("--export", dir)?;
        // Converting to ONNX needs a Python: a machine without one must say so now, not after
        // the training it would otherwise have run first.
        if crate::predict::export::Formats::from(&args.export_format[..]).onnx {
            crate::predict::onnx::find_python()?;
        }
    }
    if speaks {
        // Written after training: a target that cannot be written must fail now, not then.
        let mut reads = crate::overwrite::Reads::of_manifest(&manifest);
        if let Some(path) = &args.load_weights {
            reads.add(path, "the --load-weights weights");
        }
        if let Some(dir) = &args.save_weights {
            super::checks::check_output_dir("--save-weights", dir)?;
            reads.check("--save-weights", dir)?;
        }
        if let Some(dir) = &args.export {
            reads.check("--export", dir)?;
        }
        if let Some(file) = &args.summary {
            super::checks::check_output_file("--summary", file)?;
            reads.check("--summary", file)?;
        }
        if let Some(dir) = &manifest.run.log_dir {
            let flag = if from_flag {
                "--log-dir"
            } else {
                "run.log_dir"
            };
            reads.check(flag, dir)?;
        }
    }
    let version = match smoke_dir {
        Some(_) => None,
        None => {
            let request = checkpoint::resume_request(args.resume.as_deref(), &manifest, false);
            // Only a run of one process claims its version at once: the ranks of a
            // data-parallel run must resolve the same one, which rank 0 makes when it starts.
            versions::choose(&mut manifest, named_root, request, membership.is_none())?
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
    // Identified before anything trains: a rerun whose plugins or data changed is refused
    // now, and nothing of the record is computed on the per-step path.
    let pending = match &version {
        Some(_) => {
            let world = membership.as_ref().map_or(1, |m| m.world);
            let pending =
                super::recording::pending(&args, &manifest, &registry.plugins, device, world)?;
            if let Some(recorded) = &args.recorded {
                super::again::check(recorded, &pending.record, args.allow_changes, quiet)?;
            }
            Some(pending)
        }
        None => None,
    };
    let options = RunOptions {
        quiet,
        out: Box::new(std::io::stdout()),
        progress: std::io::stdout().is_terminal(),
    };
    let mut estimator = Estimator::build(&manifest, &registry, device, options)?;
    let request = checkpoint::resume_request(args.resume.as_deref(), &manifest, args.smoke);
    let resume_options = crate::estimator::checkpointing::ResumeOptions {
        allow_changes: args.allow_changes,
        epochs: args.epochs,
        rank: membership.as_ref().map_or(0, |m| m.rank),
    };
    if let Some(membership) = &membership {
        // The order is the types' (see `dist::startup`): shard, join, check, restore, and only
        // then take rank 0's weights — a broadcast before the restore would be undone by it.
        let sharded = crate::dist::startup::shard(&mut estimator.pipeline, membership, &manifest)?;
        let joined = sharded.join(&manifest, device)?;
        let restoring = estimator.join_before_restore(joined, &manifest)?;
        // Rank 0 picks the checkpoint and every rank restores exactly it.
        let agreed = super::resume::agree(restoring.group(), &manifest, request, quiet)?;
        let restored = match &agreed {
            Some(files) => estimator
                .resume_from_files(files, resume_options)
                .and_then(|()| super::resume::announce(files, quiet)),
            None => load_weights(&mut estimator, args.load_weights.as_deref()),
        };
        let restored = restoring.restored(restored)?;
        estimator.take_rank_zero_weights(restored)?;
    } else {
        // Decided before the weights are touched: with `auto`, --load-weights is for a fresh
        // start.
        let resume_from = match request {
            Some(request) => checkpoint::resume_source(&manifest, request, quiet)?,
            None => None,
        };
        match &resume_from {
            Some(path) => checkpoint::resume(&mut estimator, path, resume_options, quiet)?,
            None => load_weights(&mut estimator, args.load_weights.as_deref())?,
        }
    }
    if let Some(dir) = &smoke_dir {
        estimator.test = false;
        // A signal stops the smoke run after its step, so that it can still remove what it
        // wrote (stopped at once, it would leave its directory behind).
        crate::stop::install();
        let outcome = estimator.fit_then(|estimator| {
            checkpoint::smoke_reload(estimator, &checkpoint::smoke_checkpoints(dir))
        });
        let kept = args.keep.then(|| dir.clone());
        match &kept {
            Some(dir) if !matches!(outcome, Err(Error::Stopped { .. })) => println!(
                "fe-host smoke: kept everything it wrote in {}",
                dir.display()
            ),
            Some(_) => {}
            None => {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        return match outcome {
            Err(Error::Stopped { signal, step, .. }) => {
                Err(Error::SmokeStopped { signal, step, kept })
            }
            other => other,
        };
    }
    if let Some(version) = &version {
        let run_id = &estimator.checkpointing.run_id;
        // The run checks this again when it starts; here, so that a refused run leaves no
        // version directory behind either.
        if let Some(config) = &manifest.checkpoint {
            crate::checkpoint::check_owner(&config.dir, run_id)?;
        }
        version.create(run_id, &args.manifest_path(), args.quiet)?;
        if let Some(pending) = pending {
            if let Err(e) = pending.write(&version.dir.path(), run_id) {
                version.forget_if_unused();
                return Err(e);
            }
        }
    }
    crate::stop::install();
    let mut outcome = estimator
        .fit()
        .map_err(|error| estimator.strategy.own_failure(error));
    if let Some(version) = &version {
        let ended = match &outcome {
            Ok(()) => "completed",
            Err(Error::Stopped { .. }) => "stopped",
            Err(_) => "failed",
        };
        let written =
            crate::record::write_end(&version.dir.path(), ended, &estimator.system.summary);
        if outcome.is_ok() {
            outcome = written;
        } else {
            version.forget_if_unused();
        }
    }
    if let Err(Error::Stopped {
        resume, checkpoint, ..
    }) = &mut outcome
    {
        let root = crate::checkpoint::default_root(&manifest);
        let launcher = membership.as_ref().map_or(String::new(), relaunch);
        *resume = format!("{launcher}fe-host run {} --resume", same_run(&args, true));
        if checkpoint.parent() != Some(root.as_path()) {
            resume.push_str(&format!(" {}", checkpoint.display()));
        }
    }
    if !speaks {
        if outcome.is_ok() {
            estimator.strategy.ended_well();
        }
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
            &mut estimator.network.models,
            &format!("the run of {}", args.manifest_path().display()),
            system.as_ref(),
            dir,
            crate::predict::export::Formats::from(&args.export_format[..]),
        )
        .map(|_| ());
    }
    if outcome.is_ok() && !args.quiet {
        let written = summary::Written {
            weights: args.save_weights.as_deref(),
            export: args.export.as_deref(),
        };
        let commands = summary::Commands {
            run: same_run(&args, false),
            model: same_model(&args),
        };
        for line in summary::lines(&estimator, &manifest, &commands, &written) {
            println!("{line}");
        }
    }
    if let Some(path) = &args.summary {
        let data_parallel = estimator.strategy.summary();
        let json = crate::system::summary_json(&estimator.system, data_parallel)
            .map_err(|e| Error::Internal(format!("cannot serialize the summary: {e}")))?;
        std::fs::write(path, json).map_err(|e| Error::io(path, e))?;
    }
    outcome
}

/// `--load-weights`, for a run that starts fresh.
fn load_weights(estimator: &mut Estimator, path: Option<&std::path::Path>) -> Result<()> {
    match path {
        Some(path) => crate::system::weights::load(&mut estimator.network, path).map(|_| ()),
        None => Ok(()),
    }
}

/// How the ranks of a stopped data-parallel run are started again, before `fe-host run`: by
/// `--nproc` (which [`same_run`] keeps), else by torchrun as it started them — on one machine
/// a command to copy, across machines the same torchrun command on every node.
fn relaunch(membership: &crate::dist::Membership) -> String {
    use crate::dist::Cluster;
    let launcher = match membership.cluster {
        Cluster::Slurm => Some("srun"),
        Cluster::OpenMpi => Some("mpirun"),
        Cluster::Kubeflow => Some("PyTorchJob"),
        Cluster::Torchrun | Cluster::Env => None,
    };
    if std::env::var_os(super::launch::LAUNCHED_BY).is_some() {
        String::new()
    } else if let Some(launcher) = launcher {
        format!("the {launcher} that started this run, with the command: ")
    } else if membership.world == membership.local_world {
        format!(
            "torchrun --standalone --nproc-per-node {} --no-python ",
            membership.world
        )
    } else {
        format!(
            "on each of the {} nodes, the torchrun command that started this run (--nproc-per-node {}) with: ",
            membership.world / membership.local_world.max(1),
            membership.local_world
        )
    }
}

/// The manifest and the flags that decide what `args`' run computes and where it keeps its
/// checkpoints, as shell words: a resume must repeat them (it compares the manifest and its
/// overrides with the checkpoint's). `--epochs` only `with_epochs` (a "train longer" line
/// gives its own).
fn same_run(args: &RunArgs, with_epochs: bool) -> String {
    let mut words = vec![match &args.again {
        Some(dir) => format!("--again {}", shell_word(&dir.to_string_lossy())),
        None => same_model(args),
    }];
    if let Ok(nproc) = std::env::var(super::launch::LAUNCHED_BY) {
        words.push(format!("--nproc {}", shell_word(&nproc)));
    }
    if let (true, Some(epochs)) = (with_epochs, args.epochs) {
        words.push(format!("--epochs {epochs}"));
    }
    if let Some(dir) = &args.log_dir {
        words.push(format!("--log-dir {}", shell_word(&dir.to_string_lossy())));
    }
    words.join(" ")
}

/// The manifest, `--set` overrides and `--plugin-dir`s of `args`, as shell words: what
/// `predict` and `export` need to build the model and prepare its inputs as the run did.
fn same_model(args: &RunArgs) -> String {
    let mut words = vec![shell_word(&args.manifest_path().to_string_lossy())];
    for set in &args.overrides.set {
        words.push(format!("--set {}", shell_word(set)));
    }
    let own = args.plugins.plugin_dirs.iter();
    for dir in own.filter(|dir| !super::again::is_recorded_plugin(args, dir)) {
        words.push(format!(
            "--plugin-dir {}",
            shell_word(&dir.to_string_lossy())
        ));
    }
    words.join(" ")
}

/// `text` as one word for a POSIX shell: as it is when nothing in it is special, else in
/// single quotes.
pub(super) fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// This process's place in a data-parallel run, from torchrun's variables (`None`: it trains
/// alone, also as the only rank of one).
pub(super) fn data_parallel_membership(smoke: bool) -> Result<Option<crate::dist::Membership>> {
    let vars: std::collections::HashMap<String, String> = std::env::vars().collect();
    let membership = crate::dist::membership(&vars).map_err(Error::Usage)?;
    let Some(membership) = membership.filter(|m| m.world > 1) else {
        return Ok(None);
    };
    if smoke {
        return Err(Error::Usage(format!(
            "--smoke checks a manifest in one process, but this is rank {} of {} ({} started it); run the smoke test as one process",
            membership.rank, membership.world, membership.cluster
        )));
    }
    Ok(Some(membership))
}
