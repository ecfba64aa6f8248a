//! Where plugins are looked for: the manifest's `[plugins] paths`, `--plugin-dir`,
//! `FE_PLUGIN_PATH`, then the directory holding the fe-host executable (a build tree:
//! `target/debug/` holds the host and the sample plugins) and the plugin root of an installed
//! layout, `<prefix>/lib/fe-host/plugins` next to `<prefix>/bin/fe-host` (what
//! `scripts/install.sh PREFIX` writes). Earlier entries win: a file name found again later is
//! shadowed, as with `PATH`.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// Where a search-path entry came from (shown in errors and `plugins list`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The manifest's `[plugins] paths`.
    Manifest,
    /// `--plugin-dir` on the command line.
    Flag,
    /// The `FE_PLUGIN_PATH` environment variable.
    Env,
    /// The directory of the fe-host executable.
    ExeDir,
    /// `../lib/fe-host/plugins` from the directory of the fe-host executable.
    PluginRoot,
}

/// The plugin root of an installed layout, relative to the executable's directory.
pub const PLUGIN_ROOT: &str = "../lib/fe-host/plugins";

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::Manifest => "manifest [plugins] paths",
            Origin::Flag => "--plugin-dir",
            Origin::Env => "FE_PLUGIN_PATH",
            Origin::ExeDir => "next to the fe-host executable",
            Origin::PluginRoot => "the plugin root of the fe-host executable",
        })
    }
}

/// One entry of the search path.
#[derive(Debug, Clone)]
pub struct SearchEntry {
    /// A plugin file or a directory of them.
    pub path: PathBuf,
    /// Where the entry came from.
    pub origin: Origin,
}

/// A file to load, and whether it was named explicitly (then it must be a plugin).
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The file.
    pub path: PathBuf,
    /// Named directly rather than found in a directory.
    pub explicit: bool,
    /// The search-path entry it came from.
    pub origin: Origin,
}

/// The search path in precedence order.
pub fn search_path(
    manifest_paths: &[PathBuf],
    flag_dirs: &[PathBuf],
    env: Option<&str>,
    exe_dir: Option<&Path>,
) -> Vec<SearchEntry> {
    let mut entries = Vec::new();
    let mut push = |path: PathBuf, origin| entries.push(SearchEntry { path, origin });
    for path in manifest_paths {
        push(path.clone(), Origin::Manifest);
    }
    for path in flag_dirs {
        push(path.clone(), Origin::Flag);
    }
    if let Some(env) = env {
        for part in std::env::split_paths(env).filter(|p| !p.as_os_str().is_empty()) {
            push(part, Origin::Env);
        }
    }
    if let Some(dir) = exe_dir {
        push(dir.to_path_buf(), Origin::ExeDir);
        push(
            crate::manifest::normalized(&dir.join(PLUGIN_ROOT)),
            Origin::PluginRoot,
        );
    }
    entries
}

/// `true` for the platform's shared-library file names.
pub fn is_library_name(path: &Path) -> bool {
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    matches!(extension, "so" | "dylib" | "dll")
}

/// What [`candidates`] finds on a search path.
#[derive(Default)]
pub struct Found {
    /// The files to load.
    pub files: Vec<Candidate>,
    /// Entries that cannot be searched at all (a missing `--plugin-dir`).
    pub problems: Vec<String>,
    /// Files whose name an earlier directory's file already has.
    pub shadowed: Vec<PathBuf>,
    /// Entries of a plugin directory named like a library that are no file to load (a
    /// symbolic link to nothing, a directory), with why: shown like files that are no plugin.
    pub unreadable: Vec<(PathBuf, String)>,
}

/// Why `path`, named like a library, is no file to load.
fn not_a_file(path: &Path) -> String {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => match std::fs::read_link(path) {
            Ok(target) => format!(
                "a symbolic link to {}, which does not exist",
                target.display()
            ),
            Err(e) => format!("a symbolic link that cannot be read: {e}"),
        },
        Ok(meta) if meta.is_dir() => "a directory, not a library file".into(),
        Ok(_) => "not a regular file".into(),
        Err(e) => format!("cannot be read: {e}"),
    }
}

/// The files to load, de-duplicated by canonical path and shadowed by file name. Missing
/// entries (other than the executable's directory) are returned as problems.
pub fn candidates(entries: &[SearchEntry]) -> Found {
    let mut found = Vec::new();
    let mut problems = Vec::new();
    let mut shadowed = Vec::new();
    let mut unreadable = Vec::new();
    let mut seen_paths = HashSet::new();
    let mut seen_names = HashSet::new();
    for entry in entries {
        let mut files = Vec::new();
        if entry.path.is_dir() {
            match std::fs::read_dir(&entry.path) {
                Ok(dir) => {
                    let mut names: Vec<PathBuf> = dir
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| is_library_name(p))
                        .collect();
                    names.sort();
                    for path in names {
                        if path.is_file() {
                            files.push((path, false));
                        } else {
                            let why = not_a_file(&path);
                            unreadable.push((path, why));
                        }
                    }
                }
                Err(e) => problems.push(format!(
                    "{}: cannot list plugin directory ({}): {e}",
                    entry.path.display(),
                    entry.origin
                )),
            }
        } else if entry.path.is_file() {
            files.push((entry.path.clone(), true));
        } else if !matches!(entry.origin, Origin::ExeDir | Origin::PluginRoot) {
            problems.push(format!(
                "{}: plugin file or directory not found (from {})",
                entry.path.display(),
                entry.origin
            ));
        }
        for (path, explicit) in files {
            let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            if !seen_paths.insert(canonical) {
                continue;
            }
            let name = path
                .file_name()
                .map(|n| n.to_os_string())
                .unwrap_or_default();
            if !seen_names.insert(name) {
                shadowed.push(path);
                continue;
            }
            found.push(Candidate {
                path,
                explicit,
                origin: entry.origin,
            });
        }
    }
    Found {
        files: found,
        problems,
        shadowed,
        unreadable,
    }
}
