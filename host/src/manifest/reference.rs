//! Every key of the manifest's schema ([`RawManifest`]), found by walking the serde
//! description of its types rather than by a list kept by hand, so that the manifest reference
//! (`docs/manifest.md`) can be checked against what the host really reads
//! (`tests/reference.rs`): a field added to the schema without a row there fails the tests.
//!
//! The walk is a [`Deserializer`] that owns no data: asked for a struct it answers with every
//! field, each deserialized by a walker one level deeper; asked for anything else it records
//! the key and its TOML type and gives a neutral value (`false`, `0`, `""`, empty array).

use std::cell::RefCell;

use serde::de::value::{Error, MapDeserializer, SeqDeserializer, StrDeserializer};
use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, IntoDeserializer, Visitor};

use super::schema::RawManifest;
use crate::optim::{AdamConfig, RmsPropConfig, SgdConfig};

/// One key of the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaKey {
    /// Its dotted path from the top of the manifest: `run.epochs`, `checkpoint.dir`.
    pub path: String,
    /// Its TOML type as the reference names it: `integer`, `string`, `table`, ...
    pub kind: String,
}

/// Every key of [`RawManifest`], tables included (`run`, then `run.epochs`, ...), in the
/// order the schema declares them, then the optimizer tables' keys under
/// `models[].optimizer` (each key once, whichever optimizer takes it).
pub fn schema_keys() -> Vec<SchemaKey> {
    let mut keys = walk::<RawManifest>("");
    for key in walk::<AdamConfig>(OPTIMIZER)
        .into_iter()
        .chain(walk::<SgdConfig>(OPTIMIZER))
        .chain(walk::<RmsPropConfig>(OPTIMIZER))
    {
        if !keys.iter().any(|k| k.path == key.path) {
            keys.push(key);
        }
    }
    keys
}

/// Where optimizer tables sit in the manifest.
const OPTIMIZER: &str = "models[].optimizer";

/// The keys the host itself takes out of tables the schema leaves open (a model's table goes
/// on to its architecture without them; see `model_config` in validate.rs), and the keys of
/// every component table (see `ComponentSpec::parse`).
pub const OPEN_TABLE_KEYS: &[&str] = &[
    "models[].name",
    "models[].architecture",
    "models[].optimizer",
    "models[].optimizer.type",
    "models[].trainable",
    "models[].mixed_precision",
    "pipeline.data.<mode>.type",
    "pipeline.data.<mode>.split_from",
    "pipeline.data.<mode>.ds_id",
    "<component>.inputs",
    "<component>.outputs",
    "<component>.mode",
    "<component>.ds_id",
];

fn walk<'de, T: Deserialize<'de>>(prefix: &str) -> Vec<SchemaKey> {
    let keys = RefCell::new(Vec::new());
    // The walker always answers what is asked, so the schema's own Deserialize cannot fail
    // on it; an error here would mean a schema type the walker does not know.
    if let Err(e) = T::deserialize(Walker {
        path: prefix.to_owned(),
        keys: &keys,
    }) {
        keys.borrow_mut().push(SchemaKey {
            path: format!("(schema walk of {prefix} failed: {e})"),
            kind: String::new(),
        });
    }
    let mut keys = keys.into_inner();
    keys.retain(|k| k.path != prefix);
    keys
}

struct Walker<'k> {
    path: String,
    keys: &'k RefCell<Vec<SchemaKey>>,
}

impl Walker<'_> {
    fn record(&self, kind: &str) {
        if !self.path.is_empty() {
            self.keys.borrow_mut().push(SchemaKey {
                path: self.path.clone(),
                kind: kind.to_owned(),
            });
        }
    }
}

/// Deserializer methods that record `kind` and hand the visitor a neutral value.
macro_rules! leaf {
    ($($method:ident => $kind:literal, $visit:ident($($value:expr)?);)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                self.record($kind);
                visitor.$visit($($value)?)
            }
        )*
    };
}

