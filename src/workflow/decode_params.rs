//! Decoding a workflow's `params`: each parameter's type, whether it is required, and a
//! default of that type.

use super::decode::Decoder;
use super::model::{Param, ParamType};
use super::schema as document;
use super::yaml::{Node, Value};
use crate::document::shape::keys;

impl Decoder<'_> {
    /// `params`: the parameters a run is started with, each name to its declaration.
    pub(super) fn params(&mut self, node: &Node) -> Vec<Param> {
        let Some(entries) = node.as_map() else {
            self.wrong_type(
                node,
                "params",
                "a mapping of parameter names to declarations",
            );
            return Vec::new();
        };
        entries
            .iter()
            .filter_map(|(name, declaration)| self.param(name, declaration))
            .collect()
    }

    fn param(&mut self, name_node: &Node, declaration: &Node) -> Option<Param> {
        let name = self.identifier(name_node, "a parameter name")?;
        let what = format!("parameter `{}`", name.value);
        let fields = self.mapping(declaration, &what, keys::<document::Param>())?;
        let param_type = self
            .required(&fields, "type", &what)
            .and_then(|value| self.choice::<ParamType>(value, "type"))?;
        let required = fields
            .get("required")
            .and_then(|value| self.boolean(value, "required"))
            .unwrap_or(false);
        let default = fields.get("default").cloned();
        if let Some(value) = &default {
            if required {
                self.diagnostics
                    .error(value.pos, "invalid-param", format!("{what} is required and also has a default"))
                    .hint("a default makes the parameter optional: remove `required: true` or the default");
            }
            if !value_has_type(value, param_type.value) {
                self.diagnostics
                    .error(
                        value.pos,
                        "invalid-param",
                        format!(
                            "the default of {what} is {}, not of type {}",
                            value.value.kind_name(),
                            param_type.value.name()
                        ),
                    )
                    .hint(format!(
                        "give a default of type {}",
                        param_type.value.name()
                    ));
            }
        }
        let description = fields
            .get("description")
            .and_then(|value| self.text(value, "description"));
        Some(Param {
            name,
            param_type,
            required,
            default,
            description,
        })
    }
}

/// Whether a YAML value has a parameter type.
pub fn value_has_type(node: &Node, param_type: ParamType) -> bool {
    matches!(
        (&node.value, param_type),
        (Value::Str(_), ParamType::String)
            | (Value::Int(_), ParamType::Int)
            | (Value::Bool(_), ParamType::Bool)
            | (Value::Seq(_), ParamType::List)
            | (Value::Map(_), ParamType::Map)
    )
}
