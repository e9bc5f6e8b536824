#!/usr/bin/env python3
"""Time to first token of a long conversation's next turn after `kestrel serve` restarts, with
and without the KV disk tier (`--kv-cache-disk`), in one run on one machine.

For each model:
  cold  a fresh server without the tier gets turn N+1 (history + a new message): the whole
        prompt is computed;
  warm  a server with an empty tier gets turn N (the history), writes its blocks to disk and
        is killed; a new server on the same directory gets turn N+1: the history comes back
        from disk and only the new message is computed.
Each is repeated (--rounds) and the medians are compared. The greedy replies of cold and warm
must be identical, and the warm turn's cached tokens must cover the history.

Usage: bench_kv_disk_restart.py PATH/TO/kestrel MODEL.gguf [MODEL.gguf ...]
       [--tokens 6000] [--rounds 3] [--threads 2] [--out docs/benchmarks/DATE-kv-disk-restart.md]
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


class Server:
    def __init__(self, kestrel, model, threads, tier=None):
        self.port = free_port()
        args = [kestrel, "serve", "--model", model, "--hostname", "127.0.0.1",
                "--port", str(self.port), "--threads", str(threads), "--kv-cache-memory", "2GiB"]
        if tier:
            args += ["--kv-cache-disk", tier]
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                sys.exit(f"kestrel serve exited: {self.log.read().decode()[-2000:]}")
            try:
                urllib.request.urlopen(self.base + "/health", timeout=2)
                return
            except OSError:
                time.sleep(0.3)
        sys.exit("kestrel serve did not become ready")

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def metric(self, name):
        text = urllib.request.urlopen(self.base + "/metrics", timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0

    def count_tokens(self, text):
        req = urllib.request.Request(self.base + "/tokenize", json.dumps({"inputs": text}).encode(),
                                     {"Content-Type": "application/json"})
        return len(json.loads(urllib.request.urlopen(req, timeout=60).read()))

    def turn(self, prompt, max_tokens=16):
        """Streams a greedy completion: (seconds to the first token, text, usage)."""
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        req = urllib.request.Request(self.base + "/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        start = time.perf_counter()
        first, text, usage = None, "", None
        with urllib.request.urlopen(req, timeout=600) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for c in chunk.get("choices", []):
                    if c.get("text"):
                        first = first or time.perf_counter() - start
                        text += c["text"]
                usage = chunk.get("usage") or usage
        return first, text, usage


def history(server, n_tokens):
    """A conversation transcript of about `n_tokens` tokens (counted by the server's
    tokenizer), and the next message."""
    turns, i = [], 0
    per_turn = None
    while True:
        turns.append(f"User: How should I change line {i} of module_{i % 13}.rs?\n"
                     f"Assistant: Rename the variable count_{i} to total_{i} and keep the "
                     f"loop bound at {i * 3}; the tests in case_{i % 17} cover it.\n")
        i += 1
        if per_turn is None and i == 20:
            per_turn = server.count_tokens("".join(turns)) / 20
        if per_turn and i * per_turn >= n_tokens:
            break
    return "".join(turns), "User: Now summarise every change in one sentence.\nAssistant:"


def bench_model(args, model):
    s = Server(args.kestrel, model, args.threads)
    hist, message = history(s, args.tokens)
    s.kill()
    rows = {"cold": [], "warm": []}
    texts, cached, prompt_tokens = set(), [], 0
    for _ in range(args.rounds):
        s = Server(args.kestrel, model, args.threads)
        ttft, text, usage = s.turn(hist + message)
        s.kill()
        rows["cold"].append(ttft)
        texts.add(("cold", text))
        prompt_tokens = usage["prompt_tokens"]

        tier = tempfile.mkdtemp(prefix="kestrel-kv-tier-")
        try:
            s = Server(args.kestrel, model, args.threads, tier)
            _, _, first = s.turn(hist, max_tokens=1)
            want = first["prompt_tokens"] // 16 - 1
            deadline = time.time() + 120
            while s.metric("kestrel:kv_disk_blocks_written_total") < want:
                if time.time() > deadline:
                    sys.exit("the tier never wrote the history")
                time.sleep(0.1)
            s.kill()
            s = Server(args.kestrel, model, args.threads, tier)
            ttft, text, usage = s.turn(hist + message)
            s.kill()
        finally:
            shutil.rmtree(tier, ignore_errors=True)
        rows["warm"].append(ttft)
        texts.add(("warm", text))
        cached.append(usage["prompt_tokens_details"]["cached_tokens"])
    same = len({t for _, t in texts}) == 1
    cold, warm = statistics.median(rows["cold"]), statistics.median(rows["warm"])
    return {"model": os.path.basename(model), "prompt_tokens": prompt_tokens,
            "cached": min(cached), "cold": cold, "warm": warm, "ratio": cold / warm,
            "same_text": same}


def triad(kestrel, threads):
    out = subprocess.run([kestrel, "membw", "--json", "-t", str(threads)], capture_output=True,
                         text=True)
    try:
        return json.loads(out.stdout)["results"][-1]["triad_gbs"]
    except (ValueError, KeyError, IndexError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kestrel")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--tokens", type=int, default=6000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    bw = triad(args.kestrel, args.threads)
    results = [bench_model(args, m) for m in args.models]
    date = datetime.date.today().isoformat()
    lines = [f"# KV disk tier: next turn after a restart ({date})", "",
             f"{cpu_name()}, {args.threads} threads, triad {bw:.1f} GB/s" if bw else cpu_name(),
             f"`scripts/bench_kv_disk_restart.py`, {args.rounds} rounds, medians; greedy, "
             "16 tokens.", "",
             "| model | prompt tokens | cached after restart | TTFT without tier (s) | "
             "TTFT with tier (s) | ratio | same reply |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        lines.append(f"| {r['model']} | {r['prompt_tokens']} | {r['cached']} | {r['cold']:.3f} "
                     f"| {r['warm']:.3f} | {r['ratio']:.1f}x | {'yes' if r['same_text'] else 'NO'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if not all(r["same_text"] for r in results):
        sys.exit("the reply changed with the tier")


if __name__ == "__main__":
    main()
