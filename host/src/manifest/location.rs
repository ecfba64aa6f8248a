//! Pointing at the manifest: key paths (`network.ops[2].inputs`) to line and column.

use toml::de::{DeTable, DeValue};

pub use crate::key_path::{KeyPath, Seg};

/// 1-based line and column of byte `offset` in `source`.
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = source[line_start..offset].chars().count() + 1;
    (line, column)
}

/// The key a syntax error at `offset` sits in, as `table.key` (`run.seed` for
/// `seed = = 3` under `[run]`), read from the text itself since a broken document has no tree:
/// the bare or dotted key before `=` on that line, under the nearest table header above it.
pub fn key_at(source: &str, offset: usize) -> Option<String> {
    let offset = offset.min(source.len());
    let start = source[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = source[start..].lines().next().unwrap_or("");
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    let bare = |k: &str| {
        !k.is_empty()
            && k.split('.').all(|part| {
                let part = part.trim();
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            })
    };
    if !bare(key) {
        return None;
    }
    let table = source[..start].lines().rev().find_map(|l| {
        let l = l.trim();
        let inner = l.strip_prefix("[[").and_then(|r| r.strip_suffix("]]"));
        let inner = inner.or_else(|| l.strip_prefix('[').and_then(|r| r.strip_suffix(']')));
        inner.map(str::trim)
    });
    Some(match table {
        Some(table) if !table.is_empty() => format!("{table}.{key}"),
        _ => key.to_owned(),
    })
}

/// Where `path` is written in `source`: the key itself when the path ends in a key, else the
/// value. Falls back to the deepest part of the path that exists.
pub fn locate(source: &str, path: &KeyPath) -> Option<(usize, usize)> {
    let document = DeTable::parse(source).ok()?;
    let mut table: &DeTable<'_> = document.get_ref();
    let mut array: Option<&[toml::Spanned<DeValue<'_>>]> = None;
    let mut best: Option<usize> = None;
    for seg in &path.0 {
        let value = match (seg, array) {
            (Seg::Key(key), None) => {
                let Some((k, v)) = table
                    .iter()
                    .find(|(k, _)| k.get_ref().as_ref() == key.as_str())
                else {
                    break;
                };
                best = Some(k.span().start);
                v
            }
            (Seg::Index(index), Some(items)) => {
                let Some(item) = items.get(*index) else { break };
                best = Some(item.span().start);
                item
            }
            _ => break,
        };
        match value.get_ref() {
            DeValue::Table(inner) => {
                table = inner;
                array = None;
            }
            DeValue::Array(items) => {
                array = Some(items.as_ref());
            }
            _ => {
                array = None;
            }
        }
    }
    best.map(|offset| line_col(source, offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = "[run]\nepochs = 2\n\n[[network.ops]]\nop = \"ModelOp\"\n\n[[network.ops]]\nop = \"CrossEntropy\"\ninputs = [\"y_pred\", \"y\"]\n";

    #[test]
    fn locates_keys_inside_arrays_of_tables() {
        let path = KeyPath::root("network").key("ops").index(1).key("inputs");
        assert_eq!(path.to_string(), "network.ops[1].inputs");
        assert_eq!(locate(SOURCE, &path), Some((9, 1)));
        assert_eq!(
            locate(SOURCE, &KeyPath::root("run").key("epochs")),
            Some((2, 1))
        );
    }

    #[test]
    fn falls_back_to_the_deepest_existing_part() {
        let missing = KeyPath::root("network").key("ops").index(1).key("missing");
        let table = KeyPath::root("network").key("ops").index(1);
        assert_eq!(locate(SOURCE, &missing), locate(SOURCE, &table));
        assert_eq!(
            locate(SOURCE, &KeyPath::root("run").key("nope")),
            Some((1, 2))
        );
    }

    #[test]
    fn dotted_paths_from_plugins_extend_the_key_path() {
        let path = KeyPath::root("traces").index(0).join_dotted("weights[2].x");
        assert_eq!(path.to_string(), "traces[0].weights[2].x");
    }

    #[test]
    fn line_col_is_one_based() {
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("ab", 0), (1, 1));
    }

    #[test]
    fn a_syntax_error_is_named_by_the_key_on_its_line_under_its_table() {
        let source = "epochs = 1\n[run]\nseed = = 3\n[[network.ops]]\nop.name = [\n";
        assert_eq!(key_at(source, 0).as_deref(), Some("epochs"));
        assert_eq!(
            key_at(source, source.find("= 3").unwrap()).as_deref(),
            Some("run.seed")
        );
        let last = source.find("op.name").unwrap() + 10;
        assert_eq!(key_at(source, last).as_deref(), Some("network.ops.op.name"));
        assert_eq!(key_at("[run\n", 2), None, "no key on a broken header line");
    }
}
