//! Creating components named in the manifest, with errors that point back at the manifest.

use abi_stable::std_types::{RSlice, RStr, RString};
use fe_plugin_api::{ComponentKind, CreateContext, DeviceSpec, ErrorKind, PluginError};

use super::load::PluginSet;
use super::registry::{Entry, Registry};
use crate::error::Error;
use crate::manifest::{KeyPath, Manifest};

/// Everything a component's constructor is told, owned.
pub struct Creation {
    /// Where it is declared.
    pub path: KeyPath,
    /// Keys read.
    pub inputs: Vec<RString>,
    /// Keys written.
    pub outputs: Vec<RString>,
    /// The run's device.
    pub device: DeviceSpec,
    /// Its seed.
    pub seed: u64,
    location: String,
}

impl Creation {
    /// A creation context for the component at `path`.
    pub fn new(
        path: &KeyPath,
        inputs: &[String],
        outputs: &[String],
        device: DeviceSpec,
        run_seed: u64,
    ) -> Self {
        let location = path.to_string();
        // Distinct, reproducible seeds per component, independent of creation order.
        let seed = crate::rng::mix(run_seed, crate::rng::hash_str(&location));
        Self {
            path: path.clone(),
            inputs: inputs.iter().map(|s| RString::from(s.as_str())).collect(),
            outputs: outputs.iter().map(|s| RString::from(s.as_str())).collect(),
            device,
            seed,
            location,
        }
    }

    /// The context as passed across the boundary.
    pub fn context(&self) -> CreateContext<'_> {
        CreateContext {
            location: RStr::from_str(&self.location),
            inputs: RSlice::from_slice(&self.inputs),
            outputs: RSlice::from_slice(&self.outputs),
            device: self.device,
            seed: self.seed,
        }
    }
}

/// The error for a component that could not be created: config errors point at the field.
pub fn creation_error(manifest: &Manifest, path: &KeyPath, error: PluginError) -> Error {
    let field = error.field.as_str();
    let at = if field.is_empty() {
        path.clone()
    } else {
        path.join_dotted(field)
    };
    let what = format!("{}::{}", error.plugin, error.component);
    match error.kind {
        ErrorKind::Config | ErrorKind::Unsupported | ErrorKind::Failed => {
            manifest.error_at(&at, format!("{} ({what})", error.message))
        }
        ErrorKind::Panicked => manifest.error_at(
            &at,
            format!("{what} panicked while being created: {}", error.message),
        ),
    }
}

/// The registration of component `name` of `kind`, declared at `path`; an unknown name is the
/// error [`unknown_component`] gives there.
pub fn registered<'r>(
    manifest: &Manifest,
    registry: &'r Registry,
    path: &KeyPath,
    kind: ComponentKind,
    name: &str,
) -> Result<&'r Entry, Error> {
    registry
        .get(kind, name)
        .ok_or_else(|| unknown_component(manifest, registry, path, kind, name))
}

/// The error for a name no plugin provides, with a suggestion when one is close.
pub fn unknown_component(
    manifest: &Manifest,
    registry: &Registry,
    path: &KeyPath,
    kind: ComponentKind,
    name: &str,
) -> Error {
    let hint = match registry.suggest(kind, name) {
        Some(close) => format!("; did you mean `{close}`?"),
        None => {
            let known = registry.names(kind);
            if known.is_empty() {
                format!("; no loaded plugin provides any {kind} (check the plugin search path with `fe-host plugins list`)")
            } else {
                format!(" (known: {})", known.join(", "))
            }
        }
    };
    let notes = plugin_notes(&registry.plugins);
    let error = manifest.error_at(path, format!("unknown {kind} `{name}`{hint}{notes}"));
    // A plugin file that failed to load may be the one meant to provide it: then this is a
    // plugin problem (exit 3), not a mistake in the manifest.
    match error {
        Error::Manifest(message) if !registry.plugins.skipped.is_empty() => {
            Error::Plugins(vec![message])
        }
        other => other,
    }
}

/// What may explain a component nothing provides: plugin files that were found but could not
/// be loaded, or, when no plugin loaded at all, where fe-host looked.
pub fn plugin_notes(plugins: &PluginSet) -> String {
    let mut notes = String::new();
    for (path, reason) in &plugins.skipped {
        notes.push_str(&format!(
            "; note: {} could not be loaded: {reason}",
            path.display()
        ));
    }
    if plugins.plugins.is_empty() {
        let searched: Vec<String> = plugins
            .searched
            .iter()
            .map(|entry| format!("{} ({})", entry.path.display(), entry.origin))
            .collect();
        if searched.is_empty() {
            notes.push_str("; note: no plugin search path was given");
        } else {
            notes.push_str(&format!(
                "; note: no plugins were found in {}",
                searched.join(", ")
            ));
        }
    }
    notes
}
