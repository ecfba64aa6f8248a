//! A small JSON parser that keeps numbers as their source text.
//!
//! serde_json (without its `float_roundtrip` feature, which this workspace does not enable)
//! parses floats to within an ulp or so; logs must read back exactly what was written, and
//! Rust's `str::parse::<f64>` is correctly rounded.

/// A parsed JSON value; numbers are the text as written, already checked against the grammar.
#[derive(Debug, Clone, PartialEq)]
pub enum Json<'a> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as written.
    Number(&'a str),
    /// A string, unescaped.
    String(String),
    /// An array.
    Array(Vec<Json<'a>>),
    /// An object's members, in order (duplicate keys are rejected).
    Object(Vec<(String, Json<'a>)>),
}

impl Json<'_> {
    /// What kind of value this is, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Number(_) => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }
}

/// Nesting deeper than this is an error rather than a stack overflow.
const MAX_DEPTH: usize = 64;

/// Parses one complete JSON document; errors name the 1-based column (in bytes).
pub fn parse(text: &str) -> Result<Json<'_>, String> {
    let mut parser = Parser { text, pos: 0 };
    let value = parser.value(0)?;
    parser.skip_ws();
    if parser.pos < text.len() {
        return Err(parser.error("trailing characters after the JSON value"));
    }
    Ok(value)
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn error(&self, message: &str) -> String {
        format!("column {}: {message}", self.pos + 1)
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        self.skip_ws();
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected `{}`", byte as char)))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json<'a>, String> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        self.skip_ws();
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Json::String),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => {
                for (word, value) in [
                    ("null", Json::Null),
                    ("true", Json::Bool(true)),
                    ("false", Json::Bool(false)),
                ] {
                    if self.text[self.pos..].starts_with(word) {
                        self.pos += word.len();
                        return Ok(value);
                    }
                }
                Err(self.error("expected a JSON value"))
            }
            None => Err(self.error("unexpected end of input")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json<'a>, String> {
        self.pos += 1;
        let mut members: Vec<(String, Json<'a>)> = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Json::Object(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a string key"));
            }
            let key_at = self.pos;
            let key = self.string()?;
            if members.iter().any(|(k, _)| *k == key) {
                self.pos = key_at;
                return Err(self.error(&format!("duplicate key {key:?}")));
            }
            self.expect(b':')?;
            let value = self.value(depth + 1)?;
            members.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Json::Object(members));
                }
                _ => return Err(self.error("expected `,` or `}`")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json<'a>, String> {
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.error("expected `,` or `]`")),
            }
        }
    }

    fn number(&mut self) -> Result<Json<'a>, String> {
        let start = self.pos;
        let bytes = self.text.as_bytes();
        let digits = |pos: &mut usize| {
            let from = *pos;
            while bytes.get(*pos).is_some_and(u8::is_ascii_digit) {
                *pos += 1;
            }
            *pos - from
        };
        let mut pos = self.pos;
        if bytes.get(pos) == Some(&b'-') {
            pos += 1;
        }
        let int_at = pos;
        let int_digits = digits(&mut pos);
        let mut ok = int_digits == 1 || (int_digits > 1 && bytes[int_at] != b'0');
        if ok && bytes.get(pos) == Some(&b'.') {
            pos += 1;
            ok = digits(&mut pos) > 0;
        }
        if ok && matches!(bytes.get(pos), Some(b'e' | b'E')) {
            pos += 1;
            if matches!(bytes.get(pos), Some(b'+' | b'-')) {
                pos += 1;
            }
            ok = digits(&mut pos) > 0;
        }
        if !ok {
            self.pos = pos;
            return Err(self.error("malformed number"));
        }
        self.pos = pos;
        Ok(Json::Number(&self.text[start..pos]))
    }

    fn string(&mut self) -> Result<String, String> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            let rest = &self.text[self.pos..];
            let plain = rest
                .find(|c: char| c == '"' || c == '\\' || c < ' ')
                .ok_or_else(|| self.error("unterminated string"))?;
            out.push_str(&rest[..plain]);
            self.pos += plain;
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let escaped = match self.peek() {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.pos += 1;
                            out.push(self.unicode_escape()?);
                            continue;
                        }
                        _ => return Err(self.error("invalid escape")),
                    };
                    self.pos += 1;
                    out.push(escaped);
                }
                _ => return Err(self.error("control character in string")),
            }
        }
    }

    /// The code point of `XXXX` (after `\u`), joining a UTF-16 surrogate pair when one follows.
    fn unicode_escape(&mut self) -> Result<char, String> {
        let high = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&high) {
            if !self.text[self.pos..].starts_with("\\u") {
                return Err(self.error("unpaired surrogate"));
            }
            self.pos += 2;
            let low = self.hex4()?;
            if !(0xDC00..0xE000).contains(&low) {
                return Err(self.error("unpaired surrogate"));
            }
            0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
        } else {
            high
        };
        char::from_u32(code).ok_or_else(|| self.error("unpaired surrogate"))
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self
            .text
            .get(self.pos..self.pos + 4)
            .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| self.error("expected four hex digits"))?;
        self.pos += 4;
        u32::from_str_radix(digits, 16).map_err(|e| self.error(&e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_parse_with_numbers_kept_as_written() {
        let doc =
            parse(r#" {"a": [1, -0.5e+3, 0, true, null], "b\n\u00e9\ud83d\ude00": {}, "c": []} "#)
                .unwrap();
        assert_eq!(
            doc,
            Json::Object(vec![
                (
                    "a".into(),
                    Json::Array(vec![
                        Json::Number("1"),
                        Json::Number("-0.5e+3"),
                        Json::Number("0"),
                        Json::Bool(true),
                        Json::Null,
                    ])
                ),
                ("b\n\u{e9}\u{1F600}".into(), Json::Object(vec![])),
                ("c".into(), Json::Array(vec![])),
            ])
        );
    }

    #[test]
    fn invalid_documents_are_errors_with_a_column() {
        for (text, expected) in [
            ("", "column 1: unexpected end of input"),
            ("01", "column 3: malformed number"),
            ("0 1", "column 3: trailing characters"),
            ("1.", "column 3: malformed number"),
            ("-", "column 2: malformed number"),
            ("1e", "column 3: malformed number"),
            ("{\"a\":1,}", "column 8: expected a string key"),
            ("{\"a\":1,\"a\":2}", "column 8: duplicate key \"a\""),
            ("[1 2]", "column 4: expected `,` or `]`"),
            ("\"tab\there\"", "control character"),
            ("\"\\x\"", "invalid escape"),
            ("\"\\ud800\"", "unpaired surrogate"),
            ("\"open", "unterminated string"),
            ("NaN", "expected a JSON value"),
            ("{\"a\" 1}", "expected `:`"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
        let deep = "[".repeat(MAX_DEPTH + 2);
        assert!(parse(&deep).unwrap_err().contains("nested too deeply"));
    }
}
