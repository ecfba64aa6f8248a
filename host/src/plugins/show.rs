//! `fe-host plugins show NAME`: one component's description and configuration fields, as its
//! plugin declares them (`Registration::fields`).

use std::fmt::Write;

use fe_plugin_api::{ComponentFields, ComponentKind, FieldInfo};

use super::registry::{Entry, Provider, Registry};

/// The text of `plugins show NAME`, or `None` when no component has that name.
pub fn render_show(registry: &Registry, name: &str) -> Option<String> {
    let matches: Vec<&Entry> = registry
        .entries()
        .filter(|e| e.info.name.as_str() == name)
        .collect();
    if matches.is_empty() {
        return None;
    }
    let mut out = String::new();
    for (i, entry) in matches.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        render_entry(&mut out, registry, entry);
    }
    Some(out)
}

/// The closest names of any kind, for a "did you mean" hint.
pub fn suggest(registry: &Registry, name: &str) -> Option<String> {
    const KINDS: [ComponentKind; 6] = [
        ComponentKind::TensorOp,
        ComponentKind::NumpyOp,
        ComponentKind::Slicer,
        ComponentKind::Trace,
        ComponentKind::Model,
        ComponentKind::Dataset,
    ];
    KINDS
        .into_iter()
        .find_map(|kind| registry.suggest(kind, name))
}

fn render_entry(out: &mut String, registry: &Registry, entry: &Entry) {
    let info = &entry.info;
    let kind = if info.is_metric {
        "metric".to_owned()
    } else {
        info.kind.to_string()
    };
    let _ = writeln!(
        out,
        "{}: {kind} from {}",
        info.name,
        registry.provider_name(entry.provider)
    );
    let _ = writeln!(out, "  {}", info.doc);
    if !info.default_mode.is_empty() {
        let _ = writeln!(out, "  default mode: {}", info.default_mode);
    }
    match declared(registry, entry) {
        Declared::Fields(fields) if fields.is_empty() => {
            let _ = writeln!(out, "  no configuration fields");
        }
        Declared::Fields(fields) => {
            let _ = writeln!(out, "  fields:");
            write_fields(out, &fields);
        }
        Declared::NotByThisComponent => {
            let _ = writeln!(out, "  no field declarations");
        }
        Declared::PluginTooOld(version) => {
            let _ = writeln!(
                out,
                "  no field declarations (built against fe-plugin-api {version}; declarations need 0.1.1 or later)"
            );
        }
    }
}

enum Declared {
    Fields(Vec<FieldInfo>),
    NotByThisComponent,
    PluginTooOld(String),
}

fn declared(registry: &Registry, entry: &Entry) -> Declared {
    let Provider::Plugin(index) = entry.provider else {
        return Declared::Fields(entry.builtin_fields.iter().map(FieldInfo::from).collect());
    };
    let Some(plugin) = registry.plugins.plugins.get(index) else {
        return Declared::NotByThisComponent;
    };
    let Some(ext) = plugin.ext else {
        return Declared::PluginTooOld(plugin.info.plugin_api_version.as_str().to_owned());
    };
    ext.describe_fields()()
        .into_iter()
        .find(|c: &ComponentFields| c.kind == entry.info.kind && c.name == entry.info.name)
        .map(|c| Declared::Fields(c.fields.into_iter().collect()))
        .unwrap_or(Declared::NotByThisComponent)
}

/// One line per field: name, type, `required` or `default = …`, doc; columns aligned.
fn write_fields(out: &mut String, fields: &[FieldInfo]) {
    let default = |f: &FieldInfo| match f.default.as_ref().into_option() {
        Some(value) => format!("default {value}"),
        None => "required".to_owned(),
    };
    let name_width = fields.iter().map(|f| f.name.len()).max().unwrap_or(0);
    let type_width = fields.iter().map(|f| f.ty.len()).max().unwrap_or(0);
    let default_width = fields.iter().map(|f| default(f).len()).max().unwrap_or(0);
    for field in fields {
        let line = format!(
            "    {:<name_width$}  {:<type_width$}  {:<default_width$}  {}",
            field.name,
            field.ty,
            default(field),
            field.doc
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
}
