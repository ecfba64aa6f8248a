//! Component configuration: the component's TOML table, deserialized on the plugin side.

use serde::de::DeserializeOwned;

use crate::{Error, Result};

/// Deserializes a component's config from the TOML text of its table.
///
/// Unknown fields are errors whether or not the config type uses `deny_unknown_fields`, and
/// every error carries the path of the offending field inside the table (e.g. `weights[2]`)
/// so the host can point at the manifest line.
///
/// ```
/// #[derive(fe_plugin_api::serde::Deserialize, Debug)]
/// #[serde(crate = "fe_plugin_api::serde")]
/// struct Config { axis: i64 }
/// let ok: Config = fe_plugin_api::parse_config("axis = -1")?;
/// assert_eq!(ok.axis, -1);
/// let err = fe_plugin_api::parse_config::<Config>("axis = 0\naxes = 1").unwrap_err();
/// assert_eq!(err.field(), "axes");
/// # Ok::<(), fe_plugin_api::Error>(())
/// ```
pub fn parse_config<T: DeserializeOwned>(toml_text: &str) -> Result<T> {
    let deserializer = toml::Deserializer::parse(toml_text)
        .map_err(|e| Error::config("", e.message().to_owned()))?;
    let mut unknown: Vec<String> = Vec::new();
    let mut record = |path: serde_ignored::Path<'_>| unknown.push(path.to_string());
    let tracked = serde_ignored::Deserializer::new(deserializer, &mut record);
    let parsed: Result<T, _> = serde_path_to_error::deserialize(tracked);
    match parsed {
        Ok(value) => match unknown.into_iter().next() {
            None => Ok(value),
            Some(path) => {
                let name = path.rsplit('.').next().unwrap_or(&path).to_owned();
                Err(Error::config(path, format!("unknown field `{name}`")))
            }
        },
        Err(err) => {
            let path = err.path().to_string();
            let message = err.inner().message().to_owned();
            let path = match path.as_str() {
                // Internally tagged enums buffer their fields, losing the path; the message
                // still names an unknown field.
                "." | "" => unknown_field_name(&message).unwrap_or_default(),
                _ => path,
            };
            Err(Error::config(path, message))
        }
    }
}

/// `x` from serde's "unknown field `x`, expected ...".
fn unknown_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split_once('`').map(|(name, _)| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct Inner {
        #[allow(dead_code)]
        depth: u32,
    }

    #[derive(serde::Deserialize, Debug)]
    struct Config {
        #[allow(dead_code)]
        inner: Inner,
        #[serde(default)]
        #[allow(dead_code)]
        name: String,
    }

    #[test]
    fn unknown_nested_field_names_its_path() {
        let err = parse_config::<Config>("[inner]\ndepth = 1\ncolour = 2").unwrap_err();
        assert_eq!(err.field(), "inner.colour");
        assert_eq!(err.message(), "unknown field `colour`");
    }

    #[test]
    fn missing_field_is_reported() {
        let err = parse_config::<Config>("name = 'x'").unwrap_err();
        assert!(err.message().contains("missing field `inner`"), "{err}");
    }

    #[test]
    fn wrong_type_names_the_field() {
        let err = parse_config::<Config>("[inner]\ndepth = 'deep'").unwrap_err();
        assert_eq!(err.field(), "inner.depth");
        assert!(err.message().contains("invalid type"), "{err}");
    }

    #[test]
    fn empty_table_gives_defaults() {
        let cfg: crate::NoConfig = parse_config("").unwrap();
        let _ = cfg;
        assert!(parse_config::<crate::NoConfig>("x = 1").is_err());
    }
}
