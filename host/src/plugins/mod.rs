//! Plugins: discovery, two-phase loading (build info from the file, then abi_stable's
//! layout check), and the registry of everything a manifest can name.

pub mod create;
pub mod discover;
pub mod handles;
pub mod load;
pub mod probe;
pub mod registry;
pub mod run_info;
pub mod show;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;

pub use discover::{search_path, Origin, SearchEntry};
pub use load::{host_build_info, load_all_listing, sha256_file, LoadedPlugin, PluginSet};
pub use registry::{Entry, Provider, Registry};
pub use run_info::{run_info, Membership};

use crate::error::{Error, Result};
use crate::manifest::Manifest;

/// Where to look for plugins, from every source in precedence order.
pub fn default_search_path(manifest_paths: &[PathBuf], flag_dirs: &[PathBuf]) -> Vec<SearchEntry> {
    let env = std::env::var("FE_PLUGIN_PATH").ok();
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.to_path_buf()));
    search_path(
        manifest_paths,
        flag_dirs,
        env.as_deref(),
        exe_dir.as_deref(),
    )
}

/// Loads every plugin on `search` and indexes their components with the host's built-ins.
pub fn load_registry(search: &[SearchEntry], pins: &BTreeMap<String, String>) -> Result<Registry> {
    let set = load::load_all(search, pins).map_err(Error::Plugins)?;
    Registry::new(set).map_err(Error::Plugins)
}

/// [`load_registry`] for `manifest` (its sha256 pins), then tells the plugins about its run
/// (manifest and output directories, rank) before anything is created.
pub fn load_manifest_registry(search: &[SearchEntry], manifest: &Manifest) -> Result<Registry> {
    let registry = load_registry(search, &manifest.plugins.sha256)?;
    // A data-parallel run announces again with its rank once it has joined its group.
    registry.announce(&run_info(manifest, Membership::SINGLE));
    Ok(registry)
}

/// The text of `fe-host plugins list`.
pub fn render_list(registry: &Registry, search: &[SearchEntry]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "plugin search path (first match wins):");
    for entry in search {
        let _ = writeln!(out, "  {}  ({})", entry.path.display(), entry.origin);
    }
    let host = host_build_info();
    let _ = writeln!(
        out,
        "\nfe-host {} — fe-plugin-api {}, tch {}, libtorch {} ({}), C++11 ABI {}",
        env!("CARGO_PKG_VERSION"),
        host.plugin_api_version.as_str(),
        host.tch_version.as_str(),
        host.libtorch_version.as_str(),
        host.libtorch_flavour.as_str(),
        host.cxx11_abi.as_str(),
    );
    let section = |out: &mut String, title: &str, provider: Provider| {
        let _ = writeln!(out, "\n{title}");
        for entry in registry.entries().filter(|e| e.provider == provider) {
            let mode = if entry.info.default_mode.is_empty() {
                String::new()
            } else {
                format!(" [mode: {}]", entry.info.default_mode)
            };
            let kind = if entry.info.is_metric {
                "metric".to_owned()
            } else {
                entry.info.kind.to_string()
            };
            let _ = writeln!(
                out,
                "  {:<10} {:<18} {}{mode}",
                kind, entry.info.name, entry.info.doc
            );
        }
    };
    section(&mut out, "built in", Provider::Builtin);
    for (index, plugin) in registry.plugins.plugins.iter().enumerate() {
        let title = format!(
            "{} {}  {}  (built against fe-plugin-api {})",
            plugin.name(),
            plugin.version(),
            plugin.path.display(),
            plugin.info.plugin_api_version.as_str(),
        );
        section(&mut out, &title, Provider::Plugin(index));
    }
    for (path, reason) in &registry.plugins.skipped {
        let _ = writeln!(out, "\nskipped {}: {reason}", path.display());
    }
    for problem in &registry.plugins.refused {
        let _ = writeln!(out, "\nrefused {problem}");
    }
    for path in &registry.plugins.shadowed {
        let _ = writeln!(
            out,
            "\nshadowed {} (an earlier file of the same name wins)",
            path.display()
        );
    }
    out
}
