//! A message's `content` as text, the one parser of content parts every API shares: a
//! string, null (no text), or a list of parts whose `type` is one of the API's text kinds
//! (OpenAI chat: `text`; Anthropic: `text` blocks; Responses: `input_text`, `output_text`).
//! Where images may come (`with_images`), OpenAI's `image_url` parts (Anthropic's `image`
//! blocks and the Responses API's `input_image` items are turned into them) leave a
//! `<__media__>` marker in the text and their bytes in a list; `data:` URLs only (a remote URL
//! is refused: the server fetches nothing). Other parts (audio, files) are refused by name.

use crate::error::ApiError;
use crate::json::type_name;
use base64::Engine as _;
use serde_json::Value;

/// OpenAI chat's and Anthropic's text part type.
pub(crate) const TEXT: &[&str] = &["text"];

/// The Responses API's text part types.
pub(crate) const RESPONSES_TEXT: &[&str] = &["input_text", "output_text", "text"];

/// Where an image stood in the prompt text (llama.cpp's `mtmd_default_marker`).
pub const MEDIA_MARKER: &str = "<__media__>";

/// An image a request sent: its bytes and the field it came in (for errors about it).
#[derive(Debug, Clone, PartialEq)]
pub struct ImagePart {
    /// The request field that held it (`messages[1].content[0]`).
    pub field: String,
    /// The file's bytes (PNG, JPEG, ...), not yet decoded.
    pub bytes: Vec<u8>,
}

/// The key under which a converted part (Anthropic, Responses) keeps its own field's name.
pub(crate) const FIELD_KEY: &str = "x-tessera-field";

/// An OpenAI `image_url` part standing for an image that came as `url` in field `field`
/// (the Anthropic and Responses readers' conversion).
pub(crate) fn image_url_part(url: String, field: &str) -> Value {
    serde_json::json!({"type": "image_url", "image_url": {"url": url}, FIELD_KEY: field})
}

/// The bytes of a `data:` URL (base64); a named error for anything else.
pub(crate) fn data_url_bytes(url: &str, field: &str) -> Result<Vec<u8>, ApiError> {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Err(ApiError::field(
            field,
            "remote image URLs are not fetched (the server reaches no other host): send the \
             image inline as a data: URL (data:image/png;base64,...)",
        ));
    }
    let Some(rest) = url.strip_prefix("data:") else {
        return Err(ApiError::field(field, "expected a data: URL (data:image/png;base64,...)"));
    };
    let Some((meta, data)) = rest.split_once(',') else {
        return Err(ApiError::field(field, "a data: URL needs a comma before its data"));
    };
    if !meta.ends_with(";base64") {
        return Err(ApiError::field(field, "the data: URL must be base64 (data:...;base64,...)"));
    }
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| ApiError::field(field, format!("the image's base64 does not decode: {e}")))
}

/// An image part's `detail` (OpenAI's resolution hint): absent or `auto` only, since the
/// projector decides the resolution; `low` and `high` are refused, not ignored.
fn check_detail(v: Option<&Value>, field: &str) -> Result<(), ApiError> {
    match v {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if s == "auto" => Ok(()),
        Some(other) => Err(ApiError::field(
            field,
            format!(
                "{other}: only \"auto\" (the model's projector decides the image's resolution)"
            ),
        )),
    }
}

/// The image of an OpenAI `image_url` part (`{"image_url": {"url": ...}}` or
/// `{"image_url": "..."}`), at `field`.
fn image_url(part: &Value, field: &str) -> Result<ImagePart, ApiError> {
    let field = part.get(FIELD_KEY).and_then(Value::as_str).unwrap_or(field).to_string();
    let url = match part.get("image_url") {
        Some(Value::String(u)) => u.as_str(),
        Some(Value::Object(o)) => {
            check_detail(o.get("detail"), &format!("{field}.image_url.detail"))?;
            match o.get("url") {
                Some(Value::String(u)) => u.as_str(),
                _ => return Err(ApiError::field(&format!("{field}.image_url.url"), "is required")),
            }
        }
        _ => return Err(ApiError::field(&format!("{field}.image_url"), "is required")),
    };
    Ok(ImagePart { bytes: data_url_bytes(url, &field)?, field })
}

/// The text of `v` with a [`MEDIA_MARKER`] where each `image_url` part stood, the images
/// appended to `images`; otherwise as [`text`].
pub(crate) fn with_images(
    v: &Value,
    field: &str,
    kinds: &[&str],
    images: &mut Vec<ImagePart>,
) -> Result<String, ApiError> {
    let Value::Array(parts) = v else { return text(v, field, kinds) };
    let mut s = String::new();
    for (j, part) in parts.iter().enumerate() {
        if part.get("type").and_then(Value::as_str) == Some("image_url") {
            images.push(image_url(part, &format!("{field}[{j}]"))?);
            s.push_str(MEDIA_MARKER);
        } else {
            s.push_str(part_text(part, &format!("{field}[{j}]"), kinds)?);
        }
    }
    Ok(s)
}

