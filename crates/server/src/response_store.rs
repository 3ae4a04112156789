//! Stored responses of `POST /v1/responses` (`store`, true by default as in OpenAI's API): the
//! conversation each response continued and its output, so that a later request's
//! `previous_response_id` continues it, and `GET` / `DELETE /v1/responses/{id}` find it.
//!
//! Kept in memory only (gone at restart), the newest [`MAX_STORED`] (the oldest go first): a
//! server for agents, not an archive. An id that is no longer kept is a clear 404 / 400.

use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Responses kept.
pub const MAX_STORED: usize = 1000;

/// One stored response.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The conversation as chat messages (without `instructions`, which do not carry over),
    /// ending with the response's own output.
    pub history: Vec<Value>,
    /// The response object, as returned.
    pub response: Value,
}

/// The newest responses, by id.
#[derive(Debug, Default)]
pub struct ResponseStore {
    entries: Mutex<VecDeque<(String, Stored)>>,
}

impl ResponseStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(String, Stored)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `stored` under `id`, dropping the oldest beyond [`MAX_STORED`].
    pub fn put(&self, id: String, stored: Stored) {
        let mut e = self.lock();
        e.push_back((id, stored));
        while e.len() > MAX_STORED {
            e.pop_front();
        }
    }

    /// The response stored under `id`.
    pub fn get(&self, id: &str) -> Option<Stored> {
        self.lock().iter().find(|(k, _)| k == id).map(|(_, s)| s.clone())
    }

    /// Forgets `id`; whether it was kept.
    pub fn delete(&self, id: &str) -> bool {
        let mut e = self.lock();
        let before = e.len();
        e.retain(|(k, _)| k != id);
        e.len() < before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_the_newest_and_forgets_on_delete() {
        let s = ResponseStore::default();
        for i in 0..MAX_STORED + 2 {
            s.put(format!("r{i}"), Stored { history: vec![], response: json!(i) });
        }
        assert!(s.get("r0").is_none() && s.get("r1").is_none());
        assert_eq!(s.get("r2").unwrap().response, json!(2));
        assert!(s.delete("r2") && !s.delete("r2"));
        assert!(s.get("r2").is_none());
    }
}
