//! Values that change with the epoch: FastEstimator's `EpochScheduler` and `RepeatScheduler`.
//!
//! In a manifest, anything schedulable is either written plainly (in force every epoch) or as
//! a table with exactly one of these keys:
//!
//! ```toml
//! batch_size = { epoch = { 1 = 32, 3 = 64 } }     # 32 in epochs 1-2, 64 from epoch 3
//! batch_size = { repeat = [32, 64] }              # 32 in odd epochs, 64 in even ones
//!
//! [[network.ops]]                                 # a scheduled op: CrossEntropy, then Focal
//! [network.ops.epoch.1]
//! op = "CrossEntropy"
//! inputs = ["y_pred", "y"]
//! outputs = "loss"
//! [network.ops.epoch.3]
//! op = "FocalLoss"
//! inputs = ["y_pred", "y"]
//! outputs = "loss"
//! ```
//!
//! `"none"` in place of a value means "nothing this epoch". An epoch schedule gives nothing
//! before its first key; a repeat schedule cycles through its list (at least two entries),
//! epoch 1 taking the first. Every value is built once, so a component that comes back keeps
//! its state.

use std::sync::Arc;

use toml::Value;

use crate::key_path::{KeyPath, Problem};

/// Which value of a [`Scheduled`] is in force in an epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Always value 0.
    Fixed,
    /// `(first epoch, value index or none)`, sorted by epoch.
    Epoch(Vec<(u32, Option<usize>)>),
    /// Value index (or none) for epochs 1, 2, ... cycled.
    Repeat(Vec<Option<usize>>),
}

impl Schedule {
    /// The index of the value in force in `epoch` (from 1), if any.
    pub fn index_at(&self, epoch: u32) -> Option<usize> {
        match self {
            Schedule::Fixed => Some(0),
            Schedule::Epoch(keys) => keys
                .iter()
                .take_while(|(first, _)| *first <= epoch)
                .last()
                .and_then(|(_, v)| *v),
            Schedule::Repeat(cycle) => {
                let position = (epoch.max(1) - 1) as usize % cycle.len();
                cycle[position]
            }
        }
    }

    /// `true` unless the value can change with the epoch.
    pub fn is_scheduled(&self) -> bool {
        !matches!(self, Schedule::Fixed)
    }

    /// Where value `variant` is written under `base`: `base` itself, `base.epoch.N` or
    /// `base.repeat[i]`.
    pub fn variant_path(&self, base: &KeyPath, variant: usize) -> KeyPath {
        match self {
            Schedule::Fixed => base.clone(),
            Schedule::Epoch(keys) => keys
                .iter()
                .find(|(_, v)| *v == Some(variant))
                .map(|(epoch, _)| base.key("epoch").key(&epoch.to_string()))
                .unwrap_or_else(|| base.clone()),
            Schedule::Repeat(cycle) => cycle
                .iter()
                .position(|v| *v == Some(variant))
                .map(|i| base.key("repeat").index(i))
                .unwrap_or_else(|| base.clone()),
        }
    }

    /// When value `variant` is in force, in words: `epochs 1-2`, `from epoch 3`, `epochs 1, 3, 5, ...`.
    pub fn describe_variant(&self, variant: usize) -> String {
        match self {
            Schedule::Fixed => "every epoch".to_owned(),
            Schedule::Epoch(keys) => {
                let mut spans = Vec::new();
                for (i, (first, v)) in keys.iter().enumerate() {
                    if *v != Some(variant) {
                        continue;
                    }
                    spans.push(match keys.get(i + 1) {
                        Some((next, _)) if *next == first + 1 => format!("epoch {first}"),
                        Some((next, _)) => format!("epochs {first}-{}", next - 1),
                        None => format!("from epoch {first}"),
                    });
                }
                spans.join(", ")
            }
            Schedule::Repeat(cycle) => {
                let positions: Vec<String> = cycle
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| **v == Some(variant))
                    .map(|(i, _)| (i + 1).to_string())
                    .collect();
                format!("epochs {} of every {}", positions.join(", "), cycle.len())
            }
        }
    }
}

