//! [`named_model`]: which model a request body names, read before the body is parsed for its
//! route (by the router of several models and by the fleet's gateway).

use serde::Deserialize;

/// What a request body names.
#[derive(Debug, PartialEq, Eq)]
pub enum Named {
    /// A JSON object whose `model` is this string.
    Model(String),
    /// A JSON object without a `model` string.
    Nothing,
    /// Not a JSON object: the route's own parsing refuses it with the precise error.
    NotJson,
}

/// The model `body` names, if it is a JSON object with a `model` string.
pub fn named_model(body: &[u8]) -> Named {
    #[derive(Deserialize)]
    struct Fields {
        model: Option<serde_json::Value>,
    }
    match serde_json::from_slice::<Fields>(body) {
        Ok(Fields {
            model: Some(serde_json::Value::String(name)),
        }) => Named::Model(name),
        Ok(_) => Named::Nothing,
        Err(_) => Named::NotJson,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_read_from_a_json_object_only() {
        let a = Named::Model("a".into());
        assert_eq!(named_model(br#"{"model":"a","prompt":"x"}"#), a);
        assert_eq!(named_model(br#"{"prompt":"x"}"#), Named::Nothing);
        assert_eq!(named_model(br#"{"model":null}"#), Named::Nothing);
        assert_eq!(named_model(br#"{"model":7}"#), Named::Nothing);
        assert_eq!(named_model(br#""a""#), Named::NotJson);
        assert_eq!(named_model(b"not json"), Named::NotJson);
        assert_eq!(named_model(&[0xff, 0xfe]), Named::NotJson);
    }
}
