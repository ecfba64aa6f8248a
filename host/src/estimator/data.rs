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

/// A logged number for people: integers as integers, four significant digits otherwise, an
/// exponent only for magnitudes too small or too large to read (or to fit an i64) that way.
pub fn format_number(v: f64) -> String {
    let magnitude = v.abs();
    if !v.is_finite() {
        format!("{v}")
    } else if v == v.trunc() && magnitude < 1e15 {
        format!("{}", v as i64)
    } else if (1e-4..1e5).contains(&magnitude) {
        // Four significant digits: 2.915, 0.04891, 105.2, 1235.
        let decimals = (3 - magnitude.log10().floor() as i32).max(0) as usize;
        trim_zeros(format!("{v:.decimals$}"))
    } else if (1e5..1e15).contains(&magnitude) {
        format!("{}", v.round() as i64)
    } else {
        let text = format!("{v:.3e}");
        match text.split_once('e') {
            Some((mantissa, exponent)) => format!("{}e{exponent}", trim_zeros(mantissa.to_owned())),
            None => text,
        }
    }
}

/// `0.1000` → `0.1`, `2.000` → `2`; text without a point is left alone.
fn trim_zeros(text: String) -> String {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
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

    /// Every entry, logged or not, in order of first write.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
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
        assert_eq!(format_number(1.5e-5), "1.5e-5");
        assert_eq!(format_number(2.91484), "2.915");
        assert_eq!(format_number(0.0489123), "0.04891");
        assert_eq!(format_number(105.2345), "105.2");
        assert_eq!(format_number(1234.567), "1235");
        assert_eq!(format_number(123456.7), "123457");
        assert_eq!(format_number(-0.25), "-0.25");
        assert_eq!(format_number(f64::NAN), "NaN");
        // Past i64's range, and past what digits make readable: an exponent, not i64::MAX.
        assert_eq!(format_number(1e30), "1e30");
        assert_eq!(format_number(-2.5e18), "-2.5e18");
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