/// A value, or several chosen by epoch.
#[derive(Debug, Clone)]
pub struct Scheduled<T> {
    /// Every value that can be in force, each built once.
    pub values: Vec<T>,
    /// Which one is in force when.
    pub schedule: Schedule,
}

impl<T> Scheduled<T> {
    /// The same value in every epoch.
    pub fn fixed(value: T) -> Self {
        Self {
            values: vec![value],
            schedule: Schedule::Fixed,
        }
    }

    /// The value in force in `epoch`.
    pub fn at(&self, epoch: u32) -> Option<&T> {
        self.schedule
            .index_at(epoch)
            .and_then(|i| self.values.get(i))
    }

    /// The value in force in `epoch`, mutably.
    pub fn at_mut(&mut self, epoch: u32) -> Option<&mut T> {
        self.schedule
            .index_at(epoch)
            .and_then(move |i| self.values.get_mut(i))
    }

    /// Applies `f` to every value, keeping the schedule.
    pub fn try_map<U, E>(
        self,
        mut f: impl FnMut(T, usize) -> Result<U, E>,
    ) -> Result<Scheduled<U>, E> {
        let values = self
            .values
            .into_iter()
            .enumerate()
            .map(|(i, v)| f(v, i))
            .collect::<Result<Vec<_>, E>>()?;
        Ok(Scheduled {
            values,
            schedule: self.schedule,
        })
    }
}

/// Whether one value of a schedule is in force: its index in a schedule shared with the other
/// values of the same manifest entry. Built components carry one, so the executor filters by
/// epoch the way it filters by mode.
#[derive(Debug, Clone)]
pub struct InForce {
    schedule: Arc<Schedule>,
    variant: usize,
}

impl InForce {
    /// In force in every epoch.
    pub fn always() -> Self {
        Self {
            schedule: Arc::new(Schedule::Fixed),
            variant: 0,
        }
    }

    /// Whether this value is the one in force in `epoch`.
    pub fn at(&self, epoch: u32) -> bool {
        self.schedule.index_at(epoch) == Some(self.variant)
    }

    /// `true` unless it is in force in every epoch.
    pub fn is_scheduled(&self) -> bool {
        self.schedule.is_scheduled()
    }

    /// The schedule it belongs to.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Which value of its schedule it is.
    pub fn variant(&self) -> usize {
        self.variant
    }
}

impl<T> Scheduled<T> {
    /// Every value with when it is in force, in declaration order.
    pub fn into_variants(self) -> Vec<(T, InForce)> {
        let schedule = Arc::new(self.schedule);
        self.values
            .into_iter()
            .enumerate()
            .map(|(variant, value)| {
                let in_force = InForce {
                    schedule: Arc::clone(&schedule),
                    variant,
                };
                (value, in_force)
            })
            .collect()
    }

    /// Every value with when it is in force, borrowed.
    pub fn variants(&self) -> Vec<(&T, InForce)> {
        let schedule = Arc::new(self.schedule.clone());
        self.values
            .iter()
            .enumerate()
            .map(|(variant, value)| {
                let in_force = InForce {
                    schedule: Arc::clone(&schedule),
                    variant,
                };
                (value, in_force)
            })
            .collect()
    }

    /// `true` if no epoch in `1..=total_epochs` goes without a value.
    pub fn covers(&self, total_epochs: u32) -> bool {
        (1..=total_epochs.max(1)).all(|e| self.at(e).is_some())
    }
}

