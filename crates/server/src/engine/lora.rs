//! The server's LoRA adapters (llama-server's `--lora`, `/lora-adapters` and a request's
//! `lora`): loaded once with the model, each with a global scale that `POST /lora-adapters`
//! changes; a request's `lora` list gives its own scales instead (adapters it does not list
//! at 0, as llama-server).
//!
//! A request runs with one scale per adapter. The engine decodes together only slots whose
//! scales are equal (their products differ), taking turns between the sets present, and a
//! slot's cached prompt is reused only by a request with the scales it was computed with.

use crate::error::ApiError;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tessera_llama::LoraAdapter;

/// One scale per adapter, in the adapters' order.
pub type LoraScales = Vec<f32>;

/// The adapters and their global scales.
#[derive(Debug, Default)]
pub struct LoraTable {
    adapters: Vec<Arc<LoraAdapter>>,
    scales: Mutex<LoraScales>,
}

impl LoraTable {
    /// The adapters with their starting scales (`--lora-init-without-apply`: all 0).
    pub fn new(loras: Vec<(Arc<LoraAdapter>, f32)>, without_apply: bool) -> Self {
        let scales = loras.iter().map(|(_, s)| if without_apply { 0.0 } else { *s }).collect();
        LoraTable {
            adapters: loras.into_iter().map(|(a, _)| a).collect(),
            scales: Mutex::new(scales),
        }
    }

    /// The adapters, in id order.
    pub fn adapters(&self) -> &[Arc<LoraAdapter>] {
        &self.adapters
    }

    /// The global scales now.
    pub fn current(&self) -> LoraScales {
        self.scales.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `GET /lora-adapters`: id, path, scale, task name and prompt prefix of each adapter.
    pub fn to_json(&self) -> Value {
        let scales = self.current();
        Value::Array(
            self.adapters
                .iter()
                .zip(scales)
                .enumerate()
                .map(|(id, (a, scale))| {
                    json!({
                        "id": id,
                        "path": a.path(),
                        "scale": scale,
                        "task_name": a.task_name(),
                        "prompt_prefix": a.prompt_prefix(),
                    })
                })
                .collect(),
        )
    }

    /// The scales `entries` (`[{"id": N, "scale": S}, ...]`, read from field `field`) ask for:
    /// the listed adapters at their scale, the others at 0. An id that names no adapter, or a
    /// scale that is not a number, is an error naming the entry.
    pub fn parse(&self, v: &Value, field: &str) -> Result<LoraScales, ApiError> {
        let Value::Array(entries) = v else {
            return Err(ApiError::field(
                field,
                "expected an array of {\"id\": N, \"scale\": S} objects",
            ));
        };
        let mut scales = vec![0.0; self.adapters.len()];
        for (i, e) in entries.iter().enumerate() {
            let at = |f: &str| format!("{field}[{i}].{f}");
            let Value::Object(o) = e else {
                return Err(ApiError::field(
                    &format!("{field}[{i}]"),
                    "expected an object with id and scale",
                ));
            };
            if let Some(k) = o.keys().find(|k| *k != "id" && *k != "scale") {
                let shown: String = k.chars().take(64).flat_map(char::escape_default).collect();
                return Err(ApiError::field(
                    &at(&shown),
                    "unknown field (an entry has id and scale)",
                ));
            }
            let id = match o.get("id") {
                Some(Value::Number(n)) => n.as_u64(),
                _ => None,
            };
            let Some(id) = id else {
                return Err(ApiError::field(
                    &at("id"),
                    "expected an adapter id (an integer from 0)",
                ));
            };
            if id as usize >= self.adapters.len() {
                let have = match self.adapters.len() {
                    0 => "the server has no LoRA adapters (start it with --lora)".to_string(),
                    n => format!("the server has {n} (ids 0 to {})", n - 1),
                };
                return Err(ApiError::field(&at("id"), format!("no LoRA adapter {id}: {have}")));
            }
            let scale = match o.get("scale") {
                None | Some(Value::Null) => 0.0,
                Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
                Some(_) => f64::NAN,
            };
            if !scale.is_finite() || scale.abs() > f32::MAX as f64 {
                return Err(ApiError::field(&at("scale"), "expected a number"));
            }
            scales[id as usize] = scale as f32;
        }
        Ok(scales)
    }

    /// Sets the global scales (`POST /lora-adapters`).
    pub fn set(&self, scales: LoraScales) {
        for (id, s) in scales.iter().enumerate() {
            tracing::info!(id, scale = s, "LoRA adapter scale set");
        }
        *self.scales.lock().unwrap_or_else(|e| e.into_inner()) = scales;
    }
}
