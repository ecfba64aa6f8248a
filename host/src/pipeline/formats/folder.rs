//! `type = "image_folder"`: FastEstimator's `LabeledDirDataset` — `dir/<class>/<file>`, a
//! sample per file, with the file's path (text) and its class's label (int64).
//!
//! As in FastEstimator, a class is any directory below `dir` that directly holds matching
//! files (`dir/animals/cat` is class `animals/cat`), labels number the sorted class names from
//! 0 unless `classes` fixes them, and hidden files (`.name`) are skipped. Where this differs:
//! files directly in `dir` belong to no class and are ignored (FastEstimator makes them a
//! class named ""), hidden directories are skipped too, symbolic links to directories are not
//! followed, `file_extension` ignores ASCII case, and samples are ordered by class then file
//! name, so every machine sees the same order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};
use tch::Tensor;

use super::stack_key;
use crate::error::{Error, Result};
use crate::pipeline::Source;

/// `type = "image_folder"`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct FolderConfig {
    /// The root directory (relative to the manifest).
    pub dir: PathBuf,
    /// Only files whose names end with this (`".png"`; the dot may be left out).
    #[serde(default)]
    pub file_extension: Option<String>,
    /// The keys of the path and the label.
    #[serde(default = "default_keys", deserialize_with = "two_keys")]
    pub keys: [String; 2],
    /// Class names in label order; a directory not listed is an error. Gives train and eval
    /// folders the same labels even when one lacks a class.
    #[serde(default, deserialize_with = "class_list")]
    pub classes: Option<Vec<String>>,
}

fn default_keys() -> [String; 2] {
    ["x".to_owned(), "y".to_owned()]
}

fn two_keys<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<[String; 2], D::Error> {
    let keys = <[String; 2]>::deserialize(d)?;
    if keys[0].is_empty() || keys[1].is_empty() || keys[0] == keys[1] {
        return Err(serde::de::Error::custom(format!(
            "expected two different, non-empty keys (path, label), got {keys:?}"
        )));
    }
    Ok(keys)
}

fn class_list<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Vec<String>>, D::Error> {
    let classes = Vec::<String>::deserialize(d)?;
    for (i, class) in classes.iter().enumerate() {
        if classes[..i].contains(class) {
            return Err(serde::de::Error::custom(format!(
                "class `{class}` is listed twice"
            )));
        }
    }
    if classes.is_empty() {
        return Err(serde::de::Error::custom("expected at least one class"));
    }
    Ok(Some(classes))
}

/// Top-level directories with no files anywhere below them: not classes, by FastEstimator's
/// rule, though a user may have meant them as classes yet to be filled.
pub(super) fn classless(
    top_level: &[String],
    found: &BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    let mut empty: Vec<String> = top_level
        .iter()
        .filter(|dir| {
            !found
                .keys()
                .any(|class| class == *dir || class.starts_with(&format!("{dir}/")))
        })
        .cloned()
        .collect();
    empty.sort();
    empty
}

/// The files of a class-per-directory tree.
pub struct FolderSource {
    keys: Vec<String>,
    classes: Vec<String>,
    /// (path, label), ordered by class name then file name.
    samples: Vec<(String, i64)>,
}

