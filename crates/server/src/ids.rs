//! The one id minter: every id a reply carries (`chatcmpl-…`, `cmpl-…`, `call_…`, `msg_…`,
//! `toolu_…`, `resp_…`, `msg_…` items) is a prefix and 24 hex digits, the clock's nanoseconds
//! and a counter, so ids are unique within a server and sort by creation.

use std::sync::atomic::{AtomicU64, Ordering};

/// Seconds since the Unix epoch (OpenAI's `created`).
pub(crate) fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A fresh id: `prefix` (with its separator, `"chatcmpl-"`, `"call_"`) and 24 hex digits.
pub(crate) fn new_id(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("{prefix}{t:016x}{:08x}", N.fetch_add(1, Ordering::Relaxed) as u32)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_unique_and_prefixed() {
        let (a, b) = (super::new_id("call_"), super::new_id("call_"));
        assert!(a.starts_with("call_") && a.len() == 5 + 24, "{a}");
        assert_ne!(a, b);
    }
}
