//! Every component the run can name, from plugins and from the host itself, by kind and name.

use std::collections::BTreeMap;

use abi_stable::std_types::{RResult, RStr};
use fe_plugin_api::ffi::{
    DatasetBox, ModelBox, NumpyOpBox, PluginModRef, SlicerBox, TensorOpBox, TraceBox,
};
use fe_plugin_api::{ComponentInfo, ComponentKind, CreateContext, Field, PluginError};

use super::load::PluginSet;

/// A plugin component's fields are asked from its plugin, not kept here.
const NO_FIELDS: &[Field] = &[];

/// Who provides a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// fe-host itself.
    Builtin,
    /// The plugin at this index of the [`PluginSet`].
    Plugin(usize),
}

/// One component.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Who provides it.
    pub provider: Provider,
    /// Its description.
    pub info: ComponentInfo,
    /// A built-in's configuration fields (a plugin's are asked from the plugin).
    pub builtin_fields: &'static [Field],
}

/// The components of the host and of every loaded plugin.
pub struct Registry {
    /// The loaded plugins.
    pub plugins: PluginSet,
    entries: BTreeMap<(ComponentKind, String), Entry>,
}

impl Registry {
    /// Indexes `builtins` (the components fe-host provides itself, which the layers that
    /// implement them hand in, from the top of the crate) and every plugin's components; a name
    /// provided twice for the same kind is a problem naming both providers.
    pub fn new(
        plugins: PluginSet,
        builtins: Vec<(ComponentInfo, &'static [Field])>,
    ) -> Result<Self, Vec<String>> {
        let mut entries: BTreeMap<(ComponentKind, String), Entry> = BTreeMap::new();
        let mut problems = Vec::new();
        let sources = builtins
            .into_iter()
            .map(|(info, fields)| (Provider::Builtin, info, fields))
            .chain(
                plugins
                    .plugins
                    .iter()
                    .enumerate()
                    .flat_map(|(index, plugin)| {
                        plugin
                            .components
                            .iter()
                            .cloned()
                            .map(move |info| (Provider::Plugin(index), info, NO_FIELDS))
                    }),
            );
        for (provider, info, builtin_fields) in sources {
            let key = (info.kind, info.name.to_string());
            if let Some(existing) = entries.get(&key) {
                problems.push(format!(
                    "{} `{}` is provided by both {} and {}; remove one of them from the plugin search path",
                    info.kind,
                    info.name,
                    describe(&plugins, existing.provider),
                    describe(&plugins, provider),
                ));
                continue;
            }
            entries.insert(
                key,
                Entry {
                    provider,
                    info,
                    builtin_fields,
                },
            );
        }
        if problems.is_empty() {
            Ok(Self { plugins, entries })
        } else {
            Err(problems)
        }
    }

    /// The component of `kind` called `name`.
    pub fn get(&self, kind: ComponentKind, name: &str) -> Option<&Entry> {
        self.entries.get(&(kind, name.to_owned()))
    }

    /// Every component, by kind then name.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// Names of `kind` close to `name`, for "did you mean" hints.
    pub fn suggest(&self, kind: ComponentKind, name: &str) -> Option<String> {
        self.entries
            .keys()
            .filter(|(k, _)| *k == kind)
            .map(|(_, n)| {
                (
                    strsim::levenshtein(&n.to_lowercase(), &name.to_lowercase()),
                    n,
                )
            })
            .filter(|(distance, n)| *distance <= 2.max(n.len() / 3))
            .min()
            .map(|(_, n)| n.clone())
    }

    /// The names of `kind`, for listing alternatives.
    pub fn names(&self, kind: ComponentKind) -> Vec<&str> {
        self.entries
            .keys()
            .filter(|(k, _)| *k == kind)
            .map(|(_, n)| n.as_str())
            .collect()
    }

    /// The crate that provides component `name` of `kind` — a plugin's crate name, or
    /// `fe-host` for a built-in (or an unknown name) — so a failure the host detects around a
    /// plugin's component names the plugin, as the plugin's own errors do.
    pub fn provider_crate(&self, kind: ComponentKind, name: &str) -> &str {
        match self.get(kind, name).map(|entry| entry.provider) {
            Some(Provider::Plugin(index)) => self
                .plugins
                .plugins
                .get(index)
                .map_or("fe-host", |plugin| plugin.name()),
            _ => "fe-host",
        }
    }

    /// The version of [`Registry::provider_crate`]'s crate (the host's for a built-in).
    pub fn provider_version(&self, kind: ComponentKind, name: &str) -> &str {
        match self.get(kind, name).map(|entry| entry.provider) {
            Some(Provider::Plugin(index)) => self
                .plugins
                .plugins
                .get(index)
                .map_or(env!("CARGO_PKG_VERSION"), |plugin| plugin.version()),
            _ => env!("CARGO_PKG_VERSION"),
        }
    }

    /// "plugin `fe-models` (path)" or "fe-host (built in)".
    pub fn provider_name(&self, provider: Provider) -> String {
        describe(&self.plugins, provider)
    }

    fn module(&self, provider: Provider) -> Option<PluginModRef> {
        match provider {
            Provider::Plugin(index) => self.plugins.plugins.get(index).map(|p| p.module),
            Provider::Builtin => None,
        }
    }

    fn create<T>(
        &self,
        kind: ComponentKind,
        name: &str,
        config: &str,
        ctx: &CreateContext<'_>,
        pick: impl FnOnce(
            PluginModRef,
        ) -> extern "C" fn(
            RStr<'_>,
            RStr<'_>,
            &CreateContext<'_>,
        ) -> RResult<T, PluginError>,
    ) -> Option<Result<T, PluginError>> {
        let entry = self.get(kind, name)?;
        let module = self.module(entry.provider)?;
        Some(pick(module)(name.into(), config.into(), ctx).into_result())
    }

    /// Creates a plugin tensor op; `None` when no plugin provides `name`.
    pub fn create_tensor_op(
        &self,
        name: &str,
        config: &str,
        ctx: &CreateContext<'_>,
    ) -> Option<Result<TensorOpBox, PluginError>> {
        self.create(ComponentKind::TensorOp, name, config, ctx, |m| {
            m.create_tensor_op()
        })
    }

    /// Creates a plugin numpy op.
    pub fn create_numpy_op(
        &self,
        name: &str,
        config: &str,
        ctx: &CreateContext<'_>,
    ) -> Option<Result<NumpyOpBox, PluginError>> {
        self.create(ComponentKind::NumpyOp, name, config, ctx, |m| {
            m.create_numpy_op()
        })
    }

    /// Creates a plugin slicer.
    pub fn create_slicer(
        &self,
        name: &str,
        config: &str,
        ctx: &CreateContext<'_>,
    ) -> Option<Result<SlicerBox, PluginError>> {
        self.create(ComponentKind::Slicer, name, config, ctx, |m| {
            m.create_slicer()
        })
    }

    /// Creates a plugin trace.
    pub fn create_trace(
        &self,
        name: &str,
        config: &str,
        ctx: &CreateContext<'_>,
    ) -> Option<Result<TraceBox, PluginError>> {
        self.create(ComponentKind::Trace, name, config, ctx, |m| {
            m.create_trace()
        })
    }

    /// Creates a plugin model.
    pub fn create_model(
        &self,
        name: &str,
        config: &str,
        ctx: &CreateContext<'_>,
    ) -> Option<Result<ModelBox, PluginError>> {
        self.create(ComponentKind::Model, name, config, ctx, |m| {
            m.create_model()
        })
    }

    /// Creates a plugin dataset.
    pub fn create_dataset(
        &self,
        name: &str,
        config: &str,
        ctx: &CreateContext<'_>,
    ) -> Option<Result<DatasetBox, PluginError>> {
        self.create(ComponentKind::Dataset, name, config, ctx, |m| {
            m.create_dataset()
        })
    }
}

fn describe(plugins: &PluginSet, provider: Provider) -> String {
    match provider {
        Provider::Builtin => "fe-host (built in)".to_owned(),
        Provider::Plugin(index) => match plugins.plugins.get(index) {
            Some(plugin) => format!("plugin `{}` ({})", plugin.name(), plugin.path.display()),
            None => "an unknown plugin".to_owned(),
        },
    }
}
