//! One sample's value in a per-instance log row: a number, or nested arrays in the sample's
//! shape. Numbers are written losslessly ([`format_value`]); JSON has no NaN or infinities,
//! so those are the strings `"NaN"`, `"inf"` and `"-inf"`, and read back as such.

use std::collections::BTreeMap;

use super::format_value;
use super::json::Json;

/// One sample's value of a key: one number, or (for a key with several values per sample,
/// such as a prediction's class scores) all of them with their shape.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleValue {
    /// The shape of the sample's value: `[]` for one number.
    pub shape: Vec<usize>,
    /// Its numbers, row-major.
    pub numbers: Vec<f64>,
}

impl SampleValue {
    /// One number.
    pub fn scalar(value: f64) -> Self {
        Self {
            shape: Vec::new(),
            numbers: vec![value],
        }
    }

    /// Its number, or nested arrays in its shape.
    pub(super) fn to_json(&self) -> String {
        fn nest(shape: &[usize], numbers: &[f64]) -> String {
            match shape.split_first() {
                None => numbers
                    .first()
                    .map_or_else(|| "null".into(), |&v| number_json(v)),
                Some((&len, inner)) => {
                    let stride = inner.iter().product::<usize>();
                    let items: Vec<String> = (0..len)
                        .map(|i| nest(inner, numbers.get(i * stride..).unwrap_or_default()))
                        .collect();
                    format!("[{}]", items.join(","))
                }
            }
        }
        nest(&self.shape, &self.numbers)
    }
}

/// A number losslessly, or the string JSON needs for NaN and the infinities.
pub(super) fn number_json(value: f64) -> String {
    if value.is_finite() {
        format_value(value)
    } else {
        format!("\"{}\"", format_value(value))
    }
}

/// What [`number_json`] wrote: a JSON number, or only the spellings of the values JSON numbers
/// cannot hold.
pub(super) fn number_from_json(value: &Json<'_>) -> Option<f64> {
    match value {
        Json::Number(n) => n.parse::<f64>().ok(),
        Json::String(s) => s.parse::<f64>().ok().filter(|v| !v.is_finite()),
        _ => None,
    }
}

/// An instance row's values: numbers, or rectangular nested arrays of them.
pub(super) fn parse_all(values: &Json<'_>) -> Result<BTreeMap<String, SampleValue>, String> {
    let Json::Object(members) = values else {
        return Err(format!(
            "`instance.values` is {}, expected an object",
            values.kind()
        ));
    };
    members
        .iter()
        .map(|(key, value)| {
            let mut numbers = Vec::new();
            let shape = parse_nested(value, &mut numbers)
                .map_err(|e| format!("`instance.values.{key}`: {e}"))?;
            Ok((key.clone(), SampleValue { shape, numbers }))
        })
        .collect()
}

/// Appends the numbers of `value` (a number or nested arrays) and gives its shape.
fn parse_nested(value: &Json<'_>, numbers: &mut Vec<f64>) -> Result<Vec<usize>, String> {
    let Json::Array(items) = value else {
        numbers.push(
            number_from_json(value).ok_or_else(|| format!("{} is not a number", value.kind()))?,
        );
        return Ok(Vec::new());
    };
    let mut inner: Option<Vec<usize>> = None;
    for item in items {
        let shape = parse_nested(item, numbers)?;
        if inner.as_ref().is_some_and(|s| *s != shape) {
            return Err("arrays of unequal shapes".into());
        }
        inner = Some(shape);
    }
    let mut shape = vec![items.len()];
    shape.extend(inner.unwrap_or_default());
    Ok(shape)
}
