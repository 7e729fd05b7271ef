//! Run parameters: `-p name=value` (values parsed as YAML), checked against the workflow's
//! `params` declarations before anything starts.

use crate::workflow::decode::value_has_type;
use crate::workflow::diagnostic::nearest;
use crate::workflow::model::Workflow;
use crate::workflow::yaml::{self, Node, Pos, Value};

/// A parameter problem (exit 2; nothing was created).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// Not `name=value`.
    #[error("`{0}` is not NAME=VALUE")]
    Malformed(String),
    /// The workflow declares no such parameter.
    #[error("the workflow has no parameter `{name}`")]
    Unknown {
        /// The name given.
        name: String,
        /// A near declared name.
        suggestion: Option<String>,
        /// The declared names.
        declared: Vec<String>,
    },
    /// A value is not valid YAML.
    #[error("the value of parameter `{name}` is not valid YAML: {message}")]
    BadValue {
        /// The parameter.
        name: String,
        /// The parser's message.
        message: String,
    },
    /// A value holds an integer that does not fit in 64 bits.
    #[error("parameter `{name}`: {message}")]
    OutOfRange {
        /// The parameter.
        name: String,
        /// The parser's message.
        message: String,
        /// The parser's hint.
        hint: String,
    },
    /// A value has the wrong type.
    #[error("parameter `{name}` must be of type {expected}, got {found}")]
    WrongType {
        /// The parameter.
        name: String,
        /// The declared type.
        expected: &'static str,
        /// What was given.
        found: &'static str,
    },
    /// A required parameter was not given.
    #[error("the required parameter `{name}` ({expected}) was not given")]
    Missing {
        /// The parameter.
        name: String,
        /// Its type.
        expected: &'static str,
    },
    /// Given twice.
    #[error("parameter `{0}` is given twice")]
    Duplicate(String),
}

impl ParamError {
    /// What to do about it.
    pub fn hint(&self) -> String {
        match self {
            ParamError::Malformed(_) => "write parameters as `-p name=value`".to_owned(),
            ParamError::Unknown {
                suggestion: Some(near),
                ..
            } => format!("did you mean `{near}`?"),
            ParamError::Unknown { declared, .. } if declared.is_empty() => {
                "this workflow takes no parameters".to_owned()
            }
            ParamError::Unknown { declared, .. } => {
                format!("declared parameters: {}", declared.join(", "))
            }
            ParamError::BadValue { .. } => {
                "quote YAML values inside the shell's quotes: -p \"name=[1, 2]\"".to_owned()
            }
            ParamError::OutOfRange { hint, .. } => hint.clone(),
            ParamError::WrongType { name, expected, .. } => {
                format!("give `-p {name}=<{expected}>` (values are parsed as YAML)")
            }
            ParamError::Missing { name, expected } => format!("add `-p {name}=<{expected}>`"),
            ParamError::Duplicate(_) => "give each parameter once".to_owned(),
        }
    }
}

/// Resolves `-p` arguments against the declarations: every name declared, every type right,
/// every required parameter given, defaults filled in.
pub fn resolve_params(
    workflow: &Workflow,
    given: &[String],
) -> Result<serde_json::Map<String, serde_json::Value>, ParamError> {
    let declared: Vec<String> = workflow
        .params
        .iter()
        .map(|param| param.name.value.clone())
        .collect();
    let mut values = serde_json::Map::new();
    for pair in given {
        let (name, text) = pair
            .split_once('=')
            .ok_or_else(|| ParamError::Malformed(pair.clone()))?;
        let Some(param) = workflow
            .params
            .iter()
            .find(|param| param.name.value == name)
        else {
            let suggestion = nearest(name, declared.iter().map(String::as_str)).map(str::to_owned);
            return Err(ParamError::Unknown {
                name: name.to_owned(),
                suggestion,
                declared,
            });
        };
        // A text parameter takes the text as given when YAML reads it as something else (a
        // bug report `panic: index out of bounds`, `123`, `[flaky] test`, `# note`); a quoted
        // YAML string still loses its quotes.
        let value = match parse_value(name, text) {
            Ok(node) if value_has_type(&node, param.param_type.value) => node.to_json(),
            _ if param.param_type.value == crate::workflow::model::ParamType::String => {
                serde_json::Value::String(text.to_owned())
            }
            Ok(node) => {
                return Err(ParamError::WrongType {
                    name: name.to_owned(),
                    expected: param.param_type.value.name(),
                    found: node.value.kind_name(),
                });
            }
            Err(error) => return Err(error),
        };
        if values.insert(name.to_owned(), value).is_some() {
            return Err(ParamError::Duplicate(name.to_owned()));
        }
    }
    for param in &workflow.params {
        let name = &param.name.value;
        if values.contains_key(name) {
            continue;
        }
        match &param.default {
            Some(default) => {
                values.insert(name.clone(), default.to_json());
            }
            None if param.required => {
                return Err(ParamError::Missing {
                    name: name.clone(),
                    expected: param.param_type.value.name(),
                });
            }
            None => {}
        }
    }
    Ok(values)
}

