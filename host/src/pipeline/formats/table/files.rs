//! Which files a `path` names: one file, a directory (its files with the format's extension,
//! as Spark, pandas and Hugging Face write a table in parts) or a glob in the file name.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The files `path` (relative to `dir`) names, sorted by name so that a table written in
/// parts (`part-00000.parquet`, ...) reads in its order; `extension` picks a directory's files.
pub fn expand(path: &str, dir: &Path, extension: &str) -> Result<Vec<PathBuf>> {
    let full = dir.join(path);
    let name = full
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let files = if is_pattern(&name) {
        let parent = full.parent().unwrap_or(dir);
        if parent.to_string_lossy().contains(['*', '?', '[']) {
            return Err(Error::data(
                &full,
                "a glob may only be in the file name (`data/part-*.parquet`), not in a directory",
            ));
        }
        listing(parent)?
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| matches(&name, &n.to_string_lossy()))
            })
            .collect()
    } else if full.is_dir() {
        listing(&full)?
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == extension))
            .collect()
    } else if full.exists() {
        vec![full.clone()]
    } else {
        return Err(Error::data(&full, "no such file or directory"));
    };
    if files.is_empty() {
        let what = if is_pattern(&name) {
            "matches no file".to_owned()
        } else {
            format!("holds no `.{extension}` file")
        };
        return Err(Error::data(&full, what));
    }
    Ok(files)
}

fn is_pattern(name: &str) -> bool {
    name.contains(['*', '?'])
}

/// The plain files in `dir` (not hidden ones: `.part` temporaries, `_SUCCESS` markers are
/// skipped by extension or name), sorted by name.
fn listing(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with(['.', '_']);
        if path.is_file() && !hidden {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Shell-style matching: `*` any run of characters, `?` one character.
pub fn matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Classic two-pointer wildcard match with backtracking to the last `*`.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_shell_style() {
        assert!(matches("part-*.parquet", "part-00001.parquet"));
        assert!(matches("*", "a"));
        assert!(matches("a?c*", "abcdef"));
        assert!(!matches("part-*.parquet", "part-00001.parquet.tmp"));
        assert!(!matches("a?c", "ac"));
        assert!(matches("*b*b", "abab"));
    }
}
