//! Run parameters: `-p name=value` (values parsed as YAML), checked against the workflow's
//! `params` declarations before anything starts.

use crate::document::diagnostic::nearest;
use crate::document::yaml::{self, Node, Pos, Value};
use crate::workflow::decode_params::value_has_type;
use crate::workflow::model::{ParamType, Workflow};

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
    /// The run was started without a parameter the edited workflow requires (and gives no
    /// default).
    #[error(
        "the edited workflow requires parameter `{name}` ({expected}), which the run was not started with"
    )]
    RecordedMissing {
        /// The parameter.
        name: String,
        /// Its type.
        expected: &'static str,
    },
    /// A parameter the run was started with no longer has the type the edited workflow
    /// declares.
    #[error(
        "the run's parameter `{name}` is {found} ({value}), but the edited workflow declares it as {expected}"
    )]
    RecordedWrongType {
        /// The parameter.
        name: String,
        /// The declared type.
        expected: &'static str,
        /// What the run holds.
        found: &'static str,
        /// The value, as JSON.
        value: String,
        /// The declared type that would take the value.
        fits: &'static str,
    },
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
            ParamError::RecordedMissing { name, expected } => format!(
                "nothing was changed; a run keeps the parameters it started with, so give `{name}` \
                 a `default:` in the workflow (or declare it not required), then resume again, \
                 or start a new run with `-p {name}=<{expected}>`"
            ),
            ParamError::RecordedWrongType { name, fits, .. } => format!(
                "nothing was changed; a run keeps the parameters it started with, so declare \
                 `{name}` as `type: {fits}` again, then resume again, or start a new run with \
                 the new type"
            ),
        }
    }
}

/// Resolves `-p` arguments against the declarations: every name declared, every type right,
/// every required parameter given, defaults filled in.
pub fn resolve_params(
    workflow: &Workflow,
    given: &[String],
) -> Result<serde_json::Map<String, serde_json::Value>, ParamError> {
    check_params(workflow, given).map_err(|mut errors| errors.remove(0))
}

/// [`resolve_params`], reporting every problem rather than the first (never an empty list).
pub fn check_params(
    workflow: &Workflow,
    given: &[String],
) -> Result<serde_json::Map<String, serde_json::Value>, Vec<ParamError>> {
    let (values, errors) = collect_params(workflow, given);
    if errors.is_empty() {
        Ok(values)
    } else {
        Err(errors)
    }
}

/// The parameters that resolve (given or defaulted) and the problems of the others.
pub fn collect_params(
    workflow: &Workflow,
    given: &[String],
) -> (serde_json::Map<String, serde_json::Value>, Vec<ParamError>) {
    let mut values = serde_json::Map::new();
    let mut errors = Vec::new();
    for pair in given {
        match given_value(workflow, pair) {
            Ok((name, value)) => {
                if values.insert(name.clone(), value).is_some() {
                    errors.push(ParamError::Duplicate(name));
                }
            }
            Err(error) => errors.push(error),
        }
    }
    for param in &workflow.params {
        let name = &param.name.value;
        let named = given
            .iter()
            .any(|pair| pair.split_once('=').is_some_and(|(given, _)| given == name));
        if values.contains_key(name) || named {
            continue;
        }
        match &param.default {
            Some(default) => {
                values.insert(name.clone(), default.to_json());
            }
            None if param.required => errors.push(ParamError::Missing {
                name: name.clone(),
                expected: param.param_type.value.name(),
            }),
            None => {}
        }
    }
    (values, errors)
}

