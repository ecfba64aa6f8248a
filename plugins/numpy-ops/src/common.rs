//! Helpers shared by the ops: key arity, dtype checks, and config value forms.

use std::fmt;
use std::marker::PhantomData;

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, Result};
use serde::de::{self, Deserializer, IntoDeserializer, SeqAccess, Visitor};
use serde::Deserialize;

/// The single input of a one-in, one-out op.
pub(crate) fn one_to_one<'a>(inputs: &[&'a Tensor]) -> Result<&'a Tensor> {
    match inputs {
        [x] => Ok(x),
        _ => Err(Error::msg(format!(
            "expected 1 input, got {}",
            inputs.len()
        ))),
    }
}

/// For ops that transform each input key on its own: at least one input and exactly one
/// output per input.
pub(crate) fn expect_pairs(ctx: &CreateContext<'_>, op: &str) -> Result<()> {
    ctx.expect_arity(None, None)?;
    if ctx.inputs.is_empty() {
        return Err(Error::config(
            "inputs",
            format!("{op} needs at least one input key"),
        ));
    }
    if ctx.inputs.len() != ctx.outputs.len() {
        return Err(Error::config(
            "outputs",
            format!(
                "{op} writes one output per input: got {} input(s) and {} output(s)",
                ctx.inputs.len(),
                ctx.outputs.len()
            ),
        ));
    }
    Ok(())
}

/// Applies `f` to every input, giving one output per input.
pub(crate) fn map_each(
    inputs: &[&Tensor],
    mut f: impl FnMut(&Tensor) -> Result<Tensor>,
) -> Result<Vec<Tensor>> {
    inputs.iter().map(|x| f(x)).collect()
}

/// The element type of `x`, as an error rather than a panic for types tch does not know.
pub(crate) fn kind_of(x: &Tensor) -> Result<Kind> {
    Ok(x.f_kind()?)
}

/// `true` for the floating-point kinds the ops compute with.
pub(crate) fn is_float(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Half | Kind::BFloat16 | Kind::Float | Kind::Double
    )
}

/// `true` for the integer kinds (bool excluded).
pub(crate) fn is_integer(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Uint8 | Kind::Int8 | Kind::Int16 | Kind::Int | Kind::Int64
    )
}

/// The kind of `x`, failing unless it is bool, an integer or a floating-point kind (complex,
/// quantized and float8 tensors are rejected with a message naming `op`).
pub(crate) fn real_kind(x: &Tensor, op: &str) -> Result<Kind> {
    let kind = kind_of(x)?;
    if kind == Kind::Bool || is_integer(kind) || is_float(kind) {
        Ok(kind)
    } else {
        Err(Error::msg(format!(
            "{op} does not support {kind:?} tensors (expected bool, integer or floating point)"
        )))
    }
}

/// A config value given either as one item or as a list: `mean = 0.5` or
/// `mean = [0.485, 0.456, 0.406]`.
#[derive(Debug, Clone, PartialEq)]
pub struct OneOrMany<T>(pub Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OneOrManyVisitor<T>(PhantomData<T>);

        impl<T> OneOrManyVisitor<T> {
            fn one<'de, V, E>(value: V) -> Result<OneOrMany<T>, E>
            where
                T: Deserialize<'de>,
                V: IntoDeserializer<'de, E>,
                E: de::Error,
            {
                T::deserialize(value.into_deserializer()).map(|item| OneOrMany(vec![item]))
            }
        }

        impl<'de, T: Deserialize<'de>> Visitor<'de> for OneOrManyVisitor<T> {
            type Value = OneOrMany<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number or a list of numbers")
            }

            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
                Self::one(value)
            }

            fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
                Self::one(value)
            }

            fn visit_f64<E: de::Error>(self, value: f64) -> Result<Self::Value, E> {
                Self::one(value)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(OneOrMany(items))
            }
        }

        deserializer.deserialize_any(OneOrManyVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::OneOrMany;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Config {
        values: OneOrMany<f64>,
        ints: Option<OneOrMany<i64>>,
    }

    #[test]
    fn one_or_many_accepts_a_scalar_or_a_list() {
        let one: Config = fe_plugin_api::parse_config("values = 2").unwrap();
        assert_eq!(one.values.0, [2.0]);
        let many: Config = fe_plugin_api::parse_config("values = [1, 2.5]\nints = 3").unwrap();
        assert_eq!(many.values.0, [1.0, 2.5]);
        assert_eq!(many.ints.unwrap().0, [3]);
    }

    #[test]
    fn one_or_many_rejects_other_types() {
        let err = fe_plugin_api::parse_config::<Config>("values = 'x'").unwrap_err();
        assert_eq!(err.field(), "values");
        assert!(err.message().contains("a number or a list"), "{err}");
        let err = fe_plugin_api::parse_config::<Config>("values = 1\nints = 1.5").unwrap_err();
        assert_eq!(err.field(), "ints");
    }
}
