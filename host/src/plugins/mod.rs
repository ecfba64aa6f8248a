//! Plugins: discovery, two-phase loading (build info from the file, then abi_stable's
//! layout check), and the registry of everything a manifest can name.

pub mod create;
pub mod discover;
pub mod graphs;
pub mod handles;
pub mod load;
pub mod probe;
pub mod registry;
pub mod run_info;
pub mod show;

use std::fmt::Write;
use std::path::PathBuf;

pub use discover::{search_path, Origin, SearchEntry};
pub use load::{host_build_info, load_all_listing, sha256_file, LoadedPlugin, PluginSet};
pub use registry::{Entry, Provider, Registry};
pub use run_info::{run_info, Membership};
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
