//! The NPY header: magic string, version, header length, then a Python dict literal such as
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }`. Parsed by hand (a small
//! recursive-descent reader of the literals numpy writes), as a pure function the
//! `npy_header` fuzz target calls.

use tch::Kind;

const MAGIC: &[u8] = b"\x93NUMPY";
/// Nesting allowed in the header literal: numpy writes depth 2 (a dict of tuples); the limit
/// keeps a hostile header from overflowing the stack.
const MAX_DEPTH: usize = 8;

/// An element type NPY files can hold and this reader understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element {
    /// `b1`.
    Bool,
    /// `i1`.
    I8,
    /// `u1`.
    U8,
    /// `i2`.
    I16,
    /// `u2`, read as int32.
    U16,
    /// `i4`.
    I32,
    /// `u4`, read as int64.
    U32,
    /// `i8`.
    I64,
    /// `u8`, read as int64.
    U64,
    /// `f2`.
    F16,
    /// `f4`.
    F32,
    /// `f8`.
    F64,
}

impl Element {
    const ALL: [Element; 12] = [
        Element::Bool,
        Element::I8,
        Element::U8,
        Element::I16,
        Element::U16,
        Element::I32,
        Element::U32,
        Element::I64,
        Element::U64,
        Element::F16,
        Element::F32,
        Element::F64,
    ];

    /// Type code in a descr, bytes per value in the file, kind of the tensor it becomes.
    fn spec(self) -> (&'static str, usize, Kind) {
        match self {
            Element::Bool => ("b1", 1, Kind::Bool),
            Element::I8 => ("i1", 1, Kind::Int8),
            Element::U8 => ("u1", 1, Kind::Uint8),
            Element::I16 => ("i2", 2, Kind::Int16),
            Element::U16 => ("u2", 2, Kind::Int),
            Element::I32 => ("i4", 4, Kind::Int),
            Element::U32 => ("u4", 4, Kind::Int64),
            Element::I64 => ("i8", 8, Kind::Int64),
            Element::U64 => ("u8", 8, Kind::Int64),
            Element::F16 => ("f2", 2, Kind::Half),
            Element::F32 => ("f4", 4, Kind::Float),
            Element::F64 => ("f8", 8, Kind::Double),
        }
    }
}

/// A dtype: element type and byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dtype {
    /// The element type.
    pub element: Element,
    /// `true` when multi-byte values are stored big-endian.
    pub big_endian: bool,
}

impl Dtype {
    /// Bytes per value in the file.
    pub fn width(self) -> usize {
        self.element.spec().1
    }

    /// The kind of the tensors samples become.
    pub fn kind(self) -> Kind {
        self.element.spec().2
    }

    /// The descr numpy would write, e.g. `<f4`.
    pub fn descr(self) -> String {
        let (code, width, _) = self.element.spec();
        let order = match (width, self.big_endian) {
            (1, _) => '|',
            (_, true) => '>',
            (_, false) => '<',
        };
        format!("{order}{code}")
    }
}

/// What the header of an NPY file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// Format version (major, minor).
    pub version: (u8, u8),
    /// Element type and byte order.
    pub dtype: Dtype,
    /// `true` when the values are in column-major (Fortran) order.
    pub fortran_order: bool,
    /// Shape of the whole array; axis 0 counts samples.
    pub shape: Vec<u64>,
    /// Where the values start, from the start of the file.
    pub data_offset: usize,
}

impl NpyHeader {
    /// Bytes of data the header declares, or an error when that overflows.
    pub fn data_len(&self) -> std::result::Result<usize, String> {
        self.shape
            .iter()
            .try_fold(self.dtype.width(), |acc, &d| {
                usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
            })
            .ok_or_else(|| format!("shape {} is too large", shape_text(&self.shape)))
    }
}

/// Parses the header of an NPY file (`bytes` may hold the whole file or just its start).
pub fn parse_header(bytes: &[u8]) -> std::result::Result<NpyHeader, String> {
    if bytes.starts_with(MAGIC) && bytes.len() < MAGIC.len() + 2 {
        return Err(format!(
            "truncated: the file ends after {} bytes, inside the version",
            bytes.len()
        ));
    }
    if !bytes.starts_with(MAGIC) {
        let hint = if bytes.starts_with(b"PK\x03\x04") {
            " (it is a zip archive: an .npz file needs `type = \"npz\"`)"
        } else {
            ""
        };
        return Err(format!(
            "not an NPY file: it does not start with the magic string \\x93NUMPY{hint}"
        ));
    }
    let version = (bytes[6], bytes[7]);
    let (len_bytes, utf8) = match version.0 {
        1 => (2, false),
        2 => (4, false),
        3 => (4, true),
        major => {
            return Err(format!(
                "unsupported NPY format version {major}.{} (this reader knows 1.0, 2.0 and 3.0)",
                version.1
            ))
        }
    };
    let prefix = 8 + len_bytes;
    if bytes.len() < prefix {
        return Err(format!(
            "truncated: the file ends after {} bytes, inside the header length",
            bytes.len()
        ));
    }
    let header_len = if len_bytes == 2 {
        u16::from_le_bytes([bytes[8], bytes[9]]) as usize
    } else {
        u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize
    };
    let data_offset = prefix + header_len;
    let Some(raw) = bytes.get(prefix..data_offset) else {
        return Err(format!(
            "truncated: the header declares {header_len} bytes but the file ends after {}",
            bytes.len()
        ));
    };
    // Versions 1 and 2 are latin-1 by definition; 3 exists only to allow UTF-8 field names.
    let text: String = if utf8 {
        std::str::from_utf8(raw)
            .map_err(|e| format!("header is not UTF-8: {e}"))?
            .to_owned()
    } else {
        raw.iter().map(|&b| char::from(b)).collect()
    };
    let mut parser = Parser {
        text: &text,
        pos: 0,
    };
    let dict = parser.value(0)?;
    parser.skip_space();
    if parser.pos != text.len() {
        return Err(format!(
            "header: unexpected text after the dict at byte {}",
            parser.pos
        ));
    }
    let Literal::Dict(entries) = dict else {
        return Err("header: expected a dict".into());
    };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    for (key, value) in entries {
        let slot = match key.as_str() {
            "descr" => &mut descr,
            "fortran_order" => &mut fortran,
            "shape" => &mut shape,
            other => return Err(format!("header: unexpected key `{other}`")),
        };
        if slot.replace(value).is_some() {
            return Err(format!("header: key `{key}` appears twice"));
        }
    }
    let dtype = match descr {
        Some(Literal::Str(s)) => parse_descr(&s)?,
        Some(Literal::List) => {
            return Err("structured dtypes (a list as `descr`) are not supported".into())
        }
        Some(_) => return Err("header: `descr` is not a string".into()),
        None => return Err("header: missing key `descr`".into()),
    };
    let fortran_order = match fortran {
        Some(Literal::Bool(b)) => b,
        Some(_) => return Err("header: `fortran_order` is not True or False".into()),
        None => return Err("header: missing key `fortran_order`".into()),
    };
    let shape = match shape {
        Some(Literal::Tuple(items)) => items
            .into_iter()
            .map(|item| match item {
                Literal::Int(n) if n >= 0 => Ok(n as u64),
                Literal::Int(n) => Err(format!("header: negative dimension {n} in `shape`")),
                _ => Err("header: `shape` holds something other than integers".to_owned()),
            })
            .collect::<std::result::Result<Vec<u64>, String>>()?,
        Some(_) => return Err("header: `shape` is not a tuple".into()),
        None => return Err("header: missing key `shape`".into()),
    };
    Ok(NpyHeader {
        version,
        dtype,
        fortran_order,
        shape,
        data_offset,
    })
}