impl FolderSource {
    /// Walks `dir` and lists every matching file.
    pub fn open(config: &FolderConfig, dir: &Path) -> Result<Self> {
        let root = dir.join(&config.dir);
        let suffix = config.file_extension.as_ref().map(|e| {
            let lower = e.to_ascii_lowercase();
            if lower.starts_with('.') || lower.is_empty() {
                lower
            } else {
                format!(".{lower}")
            }
        });
        let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut subdirectories = 0usize;
        let mut top_level: Vec<String> = Vec::new();
        let mut pending: Vec<String> = vec![String::new()];
        while let Some(relative) = pending.pop() {
            let here = if relative.is_empty() {
                root.clone()
            } else {
                root.join(&relative)
            };
            for (name, is_dir) in list(&here)? {
                let child = if relative.is_empty() {
                    name.clone()
                } else {
                    format!("{relative}/{name}")
                };
                if is_dir {
                    subdirectories += 1;
                    if relative.is_empty() {
                        top_level.push(name.clone());
                    }
                    pending.push(child);
                } else if !relative.is_empty()
                    && suffix
                        .as_ref()
                        .is_none_or(|s| name.to_ascii_lowercase().ends_with(s.as_str()))
                {
                    found.entry(relative.clone()).or_default().push(child);
                }
            }
        }
        if found.is_empty() {
            let filter = suffix
                .as_ref()
                .map(|s| format!(" ending with `{s}`"))
                .unwrap_or_default();
            let message = if subdirectories == 0 {
                "has no class subdirectories; expected <dir>/<class>/<file>".to_owned()
            } else {
                format!("has no files{filter} in any class subdirectory")
            };
            return Err(Error::data(&root, message));
        }
        let classes: Vec<String> = match &config.classes {
            Some(classes) => {
                if let Some(stray) = found.keys().find(|c| !classes.contains(c)) {
                    return Err(Error::data(
                        &root,
                        format!("directory `{stray}` holds files but is not in `classes`"),
                    ));
                }
                classes.clone()
            }
            None => {
                let empty = classless(&top_level, &found);
                if !empty.is_empty() {
                    // FastEstimator's rule (a class is a folder with files) shifts the labels of
                    // every class after an empty one, and a train and an eval folder that differ
                    // in which are empty then disagree on labels without a sign.
                    eprintln!(
                        "warning: {}: {} hold{} no files, so {} no class and the labels count only the {} folders that do; list `classes` to fix the labels",
                        root.display(),
                        empty.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", "),
                        if empty.len() == 1 { "s" } else { "" },
                        if empty.len() == 1 { "it is" } else { "they are" },
                        found.len()
                    );
                }
                found.keys().cloned().collect()
            }
        };
        let root_text = root.to_str().ok_or_else(|| {
            Error::data(
                &root,
                "the directory's path is not valid UTF-8, so file paths cannot be passed on as text",
            )
        })?;
        let mut samples = Vec::new();
        for (class, mut files) in found {
            let label = classes.iter().position(|c| *c == class).unwrap_or(0) as i64;
            files.sort();
            for file in files {
                let path = Path::new(root_text).join(&file);
                samples.push((path.to_string_lossy().into_owned(), label));
            }
        }
        // Keep label order within the sample list (BTreeMap gave class-name order).
        samples.sort_by_key(|(_, label)| *label);
        Ok(Self {
            keys: config.keys.to_vec(),
            classes,
            samples,
        })
    }

    /// Class names; a class's label is its position.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    fn sample(&self, index: u64) -> std::result::Result<&(String, i64), String> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.samples.get(i))
            .ok_or_else(|| {
                format!(
                    "sample {index} is out of range (the folder has {} files)",
                    self.samples.len()
                )
            })
    }
}

/// The entries of `dir`, sorted, hidden ones left out: (name, is a directory to descend).
fn list(dir: &Path) -> Result<Vec<(String, bool)>> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::data(dir, format!("cannot read directory: {e}")))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::data(dir, format!("cannot read directory: {e}")))?;
        let name = entry.file_name().into_string().map_err(|name| {
            Error::data(
                dir.join(&name),
                "the name is not valid UTF-8, so the path cannot be passed on as text",
            )
        })?;
        if name.starts_with('.') {
            continue;
        }
        let kind = entry
            .file_type()
            .map_err(|e| Error::data(dir.join(&name), format!("cannot read: {e}")))?;
        let is_file = if kind.is_symlink() {
            // A link counts as the file it points to; links to directories are not followed,
            // which also keeps a link cycle from walking forever.
            std::fs::metadata(entry.path()).is_ok_and(|m| m.is_file())
        } else {
            kind.is_file()
        };
        if kind.is_dir() || is_file {
            out.push((name, kind.is_dir()));
        }
    }
    out.sort();
    Ok(out)
}

impl Source for FolderSource {
    fn len(&self) -> u64 {
        self.samples.len() as u64
    }

    fn keys(&self) -> &[String] {
        &self.keys
    }

    fn get(&self, index: u64) -> std::result::Result<Vec<Tensor>, String> {
        let (path, label) = self.sample(index)?;
        Ok(vec![fe_plugin_api::text_tensor(path), Tensor::from(*label)])
    }

    fn get_batch(&self, indices: &[u64]) -> std::result::Result<Vec<Tensor>, String> {
        let picked = indices
            .iter()
            .map(|&i| self.sample(i))
            .collect::<std::result::Result<Vec<_>, String>>()?;
        let paths: Vec<Tensor> = picked
            .iter()
            .map(|(path, _)| fe_plugin_api::text_tensor(path))
            .collect();
        let labels: Vec<i64> = picked.iter().map(|(_, label)| *label).collect();
        Ok(vec![
            stack_key(&self.keys[0], &paths)?,
            Tensor::from_slice(&labels),
        ])
    }
}