/// One `-p name=value` argument checked against its declaration: the name and its value.
fn given_value(workflow: &Workflow, pair: &str) -> Result<(String, serde_json::Value), ParamError> {
    let (name, text) = pair
        .split_once('=')
        .ok_or_else(|| ParamError::Malformed(pair.to_owned()))?;
    let Some(param) = workflow
        .params
        .iter()
        .find(|param| param.name.value == name)
    else {
        let declared: Vec<String> = workflow
            .params
            .iter()
            .map(|param| param.name.value.clone())
            .collect();
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
    Ok((name.to_owned(), value))
}

/// A run's recorded parameters resolved against the workflow as it is now.
#[derive(Debug, Clone, PartialEq)]
pub struct Rechecked {
    /// The parameters the run continues with.
    pub values: serde_json::Map<String, serde_json::Value>,
    /// Parameters the workflow declares since, with their defaults filled in.
    pub added: serde_json::Map<String, serde_json::Value>,
    /// Recorded parameters the workflow no longer declares (dropped).
    pub removed: Vec<String>,
}

/// Resolves the parameters a run was started with (`metadata.json`) against the workflow as it
/// is now, as `run` resolves `-p` arguments: a recorded value must have the declared type, a
/// parameter declared since takes its default, and one declared since as required without a
/// default is an error. Used by `resume` and gate decisions before anything is written.
pub fn recheck_params(
    workflow: &Workflow,
    recorded: &serde_json::Map<String, serde_json::Value>,
) -> Result<Rechecked, ParamError> {
    let mut values = serde_json::Map::new();
    let mut added = serde_json::Map::new();
    for param in &workflow.params {
        let name = &param.name.value;
        let expected = param.param_type.value;
        match (recorded.get(name), &param.default) {
            (Some(value), _) if json_has_type(value, expected) => {
                values.insert(name.clone(), value.clone());
            }
            (Some(value), _) => {
                return Err(ParamError::RecordedWrongType {
                    name: name.clone(),
                    expected: expected.name(),
                    found: json_kind_name(value),
                    value: value.to_string(),
                    fits: ParamType::NAMES
                        .iter()
                        .filter_map(|name| ParamType::parse(name))
                        .find(|fits| json_has_type(value, *fits))
                        .map_or("string", ParamType::name),
                });
            }
            (None, Some(default)) => {
                values.insert(name.clone(), default.to_json());
                added.insert(name.clone(), default.to_json());
            }
            (None, None) if param.required => {
                return Err(ParamError::RecordedMissing {
                    name: name.clone(),
                    expected: expected.name(),
                });
            }
            (None, None) => {}
        }
    }
    let removed = recorded
        .keys()
        .filter(|name| !values.contains_key(*name))
        .cloned()
        .collect();
    Ok(Rechecked {
        values,
        added,
        removed,
    })
}

/// Whether a recorded (JSON) value has a declared parameter type.
fn json_has_type(value: &serde_json::Value, param_type: ParamType) -> bool {
    matches!(
        (value, param_type),
        (serde_json::Value::String(_), ParamType::String)
            | (serde_json::Value::Bool(_), ParamType::Bool)
            | (serde_json::Value::Array(_), ParamType::List)
            | (serde_json::Value::Object(_), ParamType::Map)
    ) || (param_type == ParamType::Int && value.is_i64())
}

/// What a recorded (JSON) value is, for messages.
fn json_kind_name(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(number) if number.is_i64() => "an integer",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a map",
    }
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
    use crate::document::diagnostic::Diagnostics;
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

    /// What `resume` does with the parameters a run recorded when the workflow
    /// was edited since.
    #[test]
    fn recorded_parameters_are_resolved_against_the_edited_declarations() {
        let recorded = |json: serde_json::Value| json.as_object().unwrap().clone();
        // A new optional parameter with a default is filled in; one no longer declared is
        // dropped; recorded values of the declared type are kept.
        let rechecked = recheck_params(
            &workflow(),
            &recorded(serde_json::json!({"adr": "ADR-7", "paths": ["src"], "gone": 1})),
        )
        .unwrap();
        assert_eq!(
            serde_json::Value::Object(rechecked.values),
            serde_json::json!({"adr": "ADR-7", "count": 2, "paths": ["src"]})
        );
        assert_eq!(
            serde_json::Value::Object(rechecked.added),
            serde_json::json!({"count": 2})
        );
        assert_eq!(rechecked.removed, ["gone"]);
        // A required parameter the run does not have, and a retyped one, are errors.
        assert_eq!(
            recheck_params(&workflow(), &recorded(serde_json::json!({"count": 3}))),
            Err(ParamError::RecordedMissing {
                name: "adr".to_owned(),
                expected: "string",
            })
        );
        let retyped = recheck_params(
            &workflow(),
            &recorded(serde_json::json!({"adr": "x", "count": "3"})),
        )
        .unwrap_err();
        assert_eq!(
            retyped.to_string(),
            "the run's parameter `count` is a string (\"3\"), but the edited workflow declares it as int"
        );
        assert!(
            retyped
                .hint()
                .contains("declare `count` as `type: string` again")
        );
    }

    /// `-p count=99999999999999999999` was "must be of
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
