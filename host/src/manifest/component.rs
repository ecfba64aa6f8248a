//! A component's table split into what the host owns and the component's own config.

use toml::{Table, Value};

use crate::key_path::{KeyPath, Problem};
use crate::schedule::{validate_key, DsFilter, ModeFilter};

/// One component as declared: ops, traces, slicers, post-processing, pipeline ops.
#[derive(Debug, Clone)]
pub struct ComponentSpec {
    /// Where it is declared, e.g. `network.ops[2]`.
    pub path: KeyPath,
    /// The registered component name (`op = "CrossEntropy"`).
    pub name: String,
    /// Keys read, in order.
    pub inputs: Vec<String>,
    /// Keys written, in order.
    pub outputs: Vec<String>,
    /// Modes given in the manifest; `None` means the component's default.
    pub mode: Option<ModeFilter>,
    /// Dataset ids it runs for.
    pub ds_id: DsFilter,
    /// Whether the table named its output keys at all (slicers unslice their slice keys when
    /// `unslice` is absent, but nothing when it is an empty list).
    pub outputs_given: bool,
    /// Everything else in the table: the component's own configuration.
    pub config: Table,
}

impl ComponentSpec {
    /// Splits `table` at `path`. `name_key` is the key holding the component's name (`op`,
    /// `trace`, `slicer`); `io` lists the host-owned key-list fields (for slicers they are
    /// `slice` and `unslice` rather than `inputs` and `outputs`).
    pub fn parse(
        path: KeyPath,
        mut table: Table,
        name_key: &str,
        io: [&str; 2],
    ) -> Result<Self, Problem> {
        let name = match table.remove(name_key) {
            Some(Value::String(name)) if !name.is_empty() => name,
            Some(_) => {
                return Err(Problem::new(
                    path.key(name_key),
                    "must be a non-empty string",
                ))
            }
            None => {
                return Err(Problem::new(
                    path.clone(),
                    format!("missing `{name_key}`: the name of the component to use"),
                ))
            }
        };
        let inputs = take_keys(&mut table, &path, io[0])?;
        let outputs_given = table.contains_key(io[1]);
        let outputs = take_keys(&mut table, &path, io[1])?;
        let mode = match table.remove("mode") {
            None => None,
            Some(value) => {
                let items = string_list(&value).ok_or_else(|| {
                    Problem::new(
                        path.key("mode"),
                        "must be a mode or a list of modes, e.g. \"train\" or [\"!infer\"]",
                    )
                })?;
                Some(ModeFilter::parse(&items).map_err(|e| Problem::new(path.key("mode"), e))?)
            }
        };
        let ds_id = match table.remove("ds_id") {
            None => DsFilter::Any,
            Some(value) => {
                let items = string_list(&value).ok_or_else(|| {
                    Problem::new(path.key("ds_id"), "must be a dataset id or a list of them")
                })?;
                DsFilter::parse(&items).map_err(|e| Problem::new(path.key("ds_id"), e))?
            }
        };
        Ok(Self {
            path,
            name,
            inputs,
            outputs,
            mode,
            ds_id,
            outputs_given,
            config: table,
        })
    }

    /// `name (path)` for messages.
    pub fn label(&self) -> String {
        format!("{} ({})", self.name, self.path)
    }

    /// `CrossEntropy(y_pred, y -> ce)`: the name and keys, for plans and logs.
    /// A component without keys shows its configuration instead:
    /// `UpdateOp { loss = "ce", model = "lenet" }`.
    pub fn describe(&self) -> String {
        if self.inputs.is_empty() && self.outputs.is_empty() {
            if self.config.is_empty() {
                return self.name.clone();
            }
            return format!("{} {}", self.name, Value::Table(self.config.clone()));
        }
        format!(
            "{}({} -> {})",
            self.name,
            keys_or_dash(&self.inputs),
            keys_or_dash(&self.outputs)
        )
    }

    /// The component config as TOML text, for the plugin.
    pub fn config_text(&self) -> String {
        toml::to_string(&self.config).unwrap_or_default()
    }
}

fn keys_or_dash(keys: &[String]) -> String {
    if keys.is_empty() {
        "-".to_owned()
    } else {
        keys.join(", ")
    }
}

/// A string or a list of strings.
pub fn string_list(value: &Value) -> Option<Vec<String>> {
    match value {
        Value::String(s) => Some(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => None,
    }
}

fn take_keys(table: &mut Table, path: &KeyPath, field: &str) -> Result<Vec<String>, Problem> {
    let Some(value) = table.remove(field) else {
        return Ok(Vec::new());
    };
    let keys = string_list(&value)
        .ok_or_else(|| Problem::new(path.key(field), "must be a key or a list of keys"))?;
    for (i, key) in keys.iter().enumerate() {
        validate_key(key).map_err(|e| Problem::new(path.key(field).index(i), e))?;
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> Table {
        text.parse().unwrap()
    }

    #[test]
    fn splits_host_keys_from_config() {
        let spec = ComponentSpec::parse(
            KeyPath::root("network").key("ops").index(0),
            table("op = 'CrossEntropy'\ninputs = ['y_pred', 'y']\noutputs = 'ce'\nmode = '!infer'\nfrom_logits = true"),
            "op",
            ["inputs", "outputs"],
        )
        .unwrap();
        assert_eq!(spec.name, "CrossEntropy");
        assert_eq!(spec.inputs, ["y_pred", "y"]);
        assert_eq!(spec.outputs, ["ce"]);
        assert!(!spec.mode.unwrap().contains(fe_plugin_api::Mode::Infer));
        assert_eq!(spec.config_text().trim(), "from_logits = true");
    }

    #[test]
    fn bad_io_names_point_at_the_key() {
        let err = ComponentSpec::parse(
            KeyPath::root("traces").index(1),
            table("trace = 'Accuracy'\ninputs = ['y', 'a:b']"),
            "trace",
            ["inputs", "outputs"],
        )
        .unwrap_err();
        assert_eq!(err.path.to_string(), "traces[1].inputs[1]");
    }

    #[test]
    fn missing_name_is_reported() {
        let err = ComponentSpec::parse(
            KeyPath::root("x"),
            table("inputs = 'a'"),
            "op",
            ["inputs", "outputs"],
        )
        .unwrap_err();
        assert!(err.message.contains("missing `op`"));
    }
}