/// FastEstimator's `get_signature_epochs`: the epochs (within `total_epochs`) where the
/// combination of values in force first takes a form not seen before. `config(epoch)` gives
/// that combination (e.g. the index in force of every schedulable item, `None` when inactive).
pub fn signature_epochs<C: PartialEq>(
    total_epochs: u32,
    mut config: impl FnMut(u32) -> C,
) -> Vec<u32> {
    let mut seen: Vec<C> = Vec::new();
    let mut epochs = Vec::new();
    for epoch in 1..=total_epochs {
        let current = config(epoch);
        if !seen.contains(&current) {
            seen.push(current);
            epochs.push(epoch);
        }
    }
    epochs
}

/// Reads a schedulable value at `path`: a schedule table (`{ epoch = {...} }` or
/// `{ repeat = [...] }`) or a plain value, each value parsed by `parse`. `is_plain` tells a
/// plain table (e.g. a component with its `op` key) from a schedule table.
pub fn parse_scheduled<T>(
    value: Value,
    path: &KeyPath,
    is_plain: impl Fn(&toml::Table) -> bool,
    mut parse: impl FnMut(Value, KeyPath) -> Result<T, Problem>,
) -> Result<Scheduled<T>, Problem> {
    let table = match value {
        Value::Table(table)
            if !is_plain(&table)
                && (table.contains_key("epoch") || table.contains_key("repeat")) =>
        {
            table
        }
        other => return Ok(Scheduled::fixed(parse(other, path.clone())?)),
    };
    if table.len() != 1 {
        let extra: Vec<&str> = table
            .keys()
            .map(String::as_str)
            .filter(|k| *k != "epoch" && *k != "repeat")
            .collect();
        let message = if extra.is_empty() {
            "give either `epoch` or `repeat`, not both".to_owned()
        } else {
            format!(
                "a schedule holds only `epoch` or `repeat`; move {} into the scheduled values",
                extra.join(", ")
            )
        };
        return Err(Problem::new(path.clone(), message));
    }
    let mut values = Vec::new();
    let mut push =
        |value: Value, at: KeyPath, values: &mut Vec<T>| -> Result<Option<usize>, Problem> {
            if value.as_str() == Some("none") {
                return Ok(None);
            }
            values.push(parse(value, at)?);
            Ok(Some(values.len() - 1))
        };
    let schedule = if let Some(epochs) = table.get("epoch") {
        let path = path.key("epoch");
        let Value::Table(epochs) = epochs.clone() else {
            return Err(Problem::new(
                path,
                "must be a table of epoch = value, e.g. { 1 = 32, 3 = 64 }",
            ));
        };
        if epochs.is_empty() {
            return Err(Problem::new(path, "needs at least one epoch"));
        }
        let mut keyed = Vec::new();
        for (key, value) in epochs {
            let epoch: u32 = key.parse().ok().filter(|e| *e >= 1).ok_or_else(|| {
                Problem::new(
                    path.key(&key),
                    format!("`{key}` is not an epoch number (1, 2, ...)"),
                )
            })?;
            keyed.push((epoch, value, path.key(&key)));
        }
        keyed.sort_by_key(|(epoch, ..)| *epoch);
        let mut entries = Vec::new();
        for (epoch, value, at) in keyed {
            entries.push((epoch, push(value, at, &mut values)?));
        }
        Schedule::Epoch(entries)
    } else {
        let path = path.key("repeat");
        let Some(Value::Array(items)) = table.get("repeat").cloned() else {
            return Err(Problem::new(
                path,
                "must be a list of values, e.g. [32, 64]",
            ));
        };
        if items.len() < 2 {
            return Err(Problem::new(
                path,
                "a repeat schedule needs at least two entries",
            ));
        }
        let mut entries = Vec::new();
        for (i, value) in items.into_iter().enumerate() {
            entries.push(push(value, path.index(i), &mut values)?);
        }
        Schedule::Repeat(entries)
    };
    Ok(Scheduled { values, schedule })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch(entries: &[(u32, Option<usize>)]) -> Schedule {
        Schedule::Epoch(entries.to_vec())
    }

    #[test]
    fn epoch_schedule_takes_the_largest_key_not_after_the_epoch() {
        // FastEstimator's docstring: {1: "a", 3: "b", 4: None, 100: "c"}
        let s = epoch(&[(1, Some(0)), (3, Some(1)), (4, None), (100, Some(2))]);
        let at: Vec<Option<usize>> = [1, 2, 3, 4, 99, 100, 150]
            .iter()
            .map(|&e| s.index_at(e))
            .collect();
        assert_eq!(
            at,
            [Some(0), Some(0), Some(1), None, None, Some(2), Some(2)]
        );
    }

    #[test]
    fn epoch_schedule_gives_nothing_before_its_first_key() {
        let s = epoch(&[(3, Some(0))]);
        assert_eq!(
            (s.index_at(1), s.index_at(2), s.index_at(3)),
            (None, None, Some(0))
        );
    }

    #[test]
    fn repeat_schedule_cycles_from_epoch_one() {
        let s = Schedule::Repeat(vec![Some(0), Some(1), None]);
        let at: Vec<Option<usize>> = (1..=7).map(|e| s.index_at(e)).collect();
        assert_eq!(
            at,
            [Some(0), Some(1), None, Some(0), Some(1), None, Some(0)]
        );
    }

    #[test]
    fn signature_epochs_match_fastestimator() {
        // get_signature_epochs([Repeat(a, b, c, c), Epoch({1: a, 2: b, 30: None})], 50)
        let repeat = Schedule::Repeat(vec![Some(0), Some(1), Some(2), Some(2)]);
        let epoch = epoch(&[(1, Some(0)), (2, Some(1)), (30, None)]);
        // Values a, b, c as ids shared by both schedulers: repeat [a, b, c, c], epoch [a, b].
        let repeat_values = ['a', 'b', 'c'];
        let epoch_values = ['a', 'b'];
        let signature = signature_epochs(50, |e| {
            let mut items: Vec<char> = Vec::new();
            items.extend(repeat.index_at(e).map(|i| repeat_values[i]));
            items.extend(epoch.index_at(e).map(|i| epoch_values[i]));
            items
        });
        assert_eq!(signature, [1, 2, 3, 5, 30, 31, 33]);
    }

    fn parse(text: &str) -> Result<Scheduled<i64>, Problem> {
        let table: toml::Table = text.parse().unwrap();
        let value = table["x"].clone();
        parse_scheduled(
            value,
            &KeyPath::root("x"),
            |_| false,
            |v, p| {
                v.as_integer()
                    .ok_or_else(|| Problem::new(p, "not an integer"))
            },
        )
    }

    #[test]
    fn parses_plain_epoch_and_repeat_values() {
        let plain = parse("x = 5").unwrap();
        assert_eq!((plain.at(1), plain.at(9)), (Some(&5), Some(&5)));
        let by_epoch = parse("x = { epoch = { 1 = 32, 3 = 64 } }").unwrap();
        assert_eq!((by_epoch.at(2), by_epoch.at(3)), (Some(&32), Some(&64)));
        let repeated = parse("x = { repeat = [1, \"none\", 3] }").unwrap();
        assert_eq!(
            (repeated.at(1), repeated.at(2), repeated.at(3)),
            (Some(&1), None, Some(&3))
        );
    }

    #[test]
    fn schedule_errors_point_at_the_key() {
        let err = parse("x = { epoch = { 0 = 1 } }").unwrap_err();
        assert_eq!(err.path.to_string(), "x.epoch.0");
        let err = parse("x = { repeat = [1] }").unwrap_err();
        assert!(err.message.contains("at least two"), "{}", err.message);
        let err = parse("x = { epoch = { 1 = \"a\" } }").unwrap_err();
        assert_eq!(err.path.to_string(), "x.epoch.1");
        let err = parse("x = { epoch = { 1 = 2 }, repeat = [1, 2] }").unwrap_err();
        assert!(err.message.contains("not both"), "{}", err.message);
    }
}
