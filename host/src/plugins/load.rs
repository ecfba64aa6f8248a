//! Phase 2 of loading: open each compatible plugin with abi_stable (layout check included),
//! per file, never through abi_stable's per-type cache, and never unloaded.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use abi_stable::abi_stability::abi_checking::check_layout_compatibility;
use abi_stable::library::{lib_header_from_path, LibraryError, RawLibrary};
use abi_stable::std_types::RBoxError;
use abi_stable::StableAbi;
use fe_plugin_api::build_info::BuildInfo;
use fe_plugin_api::ffi::{ExtHeader, PluginExtRef, PluginModRef, PLUGIN_EXT_SYMBOL};
use fe_plugin_api::host_link::{HostLinkHeader, PluginHostLinkRef, PLUGIN_HOST_LINK_SYMBOL};
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
    /// Its extension module (run info, field declarations); `None` for plugins built before
    /// fe-plugin-api 0.1.1.
    pub ext: Option<PluginExtRef>,
    /// Its host-link module (graphs); `None` for plugins built before fe-plugin-api 0.1.2.
    pub host_link: Option<PluginHostLinkRef>,
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
    /// Where plugins were looked for, for messages about a component nothing provides.
    pub searched: Vec<SearchEntry>,
    /// Problems that refused a plugin, kept only by [`load_all_listing`] (`plugins list`).
    pub refused: Vec<String>,
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
    let set = load_all_listing(entries, pins);
    if set.refused.is_empty() {
        Ok(set)
    } else {
        Err(set.refused)
    }
}

/// Loads every plugin that passes its checks and keeps the problems of the others in
/// [`PluginSet::refused`]: what `plugins list` shows, good plugins and bad files together.
pub fn load_all_listing(entries: &[SearchEntry], pins: &BTreeMap<String, String>) -> PluginSet {
    let super::discover::Found {
        files: found,
        mut problems,
        shadowed,
        unreadable,
    } = candidates(entries);
    let mut set = PluginSet {
        shadowed,
        skipped: unreadable,
        searched: entries.to_vec(),
        ..PluginSet::default()
    };
    let names: Vec<String> = found
        .iter()
        .filter_map(|c| c.path.file_name()?.to_str().map(str::to_owned))
        .collect();
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
    problems.extend(unmatched_pins(pins, &names));
    set.refused = problems;
    set
}

/// A pin whose file name no file on the search path has checks nothing: a typo in it would
/// silently turn integrity pinning off for the file meant.
fn unmatched_pins(pins: &BTreeMap<String, String>, found: &[String]) -> Vec<String> {
    let listing = if found.is_empty() {
        "none".to_owned()
    } else {
        found.join(", ")
    };
    pins.keys()
        .filter(|pin| !found.contains(pin))
        .map(|pin| {
            format!(
                "[plugins] sha256 pins `{pin}`, but no plugin file on the search path is called that \
                 (files found: {listing}); a pin that matches no file checks nothing"
            )
        })
        .collect()
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
    let ext = open_ext(path).map_err(Skip::Refused)?;
    let host_link = open_host_link(path).map_err(Skip::Refused)?;
    let description = module.describe()();
    Ok(Some(LoadedPlugin {
        path: path.clone(),
        info,
        components: description.components.into_iter().collect(),
        module,
        ext,
        host_link,
    }))
}

fn open(path: &Path) -> Result<PluginModRef, String> {
    let header = lib_header_from_path(path).map_err(|e| describe_library_error(&e))?;
    header
        .init_root_module::<PluginModRef>()
        .map_err(|e| describe_library_error(&e))
}

/// The plugin's extension module, when it exports one (fe-plugin-api 0.1.1 and later), after
/// abi_stable's layout check against this host's.
fn open_ext(path: &Path) -> Result<Option<PluginExtRef>, String> {
    let library = RawLibrary::load_at(path).map_err(|e| describe_library_error(&e))?;
    // SAFETY: a file that passed the build-info and root-module checks exports this symbol
    // only through `export_plugin!`, as a `'static ExtHeader`.
    let header: &'static ExtHeader =
        match unsafe { library.get::<&'static ExtHeader>(PLUGIN_EXT_SYMBOL) } {
            Ok(symbol) => *symbol,
            Err(_) => return Ok(None),
        };
    // Plugins are never unloaded: keep the handle's reference to the library forever.
    std::mem::forget(library);
    check_layout_compatibility(<PluginExtRef as StableAbi>::LAYOUT, header.layout)
        .map_err(|e| describe_library_error(&LibraryError::AbiInstability(RBoxError::new(e))))?;
    Ok(Some((header.module)()))
}

