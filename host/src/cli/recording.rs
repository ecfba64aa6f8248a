//! What `fe-host run` records about itself (see [`crate::record`]), assembled when the run's
//! plugins, device and data are known.

use super::RunArgs;
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::record::{self, Flags, ManifestOrigin, Record};

/// The record of the run `args` starts, its id and start time still to be filled in, and the
/// manifest text to keep beside it.
pub struct Pending {
    /// The record.
    pub record: Record,
    /// [`record::MANIFEST_FILE`]'s text.
    pub manifest_text: String,
}

/// Identifies everything the run of `args` uses (the fe-host and plugin files, the data);
/// reads every data file under [`record::data::FULL_HASH_LIMIT`] once.
pub fn pending(
    args: &RunArgs,
    manifest: &Manifest,
    plugins: &crate::plugins::PluginSet,
    device: tch::Device,
    world_size: usize,
) -> Result<Pending> {
    let file = record::absolute(&args.manifest_path());
    let sha256 = match &args.recorded {
        Some(recorded) => recorded.record.manifest.sha256.clone(),
        None => crate::plugins::sha256_file(&file).map_err(|e| Error::io(&file, e))?,
    };
    let data = record::data::identify(manifest).map_err(|e| Error::Data {
        path: manifest.dir(),
        message: format!("cannot identify the data files for the run record: {e}"),
    })?;
    let record = Record {
        format: record::format(),
        run_id: String::new(),
        started: String::new(),
        command: std::env::args().collect(),
        cwd: std::env::current_dir().unwrap_or_default(),
        manifest: ManifestOrigin {
            file,
            sha256,
            overrides: args.overrides.set.clone(),
        },
        flags: Flags {
            device: args.device.clone(),
            threads: args.threads,
            epochs: args.epochs,
            log_dir: args.log_dir.as_deref().map(record::absolute),
            plugin_dirs: args
                .plugins
                .plugin_dirs
                .iter()
                .map(|d| record::absolute(d))
                .collect(),
        },
        again_of: args.recorded.as_ref().map(|r| r.dir.clone()),
        fe_host: record::fe_host_binary()?,
        plugins: record::plugin_binaries(plugins)?,
        device: crate::estimator::describe_device(device),
        world_size,
        threads: tch::get_num_threads(),
        seed: manifest.run.seed,
        data,
        end: None,
    };
    let manifest_text = match &args.recorded {
        Some(recorded) => recorded.text.clone(),
        None => record::resolved::text(manifest),
    };
    Ok(Pending {
        record,
        manifest_text,
    })
}

impl Pending {
    /// Writes the record into version directory `dir` for the run `run_id`.
    pub fn write(mut self, dir: &std::path::Path, run_id: &str) -> Result<()> {
        self.record.run_id = run_id.to_owned();
        self.record.started = crate::system::timestamp();
        record::write_start(dir, &self.record, &self.manifest_text)
    }
}
