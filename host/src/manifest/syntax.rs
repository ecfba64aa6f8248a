//! TOML syntax errors in our words. The parser words some errors after its own grammar
//! ("string values must be quoted" for `batch_size = 8 8`, a bare "duplicate key" for a table
//! written twice); this says what was expected, reading the text around the error. Messages
//! not recognised are kept as the parser wrote them.

/// `message` (the parser's, for an error at byte `offset` of `source`) said in our words.
pub fn explain(message: &str, source: &str, offset: usize) -> String {
    let offset = offset.min(source.len());
    let line_start = source[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = source[line_start..].lines().next().unwrap_or("");
    let rest = source[offset..].lines().next().unwrap_or("");
    let token = value_token(rest);
    const VALUE: &str = "a number, \"text\", true or false, [a, list] or { a = table }";
    // `name = 'lenet` is an unclosed string; `lr = }` reaches the same message with no quote.
    let opened_quote = line[..offset - line_start]
        .split_once('=')
        .is_some_and(|(_, value)| value.contains('\''));
    if message.starts_with("string values must be quoted")
        || message.starts_with("missing inline table opening")
        || (message.starts_with("invalid literal string") && !opened_quote)
    {
        return if token.is_empty() {
            let found = rest.trim_start().chars().next();
            match found {
                Some(c) => format!("expected a value after `=`, found `{c}`: write {VALUE}"),
                None => format!("a value is missing after `=`: write {VALUE}"),
            }
        } else {
            format!(
                "`{token}` is not one value: quote text (\"{token}\"), separate list items with commas, and give each key one value"
            )
        };
    }
    if message.starts_with("invalid literal string") {
        return "this 'string' is not closed on its line: expected a closing `'`".to_owned();
    }
    if message.starts_with("invalid basic string") {
        return "this \"string\" is not closed on its line: expected a closing `\"` (only \"\"\"strings\"\"\" may span lines)".to_owned();
    }
    if message.starts_with("unclosed array")
        || message.starts_with("missing comma between array elements")
    {
        return "expected `,` between the items of this [array], or `]` to close it".to_owned();
    }
    if message.starts_with("unclosed inline table")
        || message.starts_with("missing comma between key-value pairs")
        || message.starts_with("missing key for inline table element")
    {
        return "expected `,` between the entries of this { inline table }, or `}` to close it (an inline table stays on one line)".to_owned();
    }
    if message.starts_with("unexpected key or value, expected newline") {
        return format!(
            "expected the end of the line, found `{}`: one `key = value` or [table] per line (a comment starts with #)",
            rest.trim_end()
        );
    }
    if message.starts_with("duplicate key") {
        return duplicate(source, line_start, line);
    }
    message.to_owned()
}

/// A schema error of serde's (`invalid value: integer `-1`, expected u32`) in our words.
pub fn explain_schema(message: &str) -> String {
    let whole = |ty: &str| match ty {
        "u8" => Some("0 to 255"),
        "u16" => Some("0 to 65535"),
        "u32" => Some("0 to 4294967295"),
        "u64" | "usize" => Some("0 to 18446744073709551615"),
        _ => None,
    };
    if let Some(rest) = message.strip_prefix("invalid value: integer `") {
        if let Some((value, ty)) = rest.split_once("`, expected ") {
            if let Some(range) = whole(ty) {
                return format!("must be a whole number from {range}, not {value}");
            }
        }
    }
    if let Some(rest) = message.strip_prefix("invalid type: ") {
        if let Some((found, ty)) = rest.split_once(", expected ") {
            if whole(ty).is_some() {
                return format!("must be a whole number, not {found}");
            }
            if found == "map" && ty.starts_with("a sequence") {
                return "must be an array of tables (write [[key]], not [key])".to_owned();
            }
        }
    }
    message.to_owned()
}

/// The text of a value that runs on to the end of its line, list item or inline table.
fn value_token(rest: &str) -> &str {
    let end = rest.find(['#', ',', ']', '}']).unwrap_or(rest.len());
    rest[..end].trim()
}

/// A table header or a key written twice, with the line of its first definition.
fn duplicate(source: &str, line_start: usize, line: &str) -> String {
    let before = &source[..line_start];
    let trimmed = line.trim();
    if trimmed.starts_with('[') && !trimmed.starts_with("[[") {
        let first = before
            .lines()
            .position(|l| l.trim() == trimmed)
            .map(|i| format!(" (first at line {})", i + 1))
            .unwrap_or_default();
        return format!("table {trimmed} is defined twice{first}: write its keys under one header");
    }
    let key = trimmed.split('=').next().unwrap_or("").trim();
    // The first definition: the same key earlier in the same table (after its header).
    let lines: Vec<&str> = before.lines().collect();
    let first = lines
        .iter()
        .enumerate()
        .rev()
        .take_while(|(_, l)| !l.trim_start().starts_with('['))
        .filter(|(_, l)| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|after| after.trim_start().starts_with('='))
        })
        .map(|(i, _)| format!(" (first at line {})", i + 1))
        .last()
        .unwrap_or_default();
    format!("`{key}` is set twice{first}: keep one")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(source: &str, needle: &str, message: &str) -> String {
        explain(message, source, source.find(needle).unwrap())
    }

    #[test]
    fn two_values_for_one_key() {
        let source = "[pipeline]\nbatch_size = 8 8\n";
        assert_eq!(
            at(source, "8 8", "string values must be quoted, expected literal string"),
            "`8 8` is not one value: quote text (\"8 8\"), separate list items with commas, and give each key one value"
        );
    }

    #[test]
    fn missing_values_say_what_a_value_is() {
        let source = "[run]\nlr = }\n";
        assert_eq!(
            at(source, "}", "missing inline table opening, expected `{`"),
            "expected a value after `=`, found `}`: write a number, \"text\", true or false, [a, list] or { a = table }"
        );
        let source = "[run]\nlr =\n";
        assert!(explain("string values must be quoted", source, 10)
            .starts_with("a value is missing after `=`"));
    }

    #[test]
    fn repeated_tables_and_keys_name_the_first_line() {
        let source = "[run]\nepochs = 1\n[pipeline]\nbatch_size = 2\n[pipeline]\n";
        let offset = source.rfind("pipeline").unwrap();
        assert_eq!(
            explain("duplicate key", source, offset),
            "table [pipeline] is defined twice (first at line 3): write its keys under one header"
        );
        let source = "[run]\nseed = 1\nepochs = 2\nseed = 3\n";
        let offset = source.rfind("seed").unwrap();
        assert_eq!(
            explain("duplicate key", source, offset),
            "`seed` is set twice (first at line 2): keep one"
        );
    }

    #[test]
    fn schema_errors_say_which_numbers_fit() {
        assert_eq!(
            explain_schema("invalid value: integer `-1`, expected u32"),
            "must be a whole number from 0 to 4294967295, not -1"
        );
        assert_eq!(
            explain_schema("invalid type: floating point `1.5`, expected u32"),
            "must be a whole number, not floating point `1.5`"
        );
        assert_eq!(
            explain_schema("invalid type: map, expected a sequence"),
            "must be an array of tables (write [[key]], not [key])"
        );
    }

    #[test]
    fn unknown_messages_are_kept() {
        assert_eq!(
            explain("extra `=`, expected nothing", "a = = 1", 4),
            "extra `=`, expected nothing"
        );
    }
}
