//! `--set KEY=VALUE`: change one manifest value from the command line without editing the file
//! (Hydra's and Lightning's overrides). The path is the manifest's own key path —
//! `run.epochs`, `network.ops[1].inputs` — where an array of tables may also be entered by the
//! `name` of an entry (`models.lenet.optimizer.lr`), which reads better than an index and
//! survives reordering. The value is TOML (`5`, `0.01`, `"x"`, `["a", "b"]`,
//! `{ type = "sgd", lr = 0.1 }`); a bare word that is not TOML (`cpu`) is taken as a string.
//!
//! Overrides apply to the parsed document before validation, so every check treats them like
//! lines of the file; an error about an overridden value names the `--set` it came from.

use toml::{Table, Value};

use super::location::{KeyPath, Seg};

/// One `--set` as given.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    /// The argument, for messages.
    pub spec: String,
    /// The key path as written (names not yet resolved to indices).
    path: Vec<Seg>,
    value: Value,
}

impl Override {
    /// Parses `KEY=VALUE`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let fail = |why: &str| format!("--set {spec}: {why}");
        let (key, text) = spec
            .split_once('=')
            .ok_or_else(|| fail("expected KEY=VALUE, e.g. run.epochs=5"))?;
        let path = parse_path(key.trim()).map_err(|why| fail(&why))?;
        let value = parse_value(text.trim()).map_err(|why| fail(&why))?;
        Ok(Self {
            spec: spec.to_owned(),
            path,
            value,
        })
    }

    /// Sets the value in `document`, creating missing tables on the way, and returns the path
    /// it landed at with entry names resolved to indices (what validation problems carry) — or,
    /// when it created tables, the first of them: everything under it is the override's, and
    /// an unknown key there (`--set nope.key=1`) is reported at that table.
    pub fn apply(&self, document: &mut Table) -> Result<KeyPath, String> {
        let fail = |why: String| format!("--set {}: {why}", self.spec);
        let mut resolved = KeyPath::default();
        let (last, parents) = self
            .path
            .split_last()
            .ok_or_else(|| fail("the key is empty".into()))?;
        let mut place = Place::Table(document);
        let mut created_at = None;
        for seg in parents {
            if created_at.is_none() && place.lacks(seg) {
                created_at = Some(resolved.0.len() + 1);
            }
            let next = place.descend(seg, &resolved).map_err(fail)?;
            resolved.0.push(next.1);
            place = next.0;
        }
        let seg = place
            .assign(last, self.value.clone(), &resolved)
            .map_err(fail)?;
        resolved.0.push(seg);
        if let Some(depth) = created_at {
            resolved.0.truncate(depth);
        }
        Ok(resolved)
    }
}

