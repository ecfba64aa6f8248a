//! The signature of a TorchScript module's `forward`, and whether a ModelOp's keys fit it.
//! Pure functions over the text the shim reports, so the rules are unit-tested without a file.

/// One argument of `forward` after `self`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Argument {
    /// Its name in the Python source.
    pub name: String,
    /// Its TorchScript type (`Tensor`, `Tensor?`, `int`, ...).
    pub kind: String,
    /// `true` when it has a default value, so it may be left out.
    pub optional: bool,
}

/// What `forward` returns, as far as keys are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Returns {
    /// One tensor: one output key.
    Tensor,
    /// A tuple of this many tensors (or `Optional[Tensor]`s): one key each, in order.
    Tuple(usize),
    /// A NamedTuple of tensors (or `Optional[Tensor]`s), by field name: one key each, in
    /// order, or the fields the model's `outputs` names.
    NamedTuple(Vec<String>),
    /// A list of tensors, whose length is known only when it runs.
    List,
    /// A `Dict[str, Tensor]`: entries are taken by the names the model's `outputs` gives.
    Dict,
    /// Anything else (the type), which cannot become keys.
    Other(String),
}

/// The signature of `forward`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// Arguments after `self`.
    pub arguments: Vec<Argument>,
    /// What it returns.
    pub returns: Returns,
}

impl Signature {
    /// Parses the shim's text: `name<TAB>type<TAB>0|1` per argument, then `-><TAB>type`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut arguments = Vec::new();
        let mut returns = None;
        for line in text.lines().filter(|l| !l.is_empty()) {
            let fields: Vec<&str> = line.split('\t').collect();
            match fields.as_slice() {
                ["->", kind] => returns = Some(Returns::of(kind)),
                [name, kind, default] => arguments.push(Argument {
                    name: (*name).to_owned(),
                    kind: (*kind).to_owned(),
                    optional: *default == "1",
                }),
                _ => return Err(format!("cannot read the signature line `{line}`")),
            }
        }
        Ok(Self {
            arguments,
            returns: returns.unwrap_or(Returns::Other("nothing".to_owned())),
        })
    }

    /// `forward(x: Tensor, mask: Tensor?) -> Tensor`, for messages.
    pub fn describe(&self) -> String {
        let args: Vec<String> = self
            .arguments
            .iter()
            .map(|a| {
                let default = if a.optional { " = ..." } else { "" };
                format!("{}: {}{default}", a.name, a.kind)
            })
            .collect();
        let returns = match &self.returns {
            Returns::Tensor => "Tensor".to_owned(),
            Returns::Tuple(n) => format!("tuple of {n} tensors"),
            Returns::NamedTuple(fields) => format!("NamedTuple({})", fields.join(", ")),
            Returns::List => "List[Tensor]".to_owned(),
            Returns::Dict => "Dict[str, Tensor]".to_owned(),
            Returns::Other(kind) => kind.clone(),
        };
        format!("forward({}) -> {returns}", args.join(", "))
    }

    /// Why `inputs` keys cannot be passed to `forward` (positionally), if they cannot.
    pub fn check_inputs(&self, inputs: usize) -> Result<(), String> {
        let required = self.arguments.iter().filter(|a| !a.optional).count();
        if inputs < required || inputs > self.arguments.len() {
            let wants = if required == self.arguments.len() {
                format!("{required}")
            } else {
                format!("{required} to {}", self.arguments.len())
            };
            return Err(format!(
                "{inputs} input key(s) given, but {} takes {wants}",
                self.describe()
            ));
        }
        if let Some(bad) = self.arguments[..inputs]
            .iter()
            .find(|a| !matches!(a.kind.as_str(), "Tensor" | "Tensor?"))
        {
            return Err(format!(
                "argument `{}` of {} is `{}`, not a tensor, so no key can feed it",
                bad.name,
                self.describe(),
                bad.kind
            ));
        }
        Ok(())
    }

    /// Why `outputs` keys cannot take what `forward` returns, if they cannot. `named` are the
    /// dict entries or NamedTuple fields the model's `outputs` setting picks.
    pub fn check_outputs(&self, outputs: usize, named: Option<&[String]>) -> Result<(), String> {
        let gives = match (&self.returns, named) {
            (Returns::Tensor, _) => 1,
            (Returns::Tuple(n), _) => *n,
            (Returns::List, _) => return Ok(()),
            (Returns::NamedTuple(fields), None) => fields.len(),
            (Returns::NamedTuple(fields), Some(names)) => {
                if let Some(unknown) = names.iter().find(|n| !fields.contains(n)) {
                    return Err(format!(
                        "`outputs` names field `{unknown}`, but {} has none such",
                        self.describe()
                    ));
                }
                names.len()
            }
            (Returns::Dict, Some(names)) => names.len(),
            (Returns::Dict, None) => {
                return Err(format!(
                    "{} returns a dict: name the entries to take, in key order, with `outputs = [...]` in the model's table",
                    self.describe()
                ))
            }
            (Returns::Other(kind), _) => {
                return Err(format!(
                    "{} returns `{kind}`; fe-host takes a tensor, a tuple or list of tensors, or a dict of tensors",
                    self.describe()
                ))
            }
        };
        if outputs > gives {
            return Err(format!(
                "{outputs} output key(s) given, but {} gives {gives}",
                self.describe()
            ));
        }
        Ok(())
    }
}

