#!/usr/bin/env python3
"""Soak test of `tessera serve` against careless and hostile clients, on 127.0.0.1 only.

Starts the server, then for --seconds runs, side by side: well-behaved streaming chats,
half-sent headers, half-sent bodies, streams whose client never reads, oversized and malformed
bodies, grammars that cannot run, and a /health prober; samples the server's resident memory;
then sends SIGTERM and times the exit. Every count and duration is bounded.

It checks (exit status 1 if one fails, with the figures as JSON on stdout either way):
- every well-behaved request completes, or ends with the server's shutdown event;
- /health answers within a second throughout;
- the resident memory stays under --max-rss-mib;
- oversized, malformed and grammar requests get a 4xx, never a 5xx;
- the process exits within --shutdown-timeout plus two seconds after SIGTERM.

Usage: python3 tools/soak.py --bin target/release/tessera [--model M.gguf] [--seconds 180]
(standard library only).
"""

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, timeout=60.0, raw=None):
    """One HTTP/1.1 request; returns (status, body text). `raw` sends those bytes instead."""
    s = socket.create_connection((HOST, port), timeout=timeout)
    try:
        if raw is None:
            data = b"" if body is None else json.dumps(body).encode()
            head = (f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
            raw = head.encode() + data
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the whole body went (a 413): its answer may still be there
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            chunks.append(b)
        text = b"".join(chunks).decode("utf-8", "replace")
        status = int(text.split(" ", 2)[1]) if text.startswith("HTTP/") else 0
        return status, text
    finally:
        s.close()


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = {}
        self.health_max_ms = 0.0
        self.health_fail = 0
        self.rss_max_mib = 0.0
        self.problems = []

    def add(self, key, n=1):
        with self.lock:
            self.c[key] = self.c.get(key, 0) + n

    def problem(self, what):
        with self.lock:
            if len(self.problems) < 50:
                self.problems.append(what)


def well_behaved(port, stats, stop, shutting):
    body = {"messages": [{"role": "user", "content": "Write a short poem about the sea."}],
            "max_tokens": 32, "stream": True}
    while not stop.is_set():
        try:
            status, text = request(port, "POST", "/v1/chat/completions", body, timeout=120)
        except OSError as e:
            if shutting.is_set():
                stats.add("stream_cut_at_shutdown")
                return
            stats.problem(f"well-behaved stream: {e}")
            continue
        if status == 200 and "data: [DONE]" in text:
            stats.add("stream_ok")
        elif shutting.is_set() and ("shutting" in text or status == 503 or status == 0):
            stats.add("stream_shutdown_event")
        elif status == 503 and "server_busy" in text:
            stats.add("stream_busy")
        else:
            stats.problem(f"well-behaved stream: {status} {text[:200]!r}")


def hold(port, data, seconds, stats, key, stop):
    """Sends `data` and holds the connection (at most `seconds`)."""
    try:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(5)
        s.connect((HOST, port))
        s.sendall(data)
        stats.add(key)
        t = time.time()
        s.settimeout(0.5)
        while time.time() - t < seconds and not stop.is_set():
            try:
                if not s.recv(1 if key == "non_reading_stream" else 4096):
                    stats.add(key + "_closed_by_server")
                    break
            except socket.timeout:
                pass
            except OSError:
                stats.add(key + "_closed_by_server")
                break
            if key == "non_reading_stream":
                time.sleep(0.5)  # reads one byte per half second at most: a stalled reader
        s.close()
    except OSError:
        stats.add(key + "_refused")


def hostile(port, stats, stop, shutting):
    try:
        hostile_loop(port, stats, stop)
    except OSError as e:
        if not shutting.is_set():
            stats.problem(f"hostile client: {e}")


def hostile_loop(port, stats, stop):
    alts = " | ".join(f'"w{i}"' for i in range(10000))
    # Twenty alternatives per token make each event over 1 KB: megabytes nobody reads, more
    # than the kernel's socket buffers hold, so the server's writes block.
    stream = json.dumps({"messages": [{"role": "user", "content": "Once"}], "max_tokens": 4000,
                         "ignore_eos": True, "logprobs": True, "top_logprobs": 20,
                         "stream": True}).encode()
    kinds = [
        ("half_headers", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty"),
        ("half_body", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"),
        ("non_reading_stream", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
         + str(len(stream)).encode() + b"\r\n\r\n" + stream),
    ]
    threads, readers = [], []
    while not stop.is_set():
        pick = random.random()
        if pick < 0.45:
            key, data = random.choice(kinds)
            threads = [t for t in threads if t.is_alive()]
            readers = [t for t in readers if t.is_alive()]
            if key == "non_reading_stream":
                # At most two at a time, held long enough to fill the socket buffers (the
                # others still get slots); the server must close them itself.
                if len(readers) < 2:
                    t = threading.Thread(target=hold, args=(port, data, 150, stats, key, stop),
                                         daemon=True)
                    t.start()
                    readers.append(t)
            elif len(threads) < 48:
                t = threading.Thread(target=hold, args=(port, data, 45, stats, key, stop), daemon=True)
                t.start()
                threads.append(t)
        elif pick < 0.6:
            status, _ = request(port, "POST", "/v1/completions",
                                raw=b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                    b"Content-Length: 2097152\r\n\r\n" + b"x" * 2097152)
            stats.add(f"oversized_{status}")
            if status >= 500:
                stats.problem(f"oversized body: {status}")
        elif pick < 0.8:
            status, _ = request(port, "POST", "/v1/chat/completions",
                                raw=b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                    b"Content-Length: 9\r\n\r\n{\"messa:[")
            stats.add(f"malformed_{status}")
            if status != 400:
                stats.problem(f"malformed body: {status}")
        else:
            g = random.choice(['root ::= "a"{100000}', f"root ::= {alts}"])
            status, text = request(port, "POST", "/completion",
                                   {"prompt": "x", "grammar": g, "stream": True})
            stats.add(f"grammar_{status}")
            if status != 400:
                stats.problem(f"grammar: {status} {text[:200]!r}")
        time.sleep(0.05)
    for t in threads + readers:
        t.join(timeout=2)


def prober(port, stats, stop, shutting):
    while not stop.is_set() and not shutting.is_set():
        t = time.time()
        try:
            status, _ = request(port, "GET", "/health", timeout=5)
            ms = (time.time() - t) * 1e3
            with stats.lock:
                stats.health_max_ms = max(stats.health_max_ms, ms)
            stats.add("health_ok" if status == 200 else "health_bad")
            if status != 200 or ms > 1000:
                stats.health_fail += 1
                stats.problem(f"/health: {status} in {ms:.0f} ms")
        except OSError as e:
            stats.health_fail += 1
            stats.problem(f"/health: {e}")
        time.sleep(0.25)


def rss_sampler(pid, stats, stop):
    while not stop.is_set():
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        mib = int(line.split()[1]) / 1024
                        with stats.lock:
                            stats.rss_max_mib = max(stats.rss_max_mib, mib)
        except OSError:
            return
        time.sleep(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="the tessera binary")
    ap.add_argument("--model", help="GGUF file (default: the binary's default model)")
    ap.add_argument("--seconds", type=float, default=180)
    ap.add_argument("--clients", type=int, default=6, help="well-behaved streaming clients")
    ap.add_argument("--shutdown-timeout", type=float, default=5)
    # SmolLM2 (100 MB of weights), a 4096-cell KV cache, --cache-ram 128 and the server.
    ap.add_argument("--max-rss-mib", type=float, default=1024)
    ap.add_argument("--log", default="/tmp/tessera-soak.log", help="the server's log")
    a = ap.parse_args()
    port = free_port()
    cmd = [a.bin, "serve", "--host", HOST, "--port", str(port), "-np", "4", "-c", "4096",
           "-t", "2", "--timeout", "5", "--header-timeout", "2", "--max-connections", "96",
           "--cache-ram", "128",
           "--shutdown-timeout", str(a.shutdown_timeout)]
    if a.model:
        cmd += ["-m", a.model]
    # The server's log goes to a file: a pipe nobody drains would block its writes.
    log = open(a.log, "wb")
    srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    t0 = time.time()
    while True:
        try:
            if request(port, "GET", "/health", timeout=2)[0] == 200:
                break
        except OSError:
            pass
        if srv.poll() is not None or time.time() - t0 > 120:
            sys.exit(f"the server did not start (see {a.log})")
        time.sleep(0.2)
    stats = Stats()
    stop, shutting = threading.Event(), threading.Event()
    workers = [threading.Thread(target=well_behaved, args=(port, stats, stop, shutting))
               for _ in range(a.clients)]
    workers += [threading.Thread(target=hostile, args=(port, stats, stop, shutting)),
                threading.Thread(target=prober, args=(port, stats, stop, shutting))]
    sampler = threading.Thread(target=rss_sampler, args=(srv.pid, stats, stop), daemon=True)
    for w in workers:
        w.start()
    sampler.start()
    time.sleep(a.seconds)
    # SIGTERM with everything still running: well-behaved streams finish or get the event.
    shutting.set()
    t_term = time.time()
    srv.send_signal(signal.SIGTERM)
    try:
        srv.wait(timeout=a.shutdown_timeout + 30)
    except subprocess.TimeoutExpired:
        srv.kill()
    exit_s = time.time() - t_term
    stop.set()
    for w in workers:
        w.join(timeout=10)
    log.close()
    with open(a.log, errors="replace") as f:
        text = f.read()
    server_log = {
        "writers_stalled_closed": text.count("closing a connection whose client stopped reading"),
        "unread_events_ended": text.count("a streaming client stopped reading"),
        "connection_cap_warnings": text.count("connection limit reached"),
        "panics": text.count("panicked"),
    }
    if server_log["panics"]:
        stats.problem("the server panicked (see its log)")
    out = {
        "seconds": a.seconds,
        "server_log": server_log,
        "counts": dict(sorted(stats.c.items())),
        "health_max_ms": round(stats.health_max_ms, 1),
        "rss_max_mib": round(stats.rss_max_mib, 1),
        "exit_after_sigterm_s": round(exit_s, 2),
        "exit_code": srv.returncode,
        "problems": stats.problems,
    }
    bad = list(stats.problems)
    if stats.health_fail:
        bad.append("health")
    if stats.rss_max_mib > a.max_rss_mib:
        bad.append(f"rss {stats.rss_max_mib:.0f} MiB over {a.max_rss_mib}")
    if exit_s > a.shutdown_timeout + 2:
        bad.append(f"exit took {exit_s:.1f} s")
    out["ok"] = not bad
    print(json.dumps(out, indent=1))
    sys.exit(0 if not bad else 1)


if __name__ == "__main__":
    main()