/// Where the walk stands: inside a table or an array.
enum Place<'a> {
    Table(&'a mut Table),
    Array(&'a mut Vec<Value>),
}

impl<'a> Place<'a> {
    /// `true` when `seg` is a key this table does not have (descending creates it).
    fn lacks(&self, seg: &Seg) -> bool {
        matches!((self, seg), (Place::Table(table), Seg::Key(key)) if !table.contains_key(key))
    }

    fn descend(self, seg: &Seg, at: &KeyPath) -> Result<(Place<'a>, Seg), String> {
        match (self, seg) {
            (Place::Table(table), Seg::Key(key)) => {
                let value = table
                    .entry(key.clone())
                    .or_insert_with(|| Value::Table(Table::new()));
                let place = match value {
                    Value::Table(inner) => Place::Table(inner),
                    Value::Array(items) => Place::Array(items),
                    other => {
                        return Err(format!(
                            "`{}` holds a value of type {}, not a table",
                            child(at, seg),
                            other.type_str()
                        ))
                    }
                };
                Ok((place, seg.clone()))
            }
            (Place::Array(items), seg) => {
                let index = entry_index(items, seg, at)?;
                match &mut items[index] {
                    Value::Table(inner) => Ok((Place::Table(inner), Seg::Index(index))),
                    Value::Array(inner) => Ok((Place::Array(inner), Seg::Index(index))),
                    other => Err(format!(
                        "`{at}[{index}]` holds a value of type {}, not a table",
                        other.type_str()
                    )),
                }
            }
            (Place::Table(_), Seg::Index(index)) => Err(format!(
                "`{at}` is a table, not an array: `[{index}]` does not apply"
            )),
        }
    }

    fn assign(self, seg: &Seg, value: Value, at: &KeyPath) -> Result<Seg, String> {
        match (self, seg) {
            (Place::Table(table), Seg::Key(key)) => {
                table.insert(key.clone(), value);
                Ok(seg.clone())
            }
            (Place::Array(items), seg) => {
                let index = entry_index(items, seg, at)?;
                items[index] = value;
                Ok(Seg::Index(index))
            }
            (Place::Table(_), Seg::Index(index)) => Err(format!(
                "`{at}` is a table, not an array: `[{index}]` does not apply"
            )),
        }
    }
}

/// The array entry `seg` names: an index, or the table whose `name` is the key.
fn entry_index(items: &[Value], seg: &Seg, at: &KeyPath) -> Result<usize, String> {
    match seg {
        Seg::Index(index) if *index < items.len() => Ok(*index),
        Seg::Index(index) => Err(format!(
            "`{at}` has {} entries; there is no [{index}]",
            items.len()
        )),
        Seg::Key(name) => {
            let names: Vec<&str> = items
                .iter()
                .filter_map(|item| item.get("name").and_then(Value::as_str))
                .collect();
            items
                .iter()
                .position(|item| item.get("name").and_then(Value::as_str) == Some(name))
                .ok_or_else(|| {
                    if names.is_empty() {
                        format!("`{at}` is an array without named entries: use an index, `{at}[0]`")
                    } else {
                        format!(
                            "`{at}` has no entry named `{name}` (names: {})",
                            names.join(", ")
                        )
                    }
                })
        }
    }
}

fn child(at: &KeyPath, seg: &Seg) -> KeyPath {
    let mut path = at.clone();
    path.0.push(seg.clone());
    path
}

/// `a.b[2].c` into segments; keys are bare TOML keys or "quoted" ones.
fn parse_path(key: &str) -> Result<Vec<Seg>, String> {
    if key.is_empty() {
        return Err("the key is empty; expected KEY=VALUE, e.g. run.epochs=5".into());
    }
    let mut segs = Vec::new();
    let mut rest = key;
    let mut expect_key = true;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            let (index, tail) = after
                .split_once(']')
                .ok_or_else(|| format!("unclosed `[` in `{key}`"))?;
            let index = index
                .trim()
                .parse()
                .map_err(|_| format!("`[{index}]` in `{key}` is not an index"))?;
            segs.push(Seg::Index(index));
            rest = tail;
            expect_key = false;
        } else if let Some(tail) = rest.strip_prefix('.') {
            if expect_key {
                return Err(format!("empty key segment in `{key}`"));
            }
            rest = tail;
            expect_key = true;
        } else if let Some(after) = rest.strip_prefix('"') {
            let (name, tail) = after
                .split_once('"')
                .ok_or_else(|| format!("unclosed quote in `{key}`"))?;
            segs.push(Seg::Key(name.to_owned()));
            rest = tail;
            expect_key = false;
        } else {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            let name = &rest[..end];
            if !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(format!(
                    "`{name}` in `{key}` is not a bare key; quote it: \"{name}\""
                ));
            }
            segs.push(Seg::Key(name.to_owned()));
            rest = &rest[end..];
            expect_key = false;
        }
    }
    if expect_key {
        return Err(format!("`{key}` ends with `.`"));
    }
    Ok(segs)
}

fn parse_value(text: &str) -> Result<Value, String> {
    let document = format!("value = {text}");
    match document.parse::<Table>() {
        Ok(mut table) => table
            .remove("value")
            .ok_or_else(|| "the value is empty".to_owned()),
        // What a shell leaves of `device=cpu`: a plain word is meant as a string.
        Err(_) if is_plain_word(text) => Ok(Value::String(text.to_owned())),
        Err(e) => Err(format!(
            "the value `{text}` is not TOML ({}); quote strings with spaces or symbols: '\"{text}\"'",
            e.message().trim_end()
        )),
    }
}

fn is_plain_word(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.:/+@".contains(c))
}