/// The plugin's host-link module, when it exports one (fe-plugin-api 0.1.2 and later), after
/// abi_stable's layout check against this host's.
fn open_host_link(path: &Path) -> Result<Option<PluginHostLinkRef>, String> {
    let library = RawLibrary::load_at(path).map_err(|e| describe_library_error(&e))?;
    // SAFETY: a file that passed the build-info and root-module checks exports this symbol
    // only through `export_plugin!`, as a `'static HostLinkHeader`.
    let header: &'static HostLinkHeader =
        match unsafe { library.get::<&'static HostLinkHeader>(PLUGIN_HOST_LINK_SYMBOL) } {
            Ok(symbol) => *symbol,
            Err(_) => return Ok(None),
        };
    // Plugins are never unloaded: keep the handle's reference to the library forever.
    std::mem::forget(library);
    check_layout_compatibility(<PluginHostLinkRef as StableAbi>::LAYOUT, header.layout)
        .map_err(|e| describe_library_error(&LibraryError::AbiInstability(RBoxError::new(e))))?;
    Ok(Some((header.module)()))
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
        LibraryError::AbiInstability(errors) => {
            let at = abi_mismatch_place(&errors.to_string())
                .map(|place| format!(" at {place}"))
                .unwrap_or_default();
            format!(
                "ABI layout mismatch{at}: the plugin's types differ from this fe-host's fe-plugin-api although the \
                 versions match (a modified fe-plugin-api?); rebuild it against the released crate"
            )
        }
        other => {
            let text = other.to_string();
            let first = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("cannot be loaded");
            format!("cannot be loaded: {first}")
        }
    }
}

/// Where abi_stable's layout report says the types part: the field path (`field_name:` lines of
/// its stack trace), the type there, and the first error with what was expected and found.
fn abi_mismatch_place(report: &str) -> Option<String> {
    let mut fields = Vec::new();
    let mut ty = None;
    let mut lines = report.lines().map(str::trim);
    let mut error = None;
    // Only the stack trace names the path; the layouts printed after it list every field.
    let mut in_trace = true;
    while let Some(line) = lines.next() {
        if line.starts_with("Layout of expected type") {
            in_trace = false;
        } else if let (true, Some(name)) = (in_trace, line.strip_prefix("field_name:")) {
            fields.push(name.to_owned());
        } else if let (true, Some(t)) = (in_trace, line.strip_prefix("type:")) {
            ty = Some(t.to_owned());
        } else if let Some(what) = line.strip_prefix("Error:") {
            let mut expected_found = Vec::new();
            for label in ["Expected:", "Found:"] {
                let value = lines
                    .by_ref()
                    .skip_while(|l| *l != label)
                    .nth(1)
                    .unwrap_or("")
                    .to_owned();
                expected_found.push(value);
            }
            error = Some(format!(
                "{} (expected {}, found {})",
                what.trim(),
                expected_found[0],
                expected_found[1]
            ));
            break;
        }
    }
    if fields.is_empty() && error.is_none() {
        return None;
    }
    let mut place = String::new();
    if !fields.is_empty() {
        place.push_str(&format!("field `{}`", fields.join(".")));
    }
    if let Some(ty) = ty {
        place.push_str(&format!(" of type `{ty}`"));
    }
    if let Some(error) = error {
        place.push_str(&format!(": {error}"));
    }
    Some(place.trim().to_owned())
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

#[cfg(test)]
mod tests {
    use super::abi_mismatch_place;

    #[test]
    fn abi_report_names_the_field_type_and_difference() {
        // The shape of abi_stable 0.11's AbiInstabilityError text.
        let report = "Compared <this>:\n    PluginMod\nTo <other>:\n    PluginMod\n\n1 error(s)inside:\n    <other>\n\n    field_name:create_model\n    type:extern fn()\n    size:8 align:8\n\n    field_name:config\n    type:RStr<'a>\n    size:16 align:8\n\nLayout of expected type:\n    ...\n\nError:incompatible type size\nExpected:\n    16\nFound:\n    24\n";
        assert_eq!(
            abi_mismatch_place(report).as_deref(),
            Some("field `create_model.config` of type `RStr<'a>`: incompatible type size (expected 16, found 24)")
        );
        assert_eq!(abi_mismatch_place("something else"), None);
    }
}
