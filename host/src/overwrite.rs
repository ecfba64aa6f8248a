//! No command destroys a file it reads: every output a command writes (`--out`,
//! `--save-weights`, `--export`, a saver's `save_dir`, `run.log_dir`) is checked against what the
//! same command reads — its manifest, data, weights, checkpoint, plugins — and against the
//! files fe-host keeps whole (a checkpoint, a run's `checkpoints/`, an export), before anything
//! is written. A refusal names the flag, the path and what it would have hit.
//!
//! An output may hold what is read (`--save-weights` into the folder it loaded other weights
//! from writes only `<model>.safetensors`); it may not be it or lie inside it.
//!
//! Paths are compared after resolving links (`canonicalize`), so `data/../data/x.npy` or a link
//! to the checkpoint is the same file. An output that does not exist yet is resolved through
//! its nearest existing ancestor.

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::manifest::Manifest;

/// What a command reads, each path resolved, with the words that say what it is.
#[derive(Debug, Default, Clone)]
pub struct Reads {
    paths: Vec<(PathBuf, String)>,
}

impl Reads {
    /// Nothing read yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `path` (a file or a directory) as `what` ("the --input file", ...). A path that does
    /// not exist is read by nothing, so it is skipped.
    pub fn add(&mut self, path: &Path, what: impl Into<String>) {
        if let Ok(resolved) = path.canonicalize() {
            self.paths.push((resolved, what.into()));
        }
    }

    /// What running `manifest` reads: the manifest itself, every file or directory its
    /// datasets and models name (any string of their tables that names an existing path
    /// relative to the manifest), and its `[plugins] paths`.
    pub fn of_manifest(manifest: &Manifest) -> Self {
        let mut reads = Self::new();
        reads.add(&manifest.file, "the manifest");
        let dir = manifest.dir();
        for entry in &manifest.pipeline.data {
            for (dataset, _) in entry.datasets.variants() {
                for path in named_paths(&dataset.config, &dir) {
                    reads.add(&path, format!("a file of dataset `{}`", entry.path));
                }
            }
        }
        for model in &manifest.models {
            for path in named_paths(&model.config, &dir) {
                reads.add(&path, format!("a file of model `{}`", model.name));
            }
        }
        // Plugin directories are searched, not read as data: only files count.
        for path in manifest.plugins.paths.iter().map(|p| dir.join(p)) {
            if path.is_file() {
                reads.add(&path, "a plugin file of the manifest");
            }
        }
        reads
    }

    /// Adds the data of an `--input FILE|DIR|KEY=FILE` flag.
    pub fn add_input_spec(&mut self, spec: &str) {
        let path = Path::new(spec);
        if path.exists() {
            self.add(path, "the --input data");
        } else if let Some((_, file)) = spec.split_once('=') {
            self.add(Path::new(file), "the --input data");
        }
    }

    /// Adds where trained weights come from: a weights file or directory, or a checkpoint
    /// (the checkpoint folder and the checkpoint it resolves to).
    pub fn add_weights(&mut self, weights: &crate::predict::Weights) {
        match weights {
            crate::predict::Weights::Files(path) => self.add(path, "the weights"),
            crate::predict::Weights::Checkpoint(path) => match crate::checkpoint::resolve(path) {
                Ok(dir) if !same_file(&dir, path) => {
                    self.add(path, "the checkpoint folder");
                    self.add(&dir, "the checkpoint");
                }
                _ => self.add(path, "the checkpoint"),
            },
            crate::predict::Weights::Random | crate::predict::Weights::Best => {}
        }
    }

    /// Adds every plugin file `registry` loaded.
    pub fn add_plugins(&mut self, registry: &crate::plugins::Registry) {
        for plugin in &registry.plugins.plugins {
            self.add(&plugin.path, "a plugin file");
        }
    }

    /// Refuses writing `out` (given by `flag`) when it is, holds or lies inside something this
    /// command reads, or lies inside a checkpoint, a checkpoint folder or an export.
    pub fn check(&self, flag: &str, out: &Path) -> Result<()> {
        match self.problem(out) {
            Some(why) => Err(Error::Usage(format!(
                "{flag} {}: {why}; choose another path (nothing was written)",
                out.display()
            ))),
            None => Ok(()),
        }
    }

