//! Counters and gauges for `GET /metrics` (Prometheus text): every metric as `tessera:NAME`,
//! and those llama-server has also under its own name, `llamacpp:NAME`, so dashboards built
//! for llama-server work unchanged.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The metrics llama-server exports (as `llamacpp:NAME`) that Tessera has too.
const LLAMA_SERVER_METRICS: [&str; 11] = [
    "prompt_tokens_total",
    "tokens_predicted_total",
    "prompt_tokens_seconds",
    "predicted_tokens_seconds",
    "kv_cache_usage_ratio",
    "kv_cache_tokens",
    "requests_processing",
    "requests_deferred",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
    "spec_decode_num_drafts_total",
];

/// The server's counters, updated by the engine and the handlers.
#[derive(Debug, Default)]
pub struct Metrics {
    prompt_tokens: AtomicU64,
    predicted_tokens: AtomicU64,
    requests: AtomicU64,
    busy: AtomicUsize,
    queue: AtomicUsize,
    kv_used: AtomicUsize,
    kv_size: AtomicUsize,
    kv_in_slots: AtomicUsize,
    prompt_cache: (AtomicUsize, AtomicUsize),
    /// Seconds spent in steps, split by the share of prompt and generated tokens.
    seconds: Mutex<(f64, f64)>,
    /// Speculation: tokens proposed, proposals kept, verification steps.
    spec: [AtomicU64; 3],
}

impl Metrics {
    /// A request was accepted.
    pub fn add_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// One decode step: prompt and generated tokens in it, and its time.
    pub fn add_step(&self, prompt: usize, generated: usize, secs: f64) {
        self.prompt_tokens.fetch_add(prompt as u64, Ordering::Relaxed);
        self.predicted_tokens.fetch_add(generated as u64, Ordering::Relaxed);
        let total = (prompt + generated).max(1) as f64;
        let mut s = self.seconds.lock().unwrap_or_else(|e| e.into_inner());
        s.0 += secs * prompt as f64 / total;
        s.1 += secs * generated as f64 / total;
    }

    /// One speculative verification: `drafted` proposals, `accepted` of them kept.
    pub fn add_spec(&self, drafted: usize, accepted: usize) {
        self.predicted_tokens.fetch_add(accepted as u64, Ordering::Relaxed);
        self.spec[0].fetch_add(drafted as u64, Ordering::Relaxed);
        self.spec[1].fetch_add(accepted as u64, Ordering::Relaxed);
        self.spec[2].fetch_add(1, Ordering::Relaxed);
    }

    /// Slots serving a request.
    pub fn set_busy(&self, n: usize) {
        self.busy.store(n, Ordering::Relaxed);
    }

    /// Slots serving a request now.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// Requests waiting for a slot.
    pub fn set_queue(&self, n: usize) {
        self.queue.store(n, Ordering::Relaxed);
    }

    /// KV cells in use, of the cache's size.
    pub fn set_kv_used(&self, used: usize, size: usize) {
        self.kv_used.store(used, Ordering::Relaxed);
        self.kv_size.store(size, Ordering::Relaxed);
    }

    /// Cells the slots account for (their cached tokens); equal to the cells in use unless
    /// a cell leaked.
    pub fn set_kv_in_slots(&self, n: usize) {
        self.kv_in_slots.store(n, Ordering::Relaxed);
    }

    /// States in the host-RAM prompt cache, and their bytes.
    pub fn set_prompt_cache(&self, entries: usize, bytes: usize) {
        self.prompt_cache.0.store(entries, Ordering::Relaxed);
        self.prompt_cache.1.store(bytes, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let (ps, gs) = *self.seconds.lock().unwrap_or_else(|e| e.into_inner());
        let pt = self.prompt_tokens.load(Ordering::Relaxed) as f64;
        let gt = self.predicted_tokens.load(Ordering::Relaxed) as f64;
        let rate = |t: f64, s: f64| if s > 0.0 { t / s } else { 0.0 };
        let used = self.kv_used.load(Ordering::Relaxed);
        let size = self.kv_size.load(Ordering::Relaxed).max(1);
        let spec = |i: usize| self.spec[i].load(Ordering::Relaxed) as f64;
        let rows: [(&str, &str, &str, f64); 15] = [
            ("prompt_tokens_total", "counter", "Prompt tokens processed.", pt),
            ("tokens_predicted_total", "counter", "Tokens generated.", gt),
            (
                "requests_total",
                "counter",
                "Generation requests accepted.",
                self.requests.load(Ordering::Relaxed) as f64,
            ),
            (
                "prompt_tokens_seconds",
                "gauge",
                "Average prompt throughput in tokens/s.",
                rate(pt, ps),
            ),
            (
                "predicted_tokens_seconds",
                "gauge",
                "Average generation throughput in tokens/s.",
                rate(gt, gs),
            ),
            ("kv_cache_tokens", "gauge", "KV cache cells in use.", used as f64),
            (
                "kv_cache_tokens_in_slots",
                "gauge",
                "KV cache cells the slots' cached prompts account for.",
                self.kv_in_slots.load(Ordering::Relaxed) as f64,
            ),
            (
                "prompt_cache_states",
                "gauge",
                "Prompts saved in host memory (--cache-ram).",
                self.prompt_cache.0.load(Ordering::Relaxed) as f64,
            ),
            (
                "prompt_cache_bytes",
                "gauge",
                "Host memory the saved prompts take (--cache-ram).",
                self.prompt_cache.1.load(Ordering::Relaxed) as f64,
            ),
            (
                "kv_cache_usage_ratio",
                "gauge",
                "KV cache usage (1 = full).",
                used as f64 / size as f64,
            ),
            (
                "requests_processing",
                "gauge",
                "Requests being processed (busy slots).",
                self.busy() as f64,
            ),
            (
                "requests_deferred",
                "gauge",
                "Requests waiting for a slot.",
                self.queue.load(Ordering::Relaxed) as f64,
            ),
            (
                "spec_decode_num_draft_tokens_total",
                "counter",
                "Speculative: tokens proposed.",
                spec(0),
            ),
            (
                "spec_decode_num_accepted_tokens_total",
                "counter",
                "Speculative: proposals the model kept.",
                spec(1),
            ),
            (
                "spec_decode_num_drafts_total",
                "counter",
                "Speculative: verification steps.",
                spec(2),
            ),
        ];
        let mut s = String::new();
        for (name, kind, help, v) in rows {
            for prefix in ["tessera", "llamacpp"] {
                if prefix == "llamacpp" && !LLAMA_SERVER_METRICS.contains(&name) {
                    continue;
                }
                s.push_str(&format!(
                    "# HELP {prefix}:{name} {help}\n# TYPE {prefix}:{name} {kind}\n{prefix}:{name} {v}\n"
                ));
            }
        }
        s
    }
}
