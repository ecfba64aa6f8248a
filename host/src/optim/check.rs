//! Hyper-parameters that cannot be meant (a NaN or infinite value, a negative learning rate,
//! a beta of 1 or more) are refused at their key before any training, instead of turning the
//! weights into NaN a few steps in.

use toml::Value;

/// Keys that must not be negative, wherever they appear in an optimizer or LR-schedule table.
const NON_NEGATIVE: [&str; 9] = [
    "lr",
    "init_lr",
    "min_lr",
    "weight_decay",
    "eps",
    "momentum",
    "dampening",
    "alpha",
    "gamma",
];

/// The first number in `table` (keys prefixed by `prefix`, e.g. `lr.`) that cannot be meant:
/// `(field, message)`.
pub fn unmeant_number(table: &toml::Table, prefix: &str) -> Option<(String, String)> {
    for (key, value) in table {
        let field = format!("{prefix}{key}");
        if let Some(problem) = check_value(key, &field, value) {
            return Some(problem);
        }
    }
    None
}

fn check_value(key: &str, field: &str, value: &Value) -> Option<(String, String)> {
    match value {
        Value::Float(x) if x.is_nan() => {
            Some((field.to_owned(), "must be a number, not NaN".to_owned()))
        }
        Value::Float(x) if x.is_infinite() => Some((
            field.to_owned(),
            format!("must be a finite number, not {x}"),
        )),
        Value::Float(_) | Value::Integer(_) => {
            let x = value
                .as_float()
                .or_else(|| value.as_integer().map(|i| i as f64))?;
            if NON_NEGATIVE.contains(&key) && x < 0.0 {
                return Some((field.to_owned(), format!("must not be negative (got {x})")));
            }
            None
        }
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            let at = format!("{field}[{i}]");
            match (
                key,
                item.as_float()
                    .or_else(|| item.as_integer().map(|i| i as f64)),
            ) {
                ("betas", Some(beta)) if !(0.0..1.0).contains(&beta) => {
                    Some((at, format!("must be in [0, 1) (got {beta})")))
                }
                _ => check_value(key, &at, item),
            }
        }),
        Value::Table(inner) => unmeant_number(inner, &format!("{field}.")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Option<(String, String)> {
        unmeant_number(&text.parse::<toml::Table>().unwrap(), "")
    }

    #[test]
    fn ordinary_settings_pass() {
        assert_eq!(check("lr = 0.001\nbetas = [0.9, 0.999]\neps = 1e-8"), None);
        assert_eq!(check("lr = 0\nmomentum = 0.9\nnesterov = true"), None);
    }

    #[test]
    fn nan_infinite_and_negative_values_are_named() {
        assert_eq!(
            check("lr = nan"),
            Some(("lr".into(), "must be a number, not NaN".into()))
        );
        assert_eq!(
            check("lr = -inf"),
            Some(("lr".into(), "must be a finite number, not -inf".into()))
        );
        assert_eq!(
            check("lr = -0.1"),
            Some(("lr".into(), "must not be negative (got -0.1)".into()))
        );
        assert_eq!(
            check("weight_decay = -1"),
            Some((
                "weight_decay".into(),
                "must not be negative (got -1)".into()
            ))
        );
    }

    #[test]
    fn betas_must_be_below_one() {
        assert_eq!(
            check("betas = [0.9, 1.5]"),
            Some(("betas[1]".into(), "must be in [0, 1) (got 1.5)".into()))
        );
    }

    #[test]
    fn schedule_tables_are_searched_with_their_prefix() {
        assert_eq!(
            check("lr = { schedule = \"exponential\", init_lr = nan, gamma = 0.9 }"),
            Some(("lr.init_lr".into(), "must be a number, not NaN".into()))
        );
    }
}