    /// Why writing `out` would destroy something read or kept whole, if it would.
    pub fn problem(&self, out: &Path) -> Option<String> {
        let target = resolve(out);
        for (read, what) in &self.paths {
            if &target == read {
                return Some(format!("is {what} this command reads"));
            }
            if target.starts_with(read) {
                return Some(format!(
                    "is inside {what} ({}), which this command reads",
                    read.display()
                ));
            }
        }
        kept_whole(&target).map(|(dir, kind)| {
            format!(
                "is inside {kind} {}: fe-host keeps it whole (a file written there would make it fail to verify)",
                dir.display()
            )
        })
    }
}

/// The directory among `path` and its ancestors that fe-host writes as one unit and verifies,
/// with what it is: a checkpoint (`MANIFEST.json`), a checkpoint folder (a `latest` pointer
/// file or a checkpoint inside), a run's `checkpoints/`, or an export (a model card).
pub fn kept_whole(path: &Path) -> Option<(PathBuf, &'static str)> {
    path.ancestors().find_map(|dir| {
        if !dir.is_dir() {
            return None;
        }
        if dir.join(crate::checkpoint::store::MANIFEST).is_file() {
            Some("the checkpoint")
        } else if is_checkpoint_root(dir) {
            Some("the checkpoint folder")
        } else if holds_model_card(dir) {
            Some("the export")
        } else {
            None
        }
        .map(|kind| (dir.to_path_buf(), kind))
    })
}

fn is_checkpoint_root(dir: &Path) -> bool {
    let pointer = dir.join(crate::checkpoint::store::LATEST);
    // A run root's `latest` is a link to a version directory; a checkpoint folder's is a file
    // naming a checkpoint beside it.
    let points = std::fs::symlink_metadata(&pointer).is_ok_and(|m| m.is_file() && m.len() < 256)
        && std::fs::read_to_string(&pointer).is_ok_and(|name| {
            let name = name.trim();
            !name.is_empty() && !name.contains('/') && dir.join(name).is_dir()
        });
    let in_run = dir.file_name().is_some_and(|n| n == "checkpoints")
        && dir
            .parent()
            .is_some_and(|p| p.join(crate::run_dir::RUN_FILE).is_file());
    points
        || in_run
        || std::fs::read_dir(dir).is_ok_and(|entries| {
            entries.flatten().any(|e| {
                e.file_name().to_string_lossy().starts_with("ckpt-")
                    && e.path().join(crate::checkpoint::store::MANIFEST).is_file()
            })
        })
}

/// Whether `dir` holds a model card `fe-host export` wrote (a small JSON file with the card's
/// format line).
fn holds_model_card(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let path = entry.path();
        path.extension().is_some_and(|e| e == "json")
            && entry
                .metadata()
                .is_ok_and(|m| m.is_file() && m.len() < 1 << 20)
            && std::fs::read_to_string(&path)
                .is_ok_and(|text| text.contains(crate::predict::card::FORMAT))
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b)
}