/// The override whose path `path` lies under, if any: validation problems there are reported
/// against the command line instead of the file.
pub fn covering<'a>(overrides: &'a [(Override, KeyPath)], path: &KeyPath) -> Option<&'a Override> {
    overrides
        .iter()
        .rev()
        .find(|(_, at)| path.0.starts_with(&at.0))
        .map(|(o, _)| o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document() -> Table {
        "[run]\nepochs = 2\n[[models]]\nname = \"lenet\"\noptimizer = { type = \"adam\", lr = 0.001 }\n[[network.ops]]\nop = \"ModelOp\"\n"
            .parse()
            .unwrap()
    }

    fn set(document: &mut Table, spec: &str) -> Result<String, String> {
        Override::parse(spec)?
            .apply(document)
            .map(|p| p.to_string())
    }

    #[test]
    fn values_are_toml_and_plain_words_are_strings() {
        let mut doc = document();
        assert_eq!(set(&mut doc, "run.epochs=5").unwrap(), "run.epochs");
        assert_eq!(doc["run"]["epochs"], Value::Integer(5));
        set(&mut doc, "run.device=cpu").unwrap();
        assert_eq!(doc["run"]["device"], Value::String("cpu".into()));
        set(&mut doc, "run.eval_log_steps=[1, 2]").unwrap();
        assert_eq!(doc["run"]["eval_log_steps"].as_array().unwrap().len(), 2);
        set(&mut doc, "run.log_dir=\"my runs\"").unwrap();
        assert_eq!(doc["run"]["log_dir"], Value::String("my runs".into()));
    }

    #[test]
    fn array_entries_by_name_or_index() {
        let mut doc = document();
        let at = set(&mut doc, "models.lenet.optimizer.lr=0.01").unwrap();
        assert_eq!(at, "models[0].optimizer.lr");
        assert_eq!(doc["models"][0]["optimizer"]["lr"], Value::Float(0.01));
        let at = set(&mut doc, "network.ops[0].mode=\"train\"").unwrap();
        assert_eq!(at, "network.ops[0].mode");
        assert_eq!(
            doc["network"]["ops"][0]["mode"],
            Value::String("train".into())
        );
    }

    #[test]
    fn missing_tables_are_created() {
        let mut doc = document();
        let at = set(&mut doc, "checkpoint.every_epochs=1").unwrap();
        assert_eq!(doc["checkpoint"]["every_epochs"], Value::Integer(1));
        // The table it created is the override's: a problem anywhere in it (an unknown
        // top-level key, say) names the --set, not the file.
        assert_eq!(at, "checkpoint");
        assert_eq!(set(&mut doc, "nope.deeper.key=1").unwrap(), "nope");
        assert_eq!(set(&mut doc, "run.nope.key=1").unwrap(), "run.nope");
    }

    #[test]
    fn mistakes_name_the_override() {
        let mut doc = document();
        let err = set(&mut doc, "models.resnet.optimizer.lr=0.1").unwrap_err();
        assert_eq!(
            err,
            "--set models.resnet.optimizer.lr=0.1: `models` has no entry named `resnet` (names: lenet)"
        );
        let err = set(&mut doc, "network.ops[3].op=\"X\"").unwrap_err();
        assert!(err.contains("has 1 entries; there is no [3]"), "{err}");
        let err = set(&mut doc, "run.epochs.x=1").unwrap_err();
        assert!(
            err.contains("`run.epochs` holds a value of type integer, not a table"),
            "{err}"
        );
        assert!(Override::parse("run.epochs")
            .unwrap_err()
            .contains("expected KEY=VALUE"));
        assert!(Override::parse("run..epochs=1")
            .unwrap_err()
            .contains("empty key segment"));
        let err = Override::parse("run.lr=[1,").unwrap_err();
        assert!(
            err.starts_with("--set run.lr=[1,: the value `[1,` is not TOML"),
            "{err}"
        );
    }

    #[test]
    fn problems_under_an_override_are_its_own() {
        let mut doc = document();
        let o = Override::parse("models.lenet.optimizer={ type = \"sgd\" }").unwrap();
        let at = o.apply(&mut doc).unwrap();
        let all = vec![(o, at)];
        let inside = KeyPath::root("models").index(0).key("optimizer").key("lr");
        assert!(covering(&all, &inside).is_some());
        assert!(covering(&all, &KeyPath::root("run").key("epochs")).is_none());
    }
}
