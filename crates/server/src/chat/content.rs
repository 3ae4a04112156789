//! A message's `content` as text, the one parser of content parts every API shares: a
//! string, null (no text), or a list of parts whose `type` is one of the API's text kinds
//! (OpenAI chat: `text`; Anthropic: `text` blocks; Responses: `input_text`, `output_text`).
//! Other parts (images, audio, files) are refused by name: Tessera reads text only.

use crate::error::ApiError;
use crate::json::type_name;
use serde_json::Value;

/// OpenAI chat's and Anthropic's text part type.
pub(crate) const TEXT: &[&str] = &["text"];

/// The Responses API's text part types.
pub(crate) const RESPONSES_TEXT: &[&str] = &["input_text", "output_text", "text"];

/// The text of `v` (field `field`), its parts of a type in `kinds` joined; a 400 naming the
/// part for anything else.
pub(crate) fn text(v: &Value, field: &str, kinds: &[&str]) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut s = String::new();
            for (j, part) in parts.iter().enumerate() {
                let kind = part.get("type").and_then(Value::as_str);
                match (kind, part.get("text").and_then(Value::as_str)) {
                    (Some(k), Some(t)) if kinds.contains(&k) => s.push_str(t),
                    (Some(k), _) if !kinds.contains(&k) => {
                        return Err(ApiError::field(
                            &format!("{field}[{j}]"),
                            format!("content parts of type '{k}' are not supported (text only)"),
                        ))
                    }
                    _ => {
                        return Err(ApiError::field(
                            &format!("{field}[{j}]"),
                            format!("expected {{\"type\": \"{}\", \"text\": ...}}", kinds[0]),
                        ))
                    }
                }
            }
            Ok(s)
        }
        other => Err(ApiError::field(
            field,
            format!("expected a string or an array of text parts, got {}", type_name(other)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parts_join_and_others_are_named() {
        let v = json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]);
        assert_eq!(text(&v, "content", TEXT).unwrap(), "ab");
        assert_eq!(text(&Value::Null, "content", TEXT).unwrap(), "");
        let img = json!([{"type": "text", "text": "a"}, {"type": "image_url"}]);
        let e = text(&img, "messages[0].content", TEXT).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].content[1]"));
        assert!(e.message.contains("image_url"), "{}", e.message);
        let out = json!([{"type": "output_text", "text": "x"}]);
        assert_eq!(text(&out, "input[0].content", RESPONSES_TEXT).unwrap(), "x");
        assert!(text(&out, "content", TEXT).is_err());
        assert!(text(&json!([{"type": "text"}]), "content", TEXT).is_err());
        assert!(text(&json!(3), "content", TEXT).is_err());
    }
}
