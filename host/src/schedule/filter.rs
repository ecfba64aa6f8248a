//! Which modes and dataset ids a component runs in (FastEstimator's `mode` / `ds_id` rules).

use fe_plugin_api::Mode;

/// The set of modes a component runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeFilter {
    modes: [bool; 4],
}

impl ModeFilter {
    /// Every mode.
    pub const ALL: ModeFilter = ModeFilter { modes: [true; 4] };

    /// Only `mode`.
    pub fn only(mode: Mode) -> Self {
        let mut modes = [false; 4];
        modes[mode as usize] = true;
        Self { modes }
    }

    /// Parses FastEstimator's syntax: a list of modes (`["eval", "test"]`) or of negations
    /// (`["!infer"]` = every mode but infer). Mixing the two forms is an error, as is an unknown
    /// mode. An empty list is every mode, as in FastEstimator, where an empty mode set puts no
    /// restriction on the item.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, String> {
        if items.is_empty() {
            return Ok(Self::ALL);
        }
        let negated = items.iter().filter(|m| m.as_ref().starts_with('!')).count();
        if negated != 0 && negated != items.len() {
            let all: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
            return Err(format!("cannot mix `!mode` with `mode` ({all:?})"));
        }
        let mut modes = [negated != 0; 4];
        for item in items {
            let mode: Mode = item.as_ref().trim_start_matches('!').parse()?;
            modes[mode as usize] = negated == 0;
        }
        Ok(Self { modes })
    }

    /// Parses a registration's default (`"!infer"`, `"eval,test"`; `""` is every mode).
    pub fn parse_default(spec: &str) -> Result<Self, String> {
        if spec.trim().is_empty() {
            return Ok(Self::ALL);
        }
        let items: Vec<&str> = spec.split(',').map(str::trim).collect();
        Self::parse(&items)
    }

    /// `true` when the component runs in `mode`.
    pub fn contains(&self, mode: Mode) -> bool {
        self.modes[mode as usize]
    }

    /// The modes in the set, in order.
    pub fn modes(&self) -> impl Iterator<Item = Mode> + '_ {
        Mode::ALL.into_iter().filter(|m| self.contains(*m))
    }
}

/// The dataset ids a component runs for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DsFilter {
    /// Every dataset.
    #[default]
    Any,
    /// Only these (a whitelist; the unnamed dataset `""` never matches).
    Only(Vec<String>),
    /// All but these (a blacklist; the unnamed dataset `""` always matches).
    Except(Vec<String>),
}

impl DsFilter {
    /// Parses `["ds1", "ds2"]` or `["!ds1"]`; mixing the forms is an error.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, String> {
        if items.is_empty() {
            return Ok(DsFilter::Any);
        }
        let negated = items.iter().filter(|d| d.as_ref().starts_with('!')).count();
        if negated != 0 && negated != items.len() {
            return Err("cannot mix `!ds_id` with `ds_id`".into());
        }
        let mut names = Vec::new();
        for item in items {
            let name = item.as_ref().trim_start_matches('!');
            validate_ds_id(name)?;
            names.push(name.to_owned());
        }
        Ok(if negated == 0 {
            DsFilter::Only(names)
        } else {
            DsFilter::Except(names)
        })
    }

    /// `true` when the component runs for dataset `ds_id`.
    pub fn matches(&self, ds_id: &str) -> bool {
        match self {
            DsFilter::Any => true,
            DsFilter::Only(names) => names.iter().any(|n| n == ds_id),
            DsFilter::Except(names) => !names.iter().any(|n| n == ds_id),
        }
    }
}

/// Dataset ids name datasets in logs and filters: non-empty, no `!`, `:`, `;`, `|`, `,`.
pub fn validate_ds_id(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a ds_id cannot be empty".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| matches!(c, '!' | ':' | ';' | '|' | ','))
    {
        return Err(format!(
            "ds_id `{name}` contains `{bad}`, which is reserved"
        ));
    }
    Ok(())
}

/// Keys name tensors: non-empty, no `:` or `;`, at most one `|` (FastEstimator's rule).
pub fn validate_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("a key cannot be empty".into());
    }
    if let Some(bad) = key.chars().find(|c| matches!(c, ':' | ';')) {
        return Err(format!("key `{key}` contains `{bad}`, which is reserved"));
    }
    if key.matches('|').count() > 1 {
        return Err(format!("key `{key}` contains more than one `|`"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_whitelist_and_negation() {
        let f = ModeFilter::parse(&["eval", "test"]).unwrap();
        assert!(!f.contains(Mode::Train) && f.contains(Mode::Eval) && f.contains(Mode::Test));
        let f = ModeFilter::parse(&["!infer"]).unwrap();
        assert!(f.contains(Mode::Train) && !f.contains(Mode::Infer));
        let f = ModeFilter::parse(&["!train", "!eval"]).unwrap();
        assert_eq!(f.modes().collect::<Vec<_>>(), [Mode::Test, Mode::Infer]);
    }

    #[test]
    fn mixing_mode_forms_is_an_error() {
        let err = ModeFilter::parse(&["train", "!eval"]).unwrap_err();
        assert!(err.contains("cannot mix"), "{err}");
        assert!(ModeFilter::parse(&["training"])
            .unwrap_err()
            .contains("unknown mode"));
    }

    #[test]
    fn an_empty_mode_list_means_every_mode_as_in_fastestimator() {
        // FastEstimator's `get_current_items` runs an item whose mode set is empty in every mode.
        assert_eq!(ModeFilter::parse::<&str>(&[]).unwrap(), ModeFilter::ALL);
    }

    #[test]
    fn default_mode_strings() {
        assert_eq!(ModeFilter::parse_default("").unwrap(), ModeFilter::ALL);
        assert_eq!(
            ModeFilter::parse_default("eval, test").unwrap(),
            ModeFilter::parse(&["eval", "test"]).unwrap()
        );
    }

    #[test]
    fn ds_id_whitelist_fails_the_unnamed_dataset_blacklist_passes_it() {
        let white = DsFilter::parse(&["ds1"]).unwrap();
        assert!(white.matches("ds1") && !white.matches("ds2") && !white.matches(""));
        let black = DsFilter::parse(&["!ds1"]).unwrap();
        assert!(!black.matches("ds1") && black.matches("ds2") && black.matches(""));
        let multiple = DsFilter::parse(&["ds1", "ds2"]).unwrap();
        assert!(multiple.matches("ds1") && multiple.matches("ds2") && !multiple.matches("ds3"));
        assert!(DsFilter::parse(&["ds1", "!ds2"]).is_err());
        assert!(DsFilter::Any.matches(""));
    }

    #[test]
    fn key_rules() {
        assert!(validate_key("y_pred").is_ok());
        assert!(validate_key("a|b").is_ok());
        assert!(validate_key("a|b|c").is_err());
        assert!(validate_key("a:b").is_err());
        assert!(validate_key("a;b").is_err());
        assert!(validate_key("").is_err());
        assert!(validate_ds_id("ds:1").is_err());
    }
}
