//! Limits that keep one request from slowing, stalling or crashing the server for others.

use serde_json::json;

use crate::common::{self, main_server};

#[tokio::test]
async fn a_stop_string_over_the_byte_cap_is_refused_naming_stop() {
    let long = "x".repeat(kestrel_server::state::MAX_STOP_BYTES + 1);
    let (status, body) = common::post(
        main_server(),
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 1, "stop": [long]}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "stop", "{body}");
    let at_cap = "y".repeat(kestrel_server::state::MAX_STOP_BYTES);
    let (status, body) = common::post(
        main_server(),
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2, "stop": [at_cap]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}
