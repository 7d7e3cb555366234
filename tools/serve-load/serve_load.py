#!/usr/bin/env python3
"""Load generator for any OpenAI-compatible server (cmf serve, llama-server, vLLM): C concurrent streaming chat
clients, each sending R requests one after another; prints time to first token and inter-token latency (p50, p99)
and aggregate generated tokens/s per concurrency; also the time per output token (TPOT: a request's first-to-last text span over
its tokens after the first, p50 and p99 over requests), which stays a per-token figure when the server holds back text
that is not yet whole UTF-8 (random-weight models emit many such tokens, so their chunks carry several); with the machine's load average and the generated tokens per request
(so runs against two servers can be checked to generate the same counts). Standard library only.

  python3 tools/serve-load/serve_load.py --url http://127.0.0.1:8080 --concurrency 1,8 --requests 4 --max-tokens 64
  python3 tools/serve-load/serve_load.py --api completions ...   # /v1/completions instead of /v1/chat/completions
  python3 tools/serve-load/serve_load.py --extra bias.json ...    # a JSON object (or a file of one) merged into each body
"""
import argparse, http.client, json, os, threading, time, urllib.parse

PROMPTS = ["What does grep do?", "What does tar do?", "Explain the ls command.", "What is a file system?",
           "How do I configure the network?", "What does json.dumps do?", "What does chmod do?", "What is gzip?"]


EXTRA = {}


def one_request(url, key, prompt, max_tokens, api="chat"):
    """Streams one completion; returns (ttft, [inter-token gaps], completion tokens, first-to-last text span). The gaps are
    between chunks that carry text; the token count is the server's usage figure, else the number of such chunks."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=600)
    req = {"model": "default", "max_tokens": max_tokens, "temperature": 0, "stream": True,
           "stream_options": {"include_usage": True}, "ignore_eos": True}
    if api == "chat":
        req["messages"] = [{"role": "user", "content": prompt}]
    else:
        req["prompt"] = prompt
    req.update(EXTRA)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions" if api == "chat" else "/v1/completions", json.dumps(req), headers)
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    first, last, gaps, tokens, chunks = None, None, [], None, 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        if any(c.get("delta", {}).get("content") or c.get("text") for c in chunk.get("choices", [])):
            now = time.perf_counter()
            chunks += 1
            if first is None:
                first = now - t0
            else:
                gaps.append(now - last)
            last = now
    conn.close()
    return first, gaps, tokens if tokens is not None else chunks, (last - t0 - first) if first is not None else 0.0


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def run(url, key, concurrency, requests, max_tokens, api="chat"):
    ttfts, gaps, counts, tpots, errors = [], [], [], [], []
    lock = threading.Lock()

    def client(i):
        for r in range(requests):
            try:
                t, g, n, span = one_request(url, key, PROMPTS[(i + r) % len(PROMPTS)], max_tokens, api)
            except Exception as e:  # counted, reported
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                if t is not None:
                    ttfts.append(t)
                gaps.extend(g)
                counts.append(n)
                if n > 1 and span > 0:
                    tpots.append(span / (n - 1))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"concurrency": concurrency, "requests": concurrency * requests, "errors": len(errors),
            "first_error": errors[0][:200] if errors else None,
            "ttft_ms_p50": 1e3 * pct(ttfts, 50), "ttft_ms_p99": 1e3 * pct(ttfts, 99),
            "itl_ms_p50": 1e3 * pct(gaps, 50), "itl_ms_p99": 1e3 * pct(gaps, 99),
            "tpot_ms_p50": 1e3 * pct(tpots, 50), "tpot_ms_p99": 1e3 * pct(tpots, 99),
            "tokens": sum(counts), "tokens_per_request_min": min(counts, default=0),
            "tokens_per_request_max": max(counts, default=0), "tokens_per_s": sum(counts) / wall, "wall_s": wall,
            "load_1m": os.getloadavg()[0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--api-key")
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2, help="requests before measuring (the JIT compiles then)")
    ap.add_argument("--api", choices=["chat", "completions"], default="chat",
                    help="/v1/chat/completions (messages) or /v1/completions (prompt)")
    ap.add_argument("--extra", help="a JSON object, or a file holding one, merged into every request body"
                                     " (e.g. a logit_bias that keeps a random-weight model's output to ASCII)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.extra:
        EXTRA.update(json.loads(open(a.extra).read() if os.path.isfile(a.extra) else a.extra))
    for _ in range(a.warmup):
        one_request(a.url, a.api_key, PROMPTS[0], 16, a.api)
    rows = [run(a.url, a.api_key, int(c), a.requests, a.max_tokens, a.api) for c in a.concurrency.split(",")]
    if a.json:
        print(json.dumps(rows))
        return
    print(f"{'streams':>7} {'reqs':>5} {'err':>4} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8} {'TPOT p50':>8}"
          f" {'TPOT p99':>8} {'tok/s':>8} {'tok/req':>9} {'load':>5}")
    for r in rows:
        print(f"{r['concurrency']:>7} {r['requests']:>5} {r['errors']:>4} {r['ttft_ms_p50']:>7.0f}ms {r['ttft_ms_p99']:>7.0f}ms"
              f" {r['itl_ms_p50']:>6.1f}ms {r['itl_ms_p99']:>6.1f}ms {r['tpot_ms_p50']:>6.1f}ms {r['tpot_ms_p99']:>6.1f}ms"
              f" {r['tokens_per_s']:>8.1f}"
              f" {r['tokens_per_request_min']:>4}-{r['tokens_per_request_max']:<4} {r['load_1m']:>5.1f}")
        if r["first_error"]:
            print(f"        first error: {r['first_error']}")


if __name__ == "__main__":
    main()
