//! What traces write during one hook group (a batch, or an epoch), and read back.

use tch::Tensor;

/// A value written by a trace.
#[derive(Debug)]
pub enum Logged {
    /// A number.
    Scalar(f64),
    /// A tensor (per-class values, ...).
    Tensor(Tensor),
    /// A text.
    Text(String),
}

impl Logged {
    /// The value as a number, if it is one (or a one-element tensor).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Logged::Scalar(v) => Some(*v),
            Logged::Tensor(t) if t.numel() == 1 => {
                t.f_reshape([-1]).ok().map(|t| t.double_value(&[0]))
            }
            _ => None,
        }
    }

    /// How the value is printed in logs.
    pub fn render(&self) -> String {
        match self {
            Logged::Scalar(v) => format_number(*v),
            Logged::Text(s) => s.clone(),
            Logged::Tensor(t) => match self.as_f64() {
                Some(v) => format_number(v),
                None => {
                    let values: Vec<f64> = t
                        .f_flatten(0, -1)
                        .and_then(|f| f.f_to_kind(tch::Kind::Double))
                        .ok()
                        .and_then(|f| Vec::<f64>::try_from(&f).ok())
                        .unwrap_or_default();
                    let shown: Vec<String> =
                        values.iter().take(16).map(|v| format_number(*v)).collect();
                    let more = if values.len() > 16 { ", ..." } else { "" };
                    format!("[{}{more}]", shown.join(", "))
                }
            },
        }
    }
}

/// Numbers as FastEstimator logs them: up to 4 decimals for ordinary magnitudes.
pub fn format_number(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else if v.abs() >= 1e-3 && v.abs() < 1e6 {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        format!("{v:.4e}")
    }
}

/// One write.
#[derive(Debug)]
pub struct Entry {
    /// Its key.
    pub key: String,
    /// Its value.
    pub value: Logged,
    /// Whether logs show it.
    pub log: bool,
}

/// The writes of one hook group, in order (a later write of a key replaces the earlier one).
#[derive(Debug, Default)]
pub struct Data {
    entries: Vec<Entry>,
}

impl Data {
    /// Writes `value` under `key`.
    pub fn write(&mut self, key: &str, value: Logged, log: bool) {
        if let Some(entry) = self.entries.iter_mut().find(|e| e.key == key) {
            entry.value = value;
            entry.log = log;
        } else {
            self.entries.push(Entry {
                key: key.to_owned(),
                value,
                log,
            });
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Logged> {
        self.entries.iter().find(|e| e.key == key).map(|e| &e.value)
    }

    /// Entries shown in logs.
    pub fn logged(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.log)
    }

    /// `true` when nothing is to be logged.
    pub fn nothing_logged(&self) -> bool {
        !self.entries.iter().any(|e| e.log)
    }

    /// Forgets every entry, keeping the allocation.
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_render_compactly() {
        assert_eq!(format_number(2.0), "2");
        assert_eq!(format_number(0.123456), "0.1235");
        assert_eq!(format_number(0.5), "0.5");
        assert_eq!(format_number(1.5e-5), "1.5000e-5");
    }

    #[test]
    fn later_writes_replace_earlier_ones() {
        let mut data = Data::default();
        data.write("a", Logged::Scalar(1.0), true);
        data.write("b", Logged::Scalar(2.0), false);
        data.write("a", Logged::Scalar(3.0), true);
        assert_eq!(data.get("a").and_then(Logged::as_f64), Some(3.0));
        assert_eq!(data.logged().count(), 1);
    }
}
