//! Tool turns of a conversation, as chat templates expect them.

use serde_json::Value;

use super::choice::ToolRequestError;

/// An assistant message's `tool_calls` (OpenAI shape, `arguments` a JSON string) with each
/// `arguments` parsed into an object, as transformers-style templates print it (vLLM does the
/// same before rendering).
pub fn template_tool_calls(calls: &[Value]) -> Result<Value, ToolRequestError> {
    let bad = |i: usize, what: &str| ToolRequestError(format!("tool_calls[{i}]: {what}"));
    let mut out = Vec::with_capacity(calls.len());
    for (i, call) in calls.iter().enumerate() {
        let mut call = call.clone();
        let function = call
            .get_mut("function")
            .filter(|f| f.is_object())
            .ok_or_else(|| bad(i, "missing the \"function\" object"))?;
        if !function.get("name").is_some_and(Value::is_string) {
            return Err(bad(i, "the function needs a \"name\""));
        }
        let args = match function.get("arguments") {
            None | Some(Value::Null) => Value::Object(Default::default()),
            Some(Value::String(s)) => serde_json::from_str(s)
                .map_err(|e| bad(i, &format!("arguments are not valid JSON: {e}")))?,
            Some(v) => v.clone(),
        };
        function["arguments"] = args;
        out.push(call);
    }
    Ok(Value::Array(out))
}