fn parse_descr(descr: &str) -> std::result::Result<Dtype, String> {
    let (order, code) = match descr.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (c, &descr[1..]),
        _ => ('|', descr),
    };
    let code = if code == "?" { "b1" } else { code };
    let Some(element) = Element::ALL.into_iter().find(|e| e.spec().0 == code) else {
        let why = match code.chars().next() {
            Some('O') => " (object arrays hold pickled Python objects)",
            Some('U' | 'S' | 'a') => " (strings: store them in a CSV file instead)",
            _ => "",
        };
        return Err(format!(
            "dtype `{descr}` is not supported{why}; supported: bool, int8/16/32/64, uint8/16/32/64, float16/32/64"
        ));
    };
    let big_endian = match order {
        '<' => false,
        '>' => true,
        _ => cfg!(target_endian = "big"),
    };
    Ok(Dtype {
        element,
        big_endian: element.spec().1 > 1 && big_endian,
    })
}

pub(super) fn shape_text(shape: &[u64]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The subset of Python literals numpy writes in headers.
#[derive(Debug)]
enum Literal {
    Str(String),
    Bool(bool),
    Int(i64),
    Tuple(Vec<Literal>),
    /// Only ever refused (structured dtypes), so its items are not kept.
    List,
    Dict(Vec<(String, Literal)>),
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn error(&self, what: &str) -> String {
        format!("header: {what} at byte {}", self.pos)
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> std::result::Result<Literal, String> {
        if depth > MAX_DEPTH {
            return Err(self.error("nesting too deep"));
        }
        self.skip_space();
        let Some(first) = self.rest().chars().next() else {
            return Err(self.error("unexpected end"));
        };
        match first {
            '{' => {
                self.pos += 1;
                let entries = self.sequence('}', depth, true)?;
                Ok(Literal::Dict(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.unwrap_or_default(), v))
                        .collect(),
                ))
            }
            '(' | '[' => {
                self.pos += 1;
                let close = if first == '(' { ')' } else { ']' };
                let items = self.sequence(close, depth, false)?;
                let items = items.into_iter().map(|(_, v)| v).collect();
                Ok(if first == '(' {
                    Literal::Tuple(items)
                } else {
                    Literal::List
                })
            }
            '\'' | '"' => self.string().map(Literal::Str),
            _ if self.eat("True") => Ok(Literal::Bool(true)),
            _ if self.eat("False") => Ok(Literal::Bool(false)),
            _ => self.int(),
        }
    }

    /// Comma-separated items up to `close` (a trailing comma is fine); `keyed` reads
    /// `'key': value` pairs.
    fn sequence(
        &mut self,
        close: char,
        depth: usize,
        keyed: bool,
    ) -> std::result::Result<Vec<(Option<String>, Literal)>, String> {
        let mut items = Vec::new();
        let close = close.to_string();
        loop {
            if self.eat(&close) {
                return Ok(items);
            }
            let key = if keyed {
                self.skip_space();
                let key = self.string()?;
                if !self.eat(":") {
                    return Err(self.error("expected `:`"));
                }
                Some(key)
            } else {
                None
            };
            items.push((key, self.value(depth + 1)?));
            if !self.eat(",") {
                if self.eat(&close) {
                    return Ok(items);
                }
                return Err(self.error(&format!("expected `,` or `{close}`")));
            }
        }
    }

    fn string(&mut self) -> std::result::Result<String, String> {
        let mut chars = self.rest().char_indices();
        let quote = match chars.next() {
            Some((_, q @ ('\'' | '"'))) => q,
            _ => return Err(self.error("expected a quoted string")),
        };
        let mut out = String::new();
        let mut escaped = false;
        for (offset, c) in chars {
            if escaped {
                out.push(c);
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == quote {
                self.pos += offset + c.len_utf8();
                return Ok(out);
            } else {
                out.push(c);
            }
        }
        Err(self.error("unterminated string"))
    }

    fn int(&mut self) -> std::result::Result<Literal, String> {
        let rest = self.rest();
        let sign = usize::from(rest.starts_with('-'));
        let digits = rest[sign..].bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(self.error("unexpected character"));
        }
        let end = sign + digits;
        let value: i64 = rest[..end]
            .parse()
            .map_err(|_| self.error("integer out of range"))?;
        self.pos += end;
        // Python 2 wrote long integers with an `L` suffix.
        if self.rest().starts_with('L') {
            self.pos += 1;
        }
        Ok(Literal::Int(value))
    }
}