impl<'de> Deserializer<'de> for Walker<'_> {
    type Error = Error;

    leaf! {
        deserialize_bool => "boolean", visit_bool(false);
        deserialize_i8 => "integer", visit_i8(0);
        deserialize_i16 => "integer", visit_i16(0);
        deserialize_i32 => "integer", visit_i32(0);
        deserialize_i64 => "integer", visit_i64(0);
        deserialize_u8 => "integer", visit_u8(0);
        deserialize_u16 => "integer", visit_u16(0);
        deserialize_u32 => "integer", visit_u32(0);
        deserialize_u64 => "integer", visit_u64(0);
        deserialize_f32 => "float", visit_f32(0.0);
        deserialize_f64 => "float", visit_f64(0.0);
        deserialize_char => "string", visit_char(' ');
        deserialize_str => "string", visit_str("");
        deserialize_string => "string", visit_str("");
        deserialize_identifier => "string", visit_str("");
        deserialize_bytes => "string", visit_bytes(&[]);
        deserialize_byte_buf => "string", visit_bytes(&[]);
        deserialize_unit => "unit", visit_unit();
        // A `toml::Value`: any TOML value (a number, or a schedule table, ...).
        deserialize_any => "any", visit_bool(false);
        deserialize_ignored_any => "any", visit_unit();
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.record("array");
        visitor.visit_seq(SeqDeserializer::new(std::iter::empty::<()>()))
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, Error> {
        // A tuple (`betas = [0.9, 0.999]`) needs its elements: walked, recorded as nothing.
        self.record("array");
        visitor.visit_seq(Elements {
            left: len,
            keys: self.keys,
        })
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.record("table");
        visitor.visit_map(MapDeserializer::new(std::iter::empty::<((), ())>()))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.record("table");
        visitor.visit_map(Fields {
            parent: self.path,
            fields: fields.iter(),
            current: "",
            keys: self.keys,
        })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.record(&format!("string: {}", variants.join(" | ")));
        let first: StrDeserializer<'_, Error> =
            variants.first().copied().unwrap_or("").into_deserializer();
        visitor.visit_enum(first)
    }
}

/// A tuple's elements, each walked without a key of its own.
struct Elements<'k> {
    left: usize,
    keys: &'k RefCell<Vec<SchemaKey>>,
}

impl<'de> de::SeqAccess<'de> for Elements<'_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(Walker {
            path: String::new(),
            keys: self.keys,
        })
        .map(Some)
    }
}

/// A struct's fields as a map, each value walked one level deeper.
struct Fields<'k> {
    parent: String,
    fields: std::slice::Iter<'static, &'static str>,
    current: &'static str,
    keys: &'k RefCell<Vec<SchemaKey>>,
}

impl<'de> de::MapAccess<'de> for Fields<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some(field) = self.fields.next() else {
            return Ok(None);
        };
        self.current = field;
        let name: StrDeserializer<'_, Error> = field.into_deserializer();
        seed.deserialize(name).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let path = if self.parent.is_empty() {
            self.current.to_owned()
        } else {
            format!("{}.{}", self.parent, self.current)
        };
        seed.deserialize(Walker {
            path,
            keys: self.keys,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_finds_nested_keys_with_their_types() {
        let keys = schema_keys();
        let kind = |path: &str| {
            keys.iter()
                .find(|k| k.path == path)
                .map(|k| k.kind.as_str())
                .unwrap_or("missing")
        };
        assert_eq!(kind("run"), "table");
        assert_eq!(kind("run.epochs"), "integer");
        assert_eq!(kind("run.device"), "string");
        assert_eq!(kind("run.eval_loss"), "string: per_sample | per_batch");
        assert_eq!(kind("pipeline.batch_size"), "any");
        assert_eq!(kind("pipeline.data"), "table");
        assert_eq!(kind("models"), "array");
        assert_eq!(kind("checkpoint.background"), "boolean");
        assert_eq!(kind("models[].optimizer.betas"), "array");
        assert_eq!(kind("models[].optimizer.nesterov"), "boolean");
        assert_eq!(
            keys.iter()
                .filter(|k| k.path == "models[].optimizer.lr")
                .count(),
            1
        );
        assert!(keys.iter().all(|k| !k.path.starts_with('(')), "{keys:?}");
    }
}
