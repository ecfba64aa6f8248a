//! Phase 2 of loading: open each compatible plugin with abi_stable (layout check included),
//! per file, never through abi_stable's per-type cache, and never unloaded.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use abi_stable::library::{lib_header_from_path, LibraryError};
use fe_plugin_api::build_info::BuildInfo;
use fe_plugin_api::ffi::PluginModRef;
use fe_plugin_api::ComponentInfo;
use sha2::{Digest, Sha256};

use super::discover::{candidates, Candidate, SearchEntry};
use super::probe::{probe, Probe};

/// A plugin that passed every check.
pub struct LoadedPlugin {
    /// The file.
    pub path: PathBuf,
    /// What it was built against.
    pub info: BuildInfo,
    /// What it provides.
    pub components: Vec<ComponentInfo>,
    /// Its root module.
    pub module: PluginModRef,
}

impl LoadedPlugin {
    /// The plugin crate's name.
    pub fn name(&self) -> &str {
        self.info.plugin_name.as_str()
    }

    /// The plugin crate's version.
    pub fn version(&self) -> &str {
        self.info.plugin_version.as_str()
    }
}

/// Every plugin found on the search path.
#[derive(Default)]
pub struct PluginSet {
    /// Loaded plugins, in search-path order.
    pub plugins: Vec<LoadedPlugin>,
    /// Shared libraries found in plugin directories that are not plugins, and why.
    pub skipped: Vec<(PathBuf, String)>,
    /// Files hidden by an earlier file of the same name.
    pub shadowed: Vec<PathBuf>,
}

/// The build info fe-host itself was compiled with; plugins must match it.
pub fn host_build_info() -> BuildInfo {
    BuildInfo::current("fe-host", env!("CARGO_PKG_VERSION"))
}

/// Loads every plugin on the search path. All problems are collected and returned together.
pub fn load_all(
    entries: &[SearchEntry],
    pins: &BTreeMap<String, String>,
) -> Result<PluginSet, Vec<String>> {
    let (found, mut problems, shadowed) = candidates(entries);
    let mut set = PluginSet {
        shadowed,
        ..PluginSet::default()
    };
    let host = host_build_info();
    for candidate in found {
        match load_one(&candidate, &host, pins) {
            Ok(Some(plugin)) => set.plugins.push(plugin),
            Ok(None) => {}
            Err(Skip::NotAPlugin(reason)) if !candidate.explicit => {
                set.skipped.push((candidate.path, reason))
            }
            Err(Skip::NotAPlugin(reason)) | Err(Skip::Refused(reason)) => {
                problems.push(format!("{}: {reason}", candidate.path.display()))
            }
        }
    }
    if problems.is_empty() {
        Ok(set)
    } else {
        Err(problems)
    }
}

enum Skip {
    NotAPlugin(String),
    Refused(String),
}

fn load_one(
    candidate: &Candidate,
    host: &BuildInfo,
    pins: &BTreeMap<String, String>,
) -> Result<Option<LoadedPlugin>, Skip> {
    let path = &candidate.path;
    let info = match probe(path) {
        Ok(Probe::Plugin(info)) => *info,
        Ok(Probe::NotAPlugin(reason)) => return Err(Skip::NotAPlugin(reason)),
        Err(e) => return Err(Skip::Refused(format!("cannot read: {e}"))),
    };
    let mismatches = info.mismatches(host);
    if !mismatches.is_empty() {
        let diff: Vec<String> = mismatches
            .iter()
            .map(|(what, plugin, host)| format!("{what} {plugin} (fe-host has {host})"))
            .collect();
        return Err(Skip::Refused(format!(
            "plugin `{}` was built against {}; rebuild it against fe-plugin-api {}.x",
            info.plugin_name.as_str(),
            diff.join(", "),
            fe_plugin_api::build_info::api_key(host.plugin_api_version.as_str()),
        )));
    }
    if let Some(expected) = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| pins.get(n))
    {
        let actual = sha256_file(path).map_err(|e| Skip::Refused(format!("cannot hash: {e}")))?;
        if &actual != expected {
            return Err(Skip::Refused(format!(
                "sha256 is {actual} but the manifest pins {expected}; refusing to load it"
            )));
        }
    }
    let module = open(path).map_err(Skip::Refused)?;
    let description = module.describe()();
    Ok(Some(LoadedPlugin {
        path: path.clone(),
        info,
        components: description.components.into_iter().collect(),
        module,
    }))
}

fn open(path: &Path) -> Result<PluginModRef, String> {
    let header = lib_header_from_path(path).map_err(|e| describe_library_error(&e))?;
    header
        .init_root_module::<PluginModRef>()
        .map_err(|e| describe_library_error(&e))
}

/// abi_stable's messages span many lines; keep the part a user can act on.
fn describe_library_error(error: &LibraryError) -> String {
    match error {
        LibraryError::OpenError { err, .. } => format!("cannot be loaded: {err}"),
        LibraryError::GetSymbolError { .. } => "not an fe-host plugin (no abi_stable root module)".to_owned(),
        LibraryError::InvalidAbiHeader(_) => {
            "built with an incompatible abi_stable version; rebuild it against this fe-plugin-api".to_owned()
        }
        LibraryError::IncompatibleVersionNumber {
            expected_version,
            actual_version,
            ..
        } => format!(
            "its root module is fe-plugin-api {actual_version}, fe-host expects {expected_version}; rebuild the plugin"
        ),
        LibraryError::AbiInstability(_) => {
            "ABI layout mismatch: the plugin's types differ from this fe-host's fe-plugin-api although the \
             versions match (a modified fe-plugin-api?); rebuild it against the released crate"
                .to_owned()
        }
        other => {
            let text = other.to_string();
            let first = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("cannot be loaded");
            format!("cannot be loaded: {first}")
        }
    }
}

/// Lowercase hex sha256 of a file's contents.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
