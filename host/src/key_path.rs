//! Key paths into the manifest (`network.ops[2].inputs`) and the problems found at them: what
//! the manifest and the schedules it holds both report errors with, so neither reaches into
//! the other for it.

use std::fmt;

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    /// A table key.
    Key(String),
    /// An array index.
    Index(usize),
}

/// A key path inside the manifest, e.g. `network.ops[2].inputs`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPath(pub Vec<Seg>);

impl KeyPath {
    /// The path of a top-level key.
    pub fn root(key: &str) -> Self {
        KeyPath(vec![Seg::Key(key.to_owned())])
    }

    /// This path extended by a key.
    pub fn key(&self, key: &str) -> Self {
        let mut segs = self.0.clone();
        segs.push(Seg::Key(key.to_owned()));
        KeyPath(segs)
    }

    /// This path extended by an index.
    pub fn index(&self, index: usize) -> Self {
        let mut segs = self.0.clone();
        segs.push(Seg::Index(index));
        KeyPath(segs)
    }

    /// This path extended by a dotted sub-path such as `a.b[1]` (from plugin config errors).
    pub fn join_dotted(&self, dotted: &str) -> Self {
        let mut out = self.clone();
        for part in dotted.split('.').filter(|p| !p.is_empty()) {
            let (name, indices) = match part.find('[') {
                Some(open) => (&part[..open], &part[open..]),
                None => (part, ""),
            };
            if !name.is_empty() {
                out = out.key(name);
            }
            for index in indices.split(['[', ']']).filter(|s| !s.is_empty()) {
                match index.parse() {
                    Ok(i) => out = out.index(i),
                    Err(_) => out = out.key(index),
                }
            }
        }
        out
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(key) if i == 0 => write!(f, "{key}")?,
                Seg::Key(key) => write!(f, ".{key}")?,
                Seg::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// A validation problem at a key path.
#[derive(Debug, Clone)]
pub struct Problem {
    /// Where.
    pub path: KeyPath,
    /// What.
    pub message: String,
}

impl Problem {
    /// A problem at `path`.
    pub fn new(path: KeyPath, message: impl Into<String>) -> Self {
        Self {
            path,
            message: message.into(),
        }
    }
}