/// `path` with links resolved: canonical when it exists, else its nearest existing ancestor
/// canonical with the rest appended (a `..` in the rest taken lexically).
fn resolve(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(resolved) = existing.canonicalize() {
            let mut out = resolved;
            for component in rest.iter().rev() {
                match component {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::CurDir => {}
                    other => out.push(other.as_os_str()),
                }
            }
            return out;
        }
        match (existing.parent(), existing.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last);
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

/// Every string in `table` (nested tables and arrays included) that names an existing file or
/// directory relative to `dir`.
fn named_paths(table: &toml::Table, dir: &Path) -> Vec<PathBuf> {
    fn walk(value: &toml::Value, dir: &Path, out: &mut Vec<PathBuf>) {
        match value {
            toml::Value::String(text) if !text.is_empty() => {
                let path = dir.join(text);
                // A string naming the manifest's folder or one above it (`"."`) is no data
                // location: every output would lie inside it.
                let encloses = |p: &Path| {
                    let (Ok(p), Ok(d)) = (p.canonicalize(), dir.canonicalize()) else {
                        return true;
                    };
                    d.starts_with(p)
                };
                if path.exists() && !encloses(&path) {
                    out.push(path);
                }
            }
            toml::Value::Array(items) => items.iter().for_each(|v| walk(v, dir, out)),
            toml::Value::Table(table) => table.values().for_each(|v| walk(v, dir, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    table.values().for_each(|v| walk(v, dir, &mut out));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fe-overwrite-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn an_output_that_is_holds_or_lies_inside_an_input_is_refused() {
        let dir = temp("inputs");
        std::fs::create_dir_all(dir.join("data/images")).unwrap();
        std::fs::write(dir.join("data/x.npy"), b"x").unwrap();
        let mut reads = Reads::new();
        reads.add(&dir.join("data/x.npy"), "the --input file");
        reads.add(&dir.join("data/images"), "the --input folder");
        reads.add(&dir.join("missing.npy"), "nothing");
        let refused = |out: &Path| reads.check("--out", out).unwrap_err().to_string();
        let error = refused(&dir.join("data/./images/../x.npy"));
        assert!(error.contains("is the --input file"), "{error}");
        assert!(refused(&dir.join("data/images/preds.csv")).contains("inside the --input folder"));
        // Holding an input is no overwrite: only what the output's own name is counts.
        reads.check("--out", &dir.join("data")).unwrap();
        reads.check("--out", &dir.join("data/preds.csv")).unwrap();
        reads.check("--out", &dir.join("missing.npy")).unwrap();
        reads.check("--out", &dir.join("new/deeper/p.csv")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_link_to_an_input_is_the_input() {
        let dir = temp("links");
        std::fs::write(dir.join("x.npy"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.join("x.npy"), dir.join("link.npy")).unwrap();
        let mut reads = Reads::new();
        reads.add(&dir.join("x.npy"), "the --input file");
        assert!(reads.check("--out", &dir.join("link.npy")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn checkpoints_checkpoint_folders_and_exports_are_kept_whole() {
        let dir = temp("kept");
        let checkpoint = dir.join("ck/ckpt-2");
        std::fs::create_dir_all(checkpoint.join("models")).unwrap();
        std::fs::write(checkpoint.join("MANIFEST.json"), b"{}").unwrap();
        std::fs::write(dir.join("ck/latest"), b"ckpt-2\n").unwrap();
        // A file called `latest` that names nothing beside it makes no checkpoint folder.
        std::fs::create_dir_all(dir.join("notes")).unwrap();
        std::fs::write(dir.join("notes/latest"), b"my notes").unwrap();
        std::fs::create_dir_all(dir.join("export")).unwrap();
        std::fs::write(
            dir.join("export/m.json"),
            format!("{{\"format\": \"{}\"}}", crate::predict::card::FORMAT),
        )
        .unwrap();
        std::fs::create_dir_all(dir.join("runs/version_0/checkpoints")).unwrap();
        std::fs::write(dir.join("runs/version_0/run.json"), b"{}").unwrap();
        let reads = Reads::new();
        let kind = |out: &str| {
            reads
                .check("--out", &dir.join(out))
                .unwrap_err()
                .to_string()
        };
        assert!(kind("ck/ckpt-2/models/m.safetensors").contains("inside the checkpoint "));
        assert!(kind("ck/preds.csv").contains("inside the checkpoint folder"));
        assert!(kind("export/m.safetensors").contains("inside the export"));
        assert!(kind("runs/version_0/checkpoints/new/p.npy").contains("checkpoint folder"));
        reads
            .check("--out", &dir.join("runs/version_0/preds.csv"))
            .unwrap();
        reads.check("--out", &dir.join("preds.csv")).unwrap();
        reads.check("--out", &dir.join("notes/p.csv")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn dataset_and_model_tables_name_their_files() {
        let dir = temp("named");
        std::fs::write(dir.join("a.idx"), b"").unwrap();
        std::fs::write(dir.join("m.pt"), b"").unwrap();
        let table: toml::Table =
            toml::from_str("files = { x = 'a.idx', y = 'gone.idx' }\nlist = ['m.pt', '.']\nn = 3")
                .unwrap();
        let mut named = named_paths(&table, &dir);
        named.sort();
        assert_eq!(named, vec![dir.join("a.idx"), dir.join("m.pt")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
