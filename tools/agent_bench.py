#!/usr/bin/env python3
"""An agent loop against an OpenAI-compatible server (tessera serve or llama-server): how long
the next turn of a long conversation waits for its first token when the server still has its
prefix (in a slot, or in host memory) against the first turn that computed it.

    python3 tools/agent_bench.py http://127.0.0.1:8080 [--prefix-tokens 2000] [--others 2]
        [--tools] [--label tessera]

Turn 1: a system prompt of about `--prefix-tokens` tokens (a repository listing) and a
question. Then `--others` unrelated conversations of the same size, one after another (with
`-np` at most that many slots, they take every slot). Turn 2: turn 1's messages, its answer,
and a new question. With `--tools`, the conversation offers two functions and turn 2 carries
a tool call and its result, as a coding agent's loop does. Reports each turn's time to first
token, prompt tokens and cached tokens (`usage.prompt_tokens_details.cached_tokens`).
Standard library only.
"""

import argparse
import http.client
import json
import time
import urllib.parse

TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "Read a file of the repository.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "run_tests", "description": "Run the test suite.",
     "parameters": {"type": "object", "properties": {"filter": {"type": "string"}}}}},
]


def listing(n_tokens, seed):
    # About 25 tokens per line (Qwen2.5's and Llama 3's tokenizers).
    lines = [f"src/module_{seed}_{i}/file_{i * 7 % 13}.rs: {i * 31 % 977} lines, edited {i % 28 + 1} days ago"
             for i in range(n_tokens // 25)]
    return "You are a coding agent. The repository:\n" + "\n".join(lines)


def chat(url, messages, tools, max_tokens):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=1200)
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if tools:
        body["tools"] = TOOLS
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    first, text, usage = None, "", None
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        for c in ev.get("choices", []):
            d = c.get("delta", {})
            if (d.get("content") or d.get("tool_calls") or d.get("reasoning_content")) and first is None:
                first = time.perf_counter() - t0
            text += d.get("content") or ""
    cached = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return first, text, (usage or {}).get("prompt_tokens", 0), cached


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--prefix-tokens", type=int, default=2000)
    ap.add_argument("--others", type=int, default=2)
    ap.add_argument("--tools", action="store_true")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--label", default="server")
    a = ap.parse_args()
    system = {"role": "system", "content": listing(a.prefix_tokens, 0)}
    turn1 = [system, {"role": "user", "content": "Which module was edited most recently?"}]
    t1, answer, p1, c1 = chat(a.url, turn1, a.tools, a.max_tokens)
    for k in range(a.others):
        chat(a.url, [{"role": "system", "content": listing(a.prefix_tokens, k + 1)},
                     {"role": "user", "content": "Summarize the repository."}], a.tools, a.max_tokens)
    turn2 = turn1 + [{"role": "assistant", "content": answer}]
    if a.tools:
        turn2 += [{"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                   "function": {"name": "read_file", "arguments": json.dumps({"path": "src/module_0_3/file_8.rs"})}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "fn main() { println!(\"hello\"); }"}]
    turn2 += [{"role": "user", "content": "Now open that module's largest file."}]
    t2, _, p2, c2 = chat(a.url, turn2, a.tools, a.max_tokens)
    print(f"| {a.label} | turn 1 | {p1} | {c1} | {t1 * 1e3:.0f} |")
    print(f"| {a.label} | turn 2 after {a.others} other conversations | {p2} | {c2} | {t2 * 1e3:.0f} |")
    print(f"{a.label}: turn 2 waited {t2 / t1:.3f}x turn 1's time to first token")


if __name__ == "__main__":
    main()