/// A value parsed as YAML; an empty value is the empty string.
fn parse_value(name: &str, text: &str) -> Result<Node, ParamError> {
    if text.trim().is_empty() {
        return Ok(Node {
            pos: Pos::new(1, 1),
            value: Value::Str(String::new()),
        });
    }
    yaml::parse(text.as_bytes()).map_err(|error| match error.code {
        // Valid YAML, but an integer too large for 64 bits.
        "invalid-value" => ParamError::OutOfRange {
            name: name.to_owned(),
            message: error.message,
            hint: error.hint.unwrap_or_default(),
        },
        _ => ParamError::BadValue {
            name: name.to_owned(),
            message: error.message,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::diagnostic::Diagnostics;
    use crate::workflow::load::check_bytes;
    use crate::workflow::validate::KnownNames;

    fn workflow() -> Workflow {
        let text = "workflow_id: p\nversion: 1\ndescription: d\nentry_step: a\nparams:\n  adr: {type: string, required: true}\n  count: {type: int, default: 2}\n  paths: {type: list}\nsteps:\n  - id: a\n    opcode: STOP\n";
        check_bytes(
            text.as_bytes(),
            &KnownNames::default(),
            &mut Diagnostics::new("p.yaml"),
        )
        .unwrap()
    }

    fn resolve(given: &[&str]) -> Result<serde_json::Value, ParamError> {
        let given: Vec<String> = given.iter().map(|pair| (*pair).to_owned()).collect();
        resolve_params(&workflow(), &given).map(serde_json::Value::Object)
    }

    #[test]
    fn values_are_typed_and_defaults_filled() {
        assert_eq!(
            resolve(&["adr=ADR-7", "paths=[src, tests]"]).unwrap(),
            serde_json::json!({"adr": "ADR-7", "count": 2, "paths": ["src", "tests"]})
        );
        assert_eq!(resolve(&["adr=ADR-7", "count=5"]).unwrap()["count"], 5);
    }

    #[test]
    fn bad_parameters_are_refused_with_a_hint() {
        assert!(matches!(resolve(&[]), Err(ParamError::Missing { .. })));
        assert!(matches!(
            resolve(&["adr=x", "count=many"]),
            Err(ParamError::WrongType {
                expected: "int",
                ..
            })
        ));
        let unknown = resolve(&["adr=x", "cuont=3"]).unwrap_err();
        assert_eq!(unknown.hint(), "did you mean `count`?");
        assert!(matches!(resolve(&["adr"]), Err(ParamError::Malformed(_))));
        assert!(matches!(
            resolve(&["adr=x", "adr=y"]),
            Err(ParamError::Duplicate(_))
        ));
        assert!(matches!(
            resolve(&["adr=x", "paths=[unclosed"]),
            Err(ParamError::BadValue { .. })
        ));
    }

    /// Review 2 (second review), defect 13: `-p count=99999999999999999999` was "must be of
    /// type int, got a string"; the value is a number, out of range. A text parameter still
    /// takes the digits as given.
    #[test]
    fn an_integer_too_large_for_64_bits_is_out_of_range_not_a_string() {
        let error = resolve(&["adr=x", "count=99999999999999999999"]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "parameter `count`: the integer `99999999999999999999` is out of range (it does not fit in 64 bits)"
        );
        assert!(
            error.hint().contains("9223372036854775807"),
            "{}",
            error.hint()
        );
        assert_eq!(
            resolve(&["adr=99999999999999999999"]).unwrap()["adr"],
            "99999999999999999999"
        );
    }

    #[test]
    fn a_text_parameter_takes_the_text_as_given() {
        for (given, text) in [
            (
                "adr=panic: index out of bounds",
                "panic: index out of bounds",
            ),
            ("adr=123", "123"),
            ("adr=[flaky] test", "[flaky] test"),
            ("adr=# note", "# note"),
            ("adr=true", "true"),
            ("adr='quoted: yes'", "quoted: yes"),
        ] {
            assert_eq!(resolve(&[given]).unwrap()["adr"], text, "{given}");
        }
    }
}
