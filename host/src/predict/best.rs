//! `--best`: the weights a run's `BestModelSaver`s kept, found from the manifest alone. A
//! versioned run (`run.log_dir`) keeps them in its newest version (`latest`), where the
//! saver's `save_dir` moved with the run's other outputs; an unversioned one where
//! `save_dir` names.

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::manifest::Manifest;

/// The directory holding `<model>_best_<metric>.safetensors` for the manifest's savers.
pub fn best_weights_dir(manifest: &Manifest) -> Result<PathBuf> {
    let savers: Vec<(String, PathBuf)> = manifest
        .traces
        .iter()
        .flat_map(|trace| trace.variants())
        .filter(|(spec, _)| spec.name == "BestModelSaver")
        .filter_map(|(spec, _)| {
            let model = spec.config.get("model")?.as_str()?.to_owned();
            let dir = spec.config.get("save_dir")?.as_str()?;
            Some((model, PathBuf::from(dir)))
        })
        .collect();
    if savers.is_empty() {
        return Err(Error::Usage(format!(
            "--best: {} has no BestModelSaver trace, so no run of it kept a best model; pass --weights or --checkpoint",
            manifest.file.display()
        )));
    }
    let version = match &manifest.run.log_dir {
        Some(root) => match crate::run_dir::latest(root)? {
            Some(v) => Some((root.clone(), root.join(crate::run_dir::version_name(v)))),
            None => {
                return Err(Error::Usage(format!(
                    "--best: no run of this manifest yet (no version_N in {})",
                    root.display()
                )))
            }
        },
        None => None,
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    for (model, save_dir) in &savers {
        let named = crate::manifest::normalized(&manifest.dir().join(save_dir));
        let dir = version
            .as_ref()
            .and_then(|(root, version)| crate::run_dir::relocate(&named, root, version))
            .unwrap_or(named);
        if crate::system::weights::best_file(&dir, model)?.is_none() {
            return Err(Error::Usage(format!(
                "--best: {} holds no {model}_best_*.safetensors: the run has not saved a best `{model}` yet (it saves after its first evaluation)",
                dir.display()
            )));
        }
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    match dirs.as_slice() {
        [dir] => Ok(dir.clone()),
        _ => Err(Error::Usage(format!(
            "--best: the BestModelSavers save into different directories ({}); pass --weights with one file per model",
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}