impl Returns {
    fn of(kind: &str) -> Self {
        let kind = kind.trim();
        if kind == "Tensor" {
            return Returns::Tensor;
        }
        if kind == "Tensor[]" || kind == "List[Tensor]" {
            return Returns::List;
        }
        if kind.starts_with("Dict(str, Tensor") || kind.starts_with("Dict[str, Tensor") {
            return Returns::Dict;
        }
        let tensor = |kind: &str| matches!(kind, "Tensor" | "Tensor?");
        if let Some(inner) = kind.strip_prefix('(').and_then(|k| k.strip_suffix(')')) {
            let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
            if parts.iter().all(|p| tensor(p)) {
                return Returns::Tuple(parts.len());
            }
        }
        // The shim's `NamedTuple(name: Type, ...)`.
        if let Some(inner) = kind
            .strip_prefix("NamedTuple(")
            .and_then(|k| k.strip_suffix(')'))
        {
            let fields: Option<Vec<String>> = inner
                .split(',')
                .map(|field| {
                    let (name, kind) = field.split_once(':')?;
                    tensor(kind.trim()).then(|| name.trim().to_owned())
                })
                .collect();
            if let Some(fields) = fields.filter(|f| !f.is_empty()) {
                return Returns::NamedTuple(fields);
            }
        }
        Returns::Other(kind.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_inputs() -> Signature {
        Signature::parse("x\tTensor\t0\nmask\tTensor?\t1\n->\t(Tensor, Tensor)\n").unwrap()
    }

    #[test]
    fn parses_arguments_and_returns() {
        let sig = two_inputs();
        assert_eq!(sig.arguments.len(), 2);
        assert!(!sig.arguments[0].optional && sig.arguments[1].optional);
        assert_eq!(sig.returns, Returns::Tuple(2));
        assert_eq!(
            sig.describe(),
            "forward(x: Tensor, mask: Tensor? = ...) -> tuple of 2 tensors"
        );
        assert_eq!(Returns::of("Tensor"), Returns::Tensor);
        assert_eq!(Returns::of("Tensor[]"), Returns::List);
        assert_eq!(Returns::of("Dict(str, Tensor)"), Returns::Dict);
        assert_eq!(Returns::of("int"), Returns::Other("int".into()));
        assert_eq!(Returns::of("(Tensor, Tensor?)"), Returns::Tuple(2));
        assert_eq!(
            Returns::of("NamedTuple(logits: Tensor, aux: Tensor?)"),
            Returns::NamedTuple(vec!["logits".into(), "aux".into()])
        );
        assert_eq!(
            Returns::of("NamedTuple(logits: Tensor, n: int)"),
            Returns::Other("NamedTuple(logits: Tensor, n: int)".into())
        );
        assert!(Signature::parse("garbage").is_err());
    }

    #[test]
    fn inputs_between_required_and_all_fit() {
        let sig = two_inputs();
        assert!(sig.check_inputs(1).is_ok());
        assert!(sig.check_inputs(2).is_ok());
        let none = sig.check_inputs(0).unwrap_err();
        assert!(
            none.contains("0 input key(s) given") && none.contains("takes 1 to 2"),
            "{none}"
        );
        assert!(sig.check_inputs(3).is_err());
    }

    #[test]
    fn non_tensor_arguments_cannot_take_keys() {
        let sig = Signature::parse("x\tTensor\t0\nscale\tfloat\t0\n->\tTensor\n").unwrap();
        let err = sig.check_inputs(2).unwrap_err();
        assert!(err.contains("`scale`") && err.contains("`float`"), "{err}");
    }

    #[test]
    fn outputs_must_not_outnumber_what_forward_returns() {
        let sig = two_inputs();
        assert!(sig.check_outputs(2, None).is_ok());
        assert!(sig.check_outputs(1, None).is_ok());
        assert!(sig.check_outputs(3, None).unwrap_err().contains("gives 2"));
        let dict = Signature::parse("x\tTensor\t0\n->\tDict(str, Tensor)\n").unwrap();
        assert!(dict
            .check_outputs(1, None)
            .unwrap_err()
            .contains("outputs = ["));
        let names = ["a".to_owned()];
        assert!(dict.check_outputs(1, Some(&names)).is_ok());
        let named =
            Signature::parse("x\tTensor\t0\n->\tNamedTuple(logits: Tensor, aux: Tensor?)\n")
                .unwrap();
        assert!(named.check_outputs(2, None).is_ok());
        assert!(named
            .check_outputs(3, None)
            .unwrap_err()
            .contains("gives 2"));
        let aux = ["aux".to_owned()];
        assert!(named.check_outputs(1, Some(&aux)).is_ok());
        let typo = ["logit".to_owned()];
        assert!(named
            .check_outputs(1, Some(&typo))
            .unwrap_err()
            .contains("names field `logit`"));
        let int = Signature::parse("x\tTensor\t0\n->\tint\n").unwrap();
        assert!(int.check_outputs(1, None).is_err());
    }
}