/// The text of one part (at `field`) whose type is one of `kinds`.
pub(crate) fn part_text<'v>(
    part: &'v Value,
    field: &str,
    kinds: &[&str],
) -> Result<&'v str, ApiError> {
    let kind = part.get("type").and_then(Value::as_str);
    match (kind, part.get("text").and_then(Value::as_str)) {
        (Some(k), Some(t)) if kinds.contains(&k) => Ok(t),
        (Some(k), _) if !kinds.contains(&k) => {
            let why = match k.contains("image") {
                true => "; images go in user messages to a server started with --mmproj",
                false => " only",
            };
            Err(ApiError::field(
                field,
                format!("content parts of type '{k}' are not supported here (text{why})"),
            ))
        }
        _ => Err(ApiError::field(
            field,
            format!("expected {{\"type\": \"{}\", \"text\": ...}}", kinds[0]),
        )),
    }
}

/// The text of `v` (field `field`), its parts of a type in `kinds` joined; a 400 naming the
/// part for anything else.
pub(crate) fn text(v: &Value, field: &str, kinds: &[&str]) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut s = String::new();
            for (j, part) in parts.iter().enumerate() {
                s.push_str(part_text(part, &format!("{field}[{j}]"), kinds)?);
            }
            Ok(s)
        }
        other => Err(ApiError::field(
            field,
            format!("expected a string or an array of text parts, got {}", type_name(other)),
        )),
    }
}

/// A message item's content for the chat body: its text, or, where a user message holds
/// `input_image` parts, OpenAI chat parts (text and `image_url`) the chat reader takes apart.
pub(crate) fn responses_message(v: &Value, field: &str, role: &str) -> Result<Value, ApiError> {
    let has_image = |parts: &Vec<Value>| {
        parts.iter().any(|p| p.get("type").and_then(Value::as_str) == Some("input_image"))
    };
    let parts = match v {
        Value::Array(parts) if role == "user" && has_image(parts) => parts,
        _ => return Ok(Value::String(text(v, field, RESPONSES_TEXT)?)),
    };
    let mut out = Vec::new();
    for (j, part) in parts.iter().enumerate() {
        let pf = format!("{field}[{j}]");
        if part.get("type").and_then(Value::as_str) == Some("input_image") {
            check_detail(part.get("detail"), &format!("{pf}.detail"))?;
            let url = match (part.get("image_url"), part.get("file_id")) {
                (Some(Value::String(u)), _) => u.clone(),
                (_, Some(v)) if !v.is_null() => {
                    return Err(ApiError::field(
                        &format!("{pf}.file_id"),
                        "files are not stored here: send the image as image_url (a data: URL)",
                    ))
                }
                _ => return Err(ApiError::field(&format!("{pf}.image_url"), "is required")),
            };
            out.push(image_url_part(url, &format!("{pf}.image_url")));
        } else {
            let text = part_text(part, &pf, RESPONSES_TEXT)?;
            out.push(serde_json::json!({"type": "text", "text": text}));
        }
    }
    Ok(Value::Array(out))
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

    #[test]
    fn image_parts_leave_markers_and_bytes() {
        let mut images = Vec::new();
        let v = json!([
            {"type": "text", "text": "see "},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAEC"}},
            {"type": "image_url", "image_url": "data:image/gif;base64,/w=="},
        ]);
        let t = with_images(&v, "messages[0].content", TEXT, &mut images).unwrap();
        assert_eq!(t, format!("see {MEDIA_MARKER}{MEDIA_MARKER}"));
        assert_eq!(images[0].bytes, vec![0, 1, 2]);
        assert_eq!(images[0].field, "messages[0].content[1]");
        assert_eq!(images[1].bytes, vec![255]);
        let bad = |url: &str| {
            let v = json!([{"type": "image_url", "image_url": {"url": url}}]);
            with_images(&v, "content", TEXT, &mut Vec::new()).unwrap_err().message
        };
        assert!(bad("https://example.com/cat.png").contains("remote image URLs"));
        assert!(bad("data:image/png,xyz").contains("base64"));
        assert!(bad("data:image/png;base64,@@@").contains("does not decode"));
        assert!(bad("file:///etc/passwd").contains("expected a data: URL"));
        // A converted part names its own API's field.
        let part = image_url_part("http://x".into(), "messages[0].content[2].source");
        let e = with_images(&json!([part]), "content", TEXT, &mut Vec::new()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].content[2].source"));
        // A resolution hint the projector cannot follow is refused, `auto` taken.
        let hinted = |d: &str| json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA==", "detail": d}}]);
        assert!(with_images(&hinted("auto"), "c", TEXT, &mut Vec::new()).is_ok());
        let e = with_images(&hinted("high"), "c", TEXT, &mut Vec::new()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("c[0].image_url.detail"));
        let r = json!([{"type": "input_image", "image_url": "data:image/png;base64,AA==", "detail": "low"}]);
        let e = responses_message(&r, "input[0].content", "user").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input[0].content[0].detail"));
        // Other parts are still named.
        let e = with_images(&json!([{"type": "input_audio"}]), "c", TEXT, &mut images);
        assert_eq!(e.unwrap_err().param.as_deref(), Some("c[0]"));
    }
}
