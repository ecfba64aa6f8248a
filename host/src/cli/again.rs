//! `fe-host run --again runs/lenet/version_3`: a recorded run, run again from its record
//! alone (see [`crate::record`]).
//!
//! * The manifest is the recorded `manifest.toml`, read as if it were the original file, so
//!   its relative paths resolve against the original manifest's directory (recorded absolute)
//!   from any working directory.
//! * The recorded flags come back: `--log-dir` and `--plugin-dir`s (absolute), the device
//!   rank 0 trained on (a single-process run) or the `--device` given (data parallel), and
//!   the thread count it trained with; a flag given with `--again` wins.
//! * The recorded plugin files are searched first. A plugin whose sha256 differs from the
//!   record, or that is missing, is refused, naming it; so is a data file whose identity
//!   changed, or another world size. `--allow-changes` runs anyway, saying what changed. A
//!   different fe-host binary is only reported.
//! * It writes a new version of the root, whose record names the version it re-ran.

use std::path::PathBuf;

use super::RunArgs;
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::record::{self, Record};

/// What `--again` read.
#[derive(Debug)]
pub struct Recorded {
    /// The version directory, absolute.
    pub dir: PathBuf,
    /// Its record.
    pub record: Record,
    /// Its `manifest.toml`.
    pub text: String,
}

/// Reads the record `--again` names into `args`, and the flags it recorded.
///
/// The record's plugin files join the search path ahead of the user's `--plugin-dir`s.
pub(super) fn prepare(args: &mut RunArgs) -> Result<()> {
    let Some(named) = &args.again else {
        return Ok(());
    };
    let dir = record::absolute(named);
    if !dir.join(record::RECORD_FILE).is_file() {
        return Err(Error::Usage(format!(
            "--again {}: no {} there; name a version directory (runs/NAME/version_N) of a run \
             that recorded itself",
            named.display(),
            record::RECORD_FILE
        )));
    }
    if args.epochs.is_some() && args.resume.is_none() {
        return Err(Error::Usage(
            "--again trains the recorded epochs; --epochs goes with --resume (train longer)".into(),
        ));
    }
    let record = record::read(&dir)?;
    let manifest = dir.join(record::MANIFEST_FILE);
    let text = std::fs::read_to_string(&manifest).map_err(|e| Error::io(&manifest, e))?;
    if args.device.is_none() {
        args.device = match record.world_size {
            1 => Some(record.device.clone()),
            _ => record.flags.device.clone(),
        };
    }
    if args.threads.is_none() {
        args.threads = u32::try_from(record.threads).ok().filter(|&t| t > 0);
    }
    if args.log_dir.is_none() {
        args.log_dir.clone_from(&record.flags.log_dir);
    }
    let mut dirs: Vec<PathBuf> = record
        .plugins
        .iter()
        .map(|plugin| plugin.path.clone())
        .filter(|path| path.is_file())
        .collect();
    dirs.extend(record.flags.plugin_dirs.iter().cloned());
    dirs.append(&mut args.plugins.plugin_dirs);
    args.plugins.plugin_dirs = dirs;
    // Already applied in the recorded text; kept for the commands the run prints.
    args.overrides.set.clone_from(&record.manifest.overrides);
    args.recorded = Some(Box::new(Recorded { dir, record, text }));
    Ok(())
}

/// Whether `dir` is one of the plugin files `--again` put on the search path (left out of
/// the commands a run prints: they name the manifest's own search).
pub(super) fn is_recorded_plugin(args: &RunArgs, dir: &std::path::Path) -> bool {
    args.recorded
        .as_ref()
        .is_some_and(|r| r.record.plugins.iter().any(|p| p.path == dir))
}

/// The manifest of `args`: the recorded one for `--again`, else the file with its overrides.
pub(super) fn load(args: &RunArgs) -> Result<Manifest> {
    match &args.recorded {
        Some(recorded) => {
            let mut manifest =
                Manifest::parse(&recorded.record.manifest.file, recorded.text.clone()).map_err(
                    |e| {
                        Error::Manifest(format!(
                            "{}: the recorded manifest no longer loads: {e}",
                            recorded.dir.join(record::MANIFEST_FILE).display()
                        ))
                    },
                )?;
            match args.epochs {
                Some(0) => return Err(Error::Usage("--epochs must be at least 1".into())),
                Some(epochs) => manifest.run.epochs = epochs,
                None => {}
            }
            Ok(manifest)
        }
        None => super::load_manifest(&args.manifest_path(), &args.overrides, args.epochs),
    }
}

/// Compares what this run is about to use (`now`) with what the run it repeats recorded:
/// refused when a plugin, a data file or the world size changed, unless `allow_changes`.
pub(super) fn check(
    recorded: &Recorded,
    now: &Record,
    allow_changes: bool,
    quiet: bool,
) -> Result<()> {
    let then = &recorded.record;
    let version = recorded.dir.display();
    let mut plugins = Vec::new();
    for old in &then.plugins {
        match now.plugins.iter().find(|p| p.name == old.name) {
            None => plugins.push(format!(
                "plugin {} {} ({}) is not loaded; {version} ran with sha256 {}",
                old.name,
                old.version,
                old.path.display(),
                old.sha256
            )),
            Some(new) if new.sha256 != old.sha256 => plugins.push(format!(
                "plugin {} changed: {} has sha256 {} (version {}); {version} ran with {} (version {})",
                old.name,
                new.path.display(),
                new.sha256,
                new.version,
                old.sha256,
                old.version
            )),
            Some(_) => {}
        }
    }
    let mut data = Vec::new();
    for old in &then.data {
        match now.data.iter().find(|d| d.path == old.path) {
            None => data.push((old.path.clone(), "is gone".to_owned())),
            Some(new) if new.sha256 != old.sha256 || new.size != old.size => data.push((
                new.path.clone(),
                format!(
                    "changed since {version} read it ({} bytes, {} {}; now {} bytes, {})",
                    old.size, old.method, old.sha256, new.size, new.sha256
                ),
            )),
            Some(_) => {}
        }
    }
    let world = (then.world_size != now.world_size).then(|| {
        format!(
            "{version} ran as {} process(es), this run as {}; add --nproc {} (or use torchrun)",
            then.world_size, now.world_size, then.world_size
        )
    });
    const ANYWAY: &str = "pass --allow-changes to run anyway";
    if allow_changes {
        let notes = plugins
            .iter()
            .cloned()
            .chain(data.iter().map(|(p, m)| format!("{}: {m}", p.display())))
            .chain(world);
        for note in notes {
            eprintln!("fe-host run --again: {note}");
        }
    } else if !plugins.is_empty() {
        plugins.push(ANYWAY.to_owned());
        return Err(Error::Plugins(plugins));
    } else if let Some((path, message)) = data.into_iter().next() {
        return Err(Error::Data {
            path,
            message: format!("{message}; {ANYWAY}"),
        });
    } else if let Some(world) = world {
        return Err(Error::Usage(format!("--again: {world}; {ANYWAY}")));
    }
    if !quiet && then.fe_host.sha256 != now.fe_host.sha256 {
        println!(
            "fe-host run --again: this fe-host ({} {}) is another build than the one that ran {version} ({} {});",
            now.fe_host.version, now.fe_host.sha256, then.fe_host.version, then.fe_host.sha256
        );
    }
    Ok(())
}
