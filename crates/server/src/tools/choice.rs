//! [`ToolChoice`] and [`FunctionSpec`]: the request's `tool_choice` and `tools`, checked.

use serde_json::Value;

/// One function the client offers (`tools[i].function`).
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionSpec {
    pub name: String,
    /// The arguments' JSON schema (`{"type": "object"}` when the tool gives none).
    pub parameters: Value,
}

/// What the model may or must do with the tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// Never call a tool (the template still sees the tools, as in vLLM).
    None,
    /// The model decides; calls are parsed from its text.
    Auto,
    /// At least one call, forced by a JSON schema.
    Required,
    /// A call of this function, forced by its parameters' schema.
    Named(String),
}

/// A `tools` or `tool_choice` value that cannot be used (the message names the problem).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolRequestError(pub String);

/// The functions of a `tools` list: every item must be `{"type": "function", "function":
/// {"name": .., "parameters"?: {..}}}` with a unique, non-empty name.
pub fn function_specs(tools: &[Value]) -> Result<Vec<FunctionSpec>, ToolRequestError> {
    let bad = |i: usize, what: &str| ToolRequestError(format!("tools[{i}]: {what}"));
    let mut specs: Vec<FunctionSpec> = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            return Err(bad(i, "only tools of type \"function\" are supported"));
        }
        let function = tool
            .get("function")
            .filter(|f| f.is_object())
            .ok_or_else(|| bad(i, "missing the \"function\" object"))?;
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad(i, "the function needs a non-empty \"name\""))?;
        if specs.iter().any(|s| s.name == name) {
            return Err(bad(i, &format!("function {name:?} is defined twice")));
        }
        let parameters = match function.get("parameters") {
            None | Some(Value::Null) => serde_json::json!({"type": "object"}),
            Some(p) if p.is_object() => p.clone(),
            Some(_) => return Err(bad(i, "\"parameters\" must be a JSON schema object")),
        };
        specs.push(FunctionSpec {
            name: name.to_string(),
            parameters,
        });
    }
    Ok(specs)
}

impl ToolChoice {
    /// `tool_choice` as sent (absent: `auto` when there are tools, else `none`), checked
    /// against the offered functions.
    pub fn from_request(
        value: Option<&Value>,
        functions: &[FunctionSpec],
    ) -> Result<Self, ToolRequestError> {
        let choice = match value {
            None | Some(Value::Null) if functions.is_empty() => ToolChoice::None,
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "none" => ToolChoice::None,
                "auto" => ToolChoice::Auto,
                "required" => ToolChoice::Required,
                other => {
                    return Err(ToolRequestError(format!(
                        "tool_choice {other:?} is not one of \"none\", \"auto\", \"required\" \
                         or a function object"
                    )))
                }
            },
            Some(obj) => ToolChoice::Named(named_function(obj)?),
        };
        let needs_tools = matches!(choice, ToolChoice::Required | ToolChoice::Named(_));
        if needs_tools && functions.is_empty() {
            return Err(ToolRequestError(
                "tool_choice requires a tool call but no tools were given".into(),
            ));
        }
        if let ToolChoice::Named(name) = &choice {
            if !functions.iter().any(|f| &f.name == name) {
                return Err(ToolRequestError(format!(
                    "tool_choice names function {name:?}, which is not in tools"
                )));
            }
        }
        Ok(choice)
    }
}

/// `{"type": "function", "function": {"name": ..}}`.
fn named_function(value: &Value) -> Result<String, ToolRequestError> {
    value
        .get("function")
        .and_then(|f| f.get("name"))
        .and_then(Value::as_str)
        .filter(|_| value.get("type").and_then(Value::as_str) == Some("function"))
        .map(str::to_string)
        .ok_or_else(|| {
            ToolRequestError(
                "tool_choice object must be {\"type\": \"function\", \"function\": {\"name\": ..}}"
                    .into(),
            )
        })
}
