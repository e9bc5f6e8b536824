#!/usr/bin/env python3
"""Soak driver for a running `kestrel serve`: many concurrent clients with random parameters,
random cancellations and random stop strings, checking every response, the server's resident
memory and, at the end, that the engine is idle with every KV block back.

Usage: soak_driver.py --base-url URL --pid PID --minutes M --result FILE [--server-log FILE]

Pass criteria (the exit status is 1 if any fails):
  * no unexpected error: every request that was not cancelled got 200 with a well-formed body
    or stream, except requests whose parameters were deliberately invalid, which got exactly
    the expected 4xx (400 on the OpenAI routes, 422 on the TGI routes);
  * at the end: running = waiting = 0, KV usage 0, free KV blocks = all KV blocks, the engine's
    idle KV check ran and never failed (block-pool invariants, no leaked block);
  * resident memory flat: after the warm-up (the first 20% of the run) the largest RSS sample
    is within 5% of the RSS at the end of the warm-up;
  * enough cancellations (--min-cancellations), the server process alive, no panic in its log.

Only `httpx` is needed (it comes with the `openai` package the client tests install).
"""

import argparse
import asyncio
import json
import math
import random
import re
import statistics
import sys
import time
from collections import Counter, defaultdict

import httpx

WORDS = (
    "the quick brown fox jumps over a lazy dog while seven tired engineers argue about "
    "caches queues tokens rivers mountains coffee stars and the meaning of good software"
).split()
STOPS = [" the", ".", "\n", ",", " a", "e", "ing", "!", "}", " is", "\n\n", "0"]
SYSTEM = "You are a terse assistant. Answer in one short sentence."
OPENAI_FINISH = {"stop", "length"}
TGI_FINISH = {"length", "eos_token", "stop_sequence"}
TIMEOUT_S = 300.0  # a request still unanswered after this long counts as a hang
MODEL_ID = ["?"]  # the served model's id, read from /v1/models at start


class Stats:
    def __init__(self):
        self.requests = 0
        self.completed = 0
        self.cancelled = 0
        self.invalid_ok = 0
        self.by_route = Counter()
        self.errors = Counter()
        self.error_samples = []
        self.completion_tokens = 0
        self.streamed_events = 0

    def error(self, kind, detail):
        self.errors[kind] += 1
        if len(self.error_samples) < 50:
            self.error_samples.append({"kind": kind, "detail": str(detail)[:600]})


class Bad(Exception):
    """A response that is not what the request should have produced."""

    def __init__(self, kind, detail):
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def words(rng, lo, hi):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


# ---------------------------------------------------------------------------------------------
# Request generation


def sampling_fields(rng, body, tgi=False):
    if rng.random() < 0.6:
        body["temperature"] = round(rng.uniform(0.05 if tgi else 0.0, 1.5), 2)
    if rng.random() < 0.4:
        body["top_p"] = round(rng.uniform(0.1, 1.0), 2)
    if rng.random() < 0.4:
        body["top_k"] = rng.choice([1, 5, 20, 50, -1] if not tgi else [1, 5, 20, 50])
    if rng.random() < 0.5:
        body["seed"] = rng.randint(0, 2**31)
    if rng.random() < 0.3 and not tgi:
        body["presence_penalty"] = round(rng.uniform(-2.0, 2.0), 2)
    if rng.random() < 0.3:
        body["frequency_penalty"] = round(rng.uniform(-2.0, 2.0), 2)
    if rng.random() < 0.35:
        body["stop"] = rng.sample(STOPS, rng.randint(1, 3))


def invalid_openai(rng, body, route):
    """Makes `body` deliberately invalid in one way; the server must answer 400."""
    choice = rng.randrange(9)
    if choice == 0:
        body["temperature"] = 2.5
    elif choice == 1:
        body["top_p"] = rng.choice([0.0, 1.5])
    elif choice == 2:
        body["n"] = 17
    elif choice == 3:
        body["presence_penalty"] = 2.5
    elif choice == 4:
        body["top_k"] = -5
    elif choice == 5:
        body["stop"] = ["x"] * 17
    elif choice == 6:
        body["stop"] = [""]
    elif choice == 7:
        # On chat, max_completion_tokens wins over max_tokens: make the one in use too large.
        key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        body[key] = 10_000_000
    else:
        if route == "completions":
            body["logprobs"] = 21
        else:
            body["logprobs"] = True
            body["top_logprobs"] = 21


def invalid_tgi(rng, params):
    """Makes TGI `parameters` deliberately invalid in one way; the server must answer 422."""
    choice = rng.randrange(5)
    if choice == 0:
        params["temperature"] = 0.0
    elif choice == 1:
        params["top_p"] = 1.5
    elif choice == 2:
        params["max_new_tokens"] = 10_000_000
    elif choice == 3:
        params["top_n_tokens"] = 21
    else:
        params["stop"] = ["y"] * 17


def make_request(rng):
    """One random request: (route, path, body, spec) where spec says what to expect."""
    route = rng.choices(["chat", "completions", "generate", "generate_stream", "compat"],
                        weights=[40, 30, 12, 12, 6])[0]
    invalid = rng.random() < 0.04
    spec = {"route": route, "invalid": invalid}
    if route in ("chat", "completions"):
        body = {"model": MODEL_ID[0]} if rng.random() < 0.3 else {}
        stream = rng.random() < 0.6
        body["stream"] = stream
        n = rng.choices([1, 2, 3, 4], weights=[85, 8, 4, 3])[0]
        if n > 1:
            body["n"] = n
        max_tokens = rng.choices([rng.randint(1, 8), rng.randint(9, 32), rng.randint(33, 96)],
                                 weights=[65, 30, 5])[0]
        sampling_fields(rng, body)
        if route == "chat":
            path = "/v1/chat/completions"
            msgs = []
            if rng.random() < 0.5:
                msgs.append({"role": "system", "content": SYSTEM})
            msgs.append({"role": "user", "content": words(rng, 2, 20)})
            if rng.random() < 0.15:
                msgs.append({"role": "assistant", "content": words(rng, 1, 10)})
                msgs.append({"role": "user", "content": words(rng, 1, 10)})
            body["messages"] = msgs
            body[rng.choice(["max_tokens", "max_completion_tokens"])] = max_tokens
            if rng.random() < 0.25:
                body["logprobs"] = True
                if rng.random() < 0.7:
                    body["top_logprobs"] = rng.randint(0, 5)
            if rng.random() < 0.1:
                body["response_format"] = {"type": "json_object"}
                msgs[-1]["content"] += " Reply in JSON."
        else:
            path = "/v1/completions"
            body["prompt"] = words(rng, 1, 24) if rng.random() < 0.9 else [
                words(rng, 1, 10), words(rng, 1, 10)]
            body["max_tokens"] = max_tokens
            if rng.random() < 0.25:
                body["logprobs"] = rng.randint(0, 5)
            if rng.random() < 0.1 and "logprobs" not in body:
                body["echo"] = True  # (echo with logprobs is refused: no prompt logprobs)
        if stream and rng.random() < 0.3:
            body["stream_options"] = {"include_usage": True}
        if invalid:
            invalid_openai(rng, body, route)
        spec.update(stream=stream, n=n * (len(body["prompt"]) if isinstance(
            body.get("prompt"), list) else 1), expected=400)
        return route, path, body, spec
    params = {"max_new_tokens": rng.choices([rng.randint(1, 8), rng.randint(9, 48)],
                                            weights=[70, 30])[0]}
    if rng.random() < 0.5:
        params["do_sample"] = True
    sampling_fields(rng, params, tgi=True)
    if rng.random() < 0.5:
        params["details"] = True
    if rng.random() < 0.2:
        params["top_n_tokens"] = rng.randint(0, 5)
    if rng.random() < 0.1:
        params["return_full_text"] = True
    if invalid:
        invalid_tgi(rng, params)
    body = {"inputs": words(rng, 1, 24), "parameters": params}
    if route == "generate":
        path, stream = "/generate", False
    elif route == "generate_stream":
        path, stream = "/generate_stream", True
    else:
        path = "/"
        stream = rng.random() < 0.5
        body["stream"] = stream
    spec.update(stream=stream, n=1, expected=422)
    return route, path, body, spec


# ---------------------------------------------------------------------------------------------
# Response checks


def check_no_stop(text, body):
    stops = body.get("stop") or body.get("parameters", {}).get("stop") or []
    if isinstance(stops, str):
        stops = [stops]
    for s in stops:
        if s and s in text:
            raise Bad("stop_string_in_output", f"stop {s!r} in {text!r}")


def check_openai_json(route, body, spec, data):
    want_object = "chat.completion" if route == "chat" else "text_completion"
    if data.get("object") != want_object:
        raise Bad("bad_body", f"object {data.get('object')!r}")
    choices = data.get("choices")
    if not isinstance(choices, list) or len(choices) != spec["n"]:
        raise Bad("bad_body", f"{len(choices or [])} choices, wanted {spec['n']}")
    if sorted(c.get("index") for c in choices) != list(range(spec["n"])):
        raise Bad("bad_body", "choice indexes")
    usage = data.get("usage") or {}
    if not isinstance(usage.get("completion_tokens"), int):
        raise Bad("bad_body", "usage")
    for c in choices:
        if c.get("finish_reason") not in OPENAI_FINISH:
            raise Bad("bad_finish_reason", c.get("finish_reason"))
        if route == "chat":
            text = (c.get("message") or {}).get("content")
            if not isinstance(text, str):
                raise Bad("bad_body", "message.content")
            if body.get("logprobs") and not isinstance((c.get("logprobs") or {}).get("content"),
                                                       list):
                raise Bad("bad_logprobs", "chat logprobs.content missing")
            if (body.get("response_format") and c["finish_reason"] == "stop"
                    and not body.get("stop")):
                try:
                    json.loads(text)
                except ValueError:
                    raise Bad("json_object_not_json", text)
        else:
            text = c.get("text")
            if not isinstance(text, str):
                raise Bad("bad_body", "text")
            if "logprobs" in body and not isinstance((c.get("logprobs") or {}).get("tokens"),
                                                     list):
                raise Bad("bad_logprobs", "completion logprobs.tokens missing")
        if not body.get("echo"):
            check_no_stop(text, body)
    return usage["completion_tokens"]


def check_tgi_json(body, data):
    if not isinstance(data.get("generated_text"), str):
        raise Bad("bad_body", "generated_text")
    params = body["parameters"]
    if params.get("details"):
        d = data.get("details") or {}
        if d.get("finish_reason") not in TGI_FINISH:
            raise Bad("bad_finish_reason", d.get("finish_reason"))
        if not 0 <= d.get("generated_tokens", -1) <= params["max_new_tokens"]:
            raise Bad("bad_body", f"generated_tokens {d.get('generated_tokens')}")
        tokens = d["generated_tokens"]
    else:
        tokens = 0
    if not params.get("return_full_text"):
        check_no_stop(data["generated_text"], body)
    return tokens


class StreamCheck:
    """Follows one SSE stream event by event."""

    def __init__(self, route, body, spec):
        self.route, self.body, self.spec = route, body, spec
        self.done = False
        self.finished = {}
        self.texts = defaultdict(str)
        self.events = 0
        self.tokens = 0
        self.tgi_final = False
        self.usage_seen = False

    def event(self, payload):
        if self.done:
            raise Bad("data_after_done", payload[:200])
        if payload == "[DONE]":
            if self.route in ("chat", "completions"):
                self.done = True
                return
            raise Bad("bad_stream", "[DONE] on a TGI stream")
        try:
            data = json.loads(payload)
        except ValueError:
            raise Bad("bad_stream_json", payload[:200])
        if "error" in data:
            raise Bad("stream_error_event", payload[:300])
        self.events += 1
        if self.route in ("chat", "completions"):
            self.openai_chunk(data)
        else:
            self.tgi_event(data)

    def openai_chunk(self, data):
        want = "chat.completion.chunk" if self.route == "chat" else "text_completion"
        if data.get("object") != want:
            raise Bad("bad_chunk", f"object {data.get('object')!r}")
        choices = data.get("choices")
        if not isinstance(choices, list):
            raise Bad("bad_chunk", "choices")
        if not choices and data.get("usage"):
            self.usage_seen = True
            self.tokens = data["usage"].get("completion_tokens", 0)
        for c in choices:
            i = c.get("index")
            if not isinstance(i, int) or not 0 <= i < self.spec["n"]:
                raise Bad("bad_chunk", f"index {i}")
            if i in self.finished:
                raise Bad("chunk_after_finish", f"choice {i}")
            if self.route == "chat":
                piece = (c.get("delta") or {}).get("content") or ""
            else:
                piece = c.get("text")
                if not isinstance(piece, str):
                    raise Bad("bad_chunk", "text")
            self.texts[i] += piece
            fr = c.get("finish_reason")
            if fr is not None:
                if fr not in OPENAI_FINISH:
                    raise Bad("bad_finish_reason", fr)
                self.finished[i] = fr

    def tgi_event(self, data):
        if self.tgi_final:
            raise Bad("event_after_final", str(data)[:200])
        tok = data.get("token")
        if not isinstance(tok, dict) or not isinstance(tok.get("text"), str):
            raise Bad("bad_tgi_event", str(data)[:200])
        self.tokens += 1
        if data.get("generated_text") is not None:
            self.tgi_final = True
            if not self.body["parameters"].get("return_full_text"):
                check_no_stop(data["generated_text"], self.body)
            if self.body["parameters"].get("details"):
                d = data.get("details") or {}
                if d.get("finish_reason") not in TGI_FINISH:
                    raise Bad("bad_finish_reason", d.get("finish_reason"))

    def finish(self):
        if self.route in ("chat", "completions"):
            if not self.done:
                raise Bad("stream_without_done", f"{self.events} events")
            if sorted(self.finished) != list(range(self.spec["n"])):
                raise Bad("stream_missing_finish", f"finished {sorted(self.finished)}")
            if not self.body.get("echo"):
                for text in self.texts.values():
                    check_no_stop(text, self.body)
            if self.body.get("stream_options") and not self.usage_seen:
                raise Bad("stream_missing_usage", "include_usage asked, no usage chunk")
        elif not self.tgi_final:
            raise Bad("tgi_stream_without_final", f"{self.events} events")
        return self.tokens


async def read_sse(resp, check, chunk_limit):
    """Feeds the SSE events of `resp` to `check`; returns False if cut at `chunk_limit`."""
    buf = ""
    seen = 0
    async for text in resp.aiter_text():
        buf += text
        while "\n\n" in buf:
            block, buf = buf.split("\n\n", 1)
            for line in block.split("\n"):
                if line.startswith("data:"):
                    check.event(line[5:].strip())
                    seen += 1
                    if chunk_limit is not None and seen >= chunk_limit and not check.done:
                        return False
                elif line and not line.startswith(":") and not line.startswith("event:"):
                    raise Bad("bad_sse_line", line[:200])
    if buf.strip():
        raise Bad("bad_sse_tail", buf[:200])
    return True


# ---------------------------------------------------------------------------------------------
# One request


def at_least(body, tokens):
    """Raises the request's token limit to `tokens`: a request planned to be dropped must still
    be running when its time comes, whatever the server's speed, or how many requests the
    soak cancels would depend on how fast the server is. Stop strings and EOS may still end it
    first."""
    params = body.get("parameters", body)
    for key in ("max_tokens", "max_completion_tokens", "max_new_tokens"):
        if key in params:
            params[key] = max(params[key], tokens)


async def one_request(client, rng, stats):
    route, path, body, spec = make_request(rng)
    stats.requests += 1
    stats.by_route[route] += 1
    # Cancellation plan: drop at a random time, or (streams) after a few events.
    plan = None
    if not spec["invalid"] and rng.random() < 0.94:
        if spec["stream"] and rng.random() < 0.35:
            # After a few events, or after a few seconds waiting for them (a busy server).
            plan = ("events", rng.randint(1, 4), rng.uniform(1.0, 5.0))
        else:
            plan = ("time", rng.uniform(0.0, 0.3))
        at_least(body, 32 if plan[0] == "time" else 8)

    async def run():
        async with client.stream("POST", path, json=body, timeout=TIMEOUT_S) as resp:
            if spec["invalid"]:
                await resp.aread()
                if resp.status_code != spec["expected"]:
                    raise Bad(f"invalid_got_{resp.status_code}", resp.text[:300])
                try:
                    err = json.loads(resp.text)
                except ValueError:
                    raise Bad("error_body_not_json", resp.text[:300])
                if not isinstance(err, dict) or not ("error" in err):
                    raise Bad("bad_error_body", resp.text[:300])
                return "invalid_ok", 0
            if resp.status_code != 200:
                await resp.aread()
                raise Bad(f"status_{resp.status_code}", resp.text[:300])
            ctype = resp.headers.get("content-type", "")
            if spec["stream"]:
                if not ctype.startswith("text/event-stream"):
                    raise Bad("bad_content_type", ctype)
                check = StreamCheck(route, body, spec)
                limit = plan[1] if plan and plan[0] == "events" else None
                complete = await read_sse(resp, check, limit)
                stats.streamed_events += check.events
                if not complete:
                    return "cancelled", 0
                return "ok", check.finish()
            await resp.aread()
            if not ctype.startswith("application/json"):
                raise Bad("bad_content_type", ctype)
            try:
                data = json.loads(resp.text)
            except ValueError:
                raise Bad("bad_json", resp.text[:300])
            if route in ("chat", "completions"):
                return "ok", check_openai_json(route, body, spec, data)
            return "ok", check_tgi_json(body, data)

    try:
        if plan:
            try:
                outcome, tokens = await asyncio.wait_for(run(), plan[-1])
            except asyncio.TimeoutError:
                outcome, tokens = "cancelled", 0
        else:
            outcome, tokens = await asyncio.wait_for(run(), TIMEOUT_S)
    except asyncio.TimeoutError:
        stats.error("hang", f"{route} {json.dumps(body)[:300]}")
        return
    except Bad as e:
        stats.error(e.kind, f"{route} {e.detail} | body {json.dumps(body)[:300]}")
        return
    except httpx.HTTPError as e:
        stats.error(f"transport_{type(e).__name__}", f"{route} {e!r}")
        return
    except Exception as e:  # a response shape the checks did not foresee
        stats.error(f"unexpected_{type(e).__name__}", f"{route} {e!r} | body "
                    f"{json.dumps(body)[:300]}")
        return
    if outcome == "cancelled":
        stats.cancelled += 1
    elif outcome == "invalid_ok":
        stats.invalid_ok += 1
    else:
        stats.completed += 1
        stats.completion_tokens += tokens


class Pacer:
    """Spaces request starts `1 / rate` seconds apart over all workers (no pacing at rate 0)."""

    def __init__(self, rate):
        self.gap = 1.0 / rate if rate > 0 else 0.0
        self.next = time.monotonic()

    async def wait(self):
        now = time.monotonic()
        slot = max(now, self.next)
        self.next = slot + self.gap
        if slot > now:
            await asyncio.sleep(slot - now)


async def worker(client, seed, deadline, stats, pacer):
    rng = random.Random(seed)
    while True:
        await pacer.wait()
        if time.monotonic() >= deadline:
            return
        await one_request(client, rng, stats)


# ---------------------------------------------------------------------------------------------
# Server observation


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def sample_rss(pid, start, deadline, interval, series):
    while time.monotonic() < deadline:
        try:
            series.append((round(time.monotonic() - start, 1), rss_kib(pid)))
        except (OSError, RuntimeError):
            return
        await asyncio.sleep(interval)


METRIC_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        m = METRIC_RE.match(line.strip())
        if m and not m.group(2):
            out[m.group(1)] = float(m.group(3))
    return out


IDLE_WANTED = "running = waiting = 0, KV usage 0, free blocks = all blocks, idle check passed"


def idle_ok(m):
    return (m.get("kestrel:num_requests_running") == 0
            and m.get("kestrel:num_requests_waiting") == 0
            and m.get("kestrel:kv_cache_usage_perc") == 0
            and m.get("kestrel:kv_num_blocks", -1) > 0
            and m.get("kestrel:kv_free_blocks") == m.get("kestrel:kv_num_blocks")
            and m.get("kestrel:kv_idle_checks_total", 0) > 0
            and m.get("kestrel:kv_idle_check_failures_total", 0) == 0)


async def wait_idle(client, timeout):
    """Polls /metrics until the engine is idle with every block back; the last metrics seen."""
    end = time.monotonic() + timeout
    m = {}
    while time.monotonic() < end:
        try:
            r = await client.get("/metrics", timeout=10)
            m = parse_metrics(r.text)
            if idle_ok(m):
                return True, m
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.5)
    return False, m


# ---------------------------------------------------------------------------------------------


def rss_summary(series, warmup_end):
    if not series:
        return {"samples": 0}
    values = [kib for _, kib in series]
    after = [kib for t, kib in series if t >= warmup_end]
    before = [kib for t, kib in series if t <= warmup_end]
    warm = before[-1] if before else values[0]
    peak_after = max(after) if after else warm
    return {
        "samples": len(values),
        "first_kib": values[0],
        "warmup_end_s": round(warmup_end, 1),
        "at_warmup_end_kib": warm,
        "max_after_warmup_kib": peak_after,
        "min_after_warmup_kib": min(after) if after else warm,
        "final_kib": values[-1],
        "max_kib": max(values),
        "mean_after_warmup_kib": round(statistics.mean(after)) if after else warm,
        "growth_after_warmup_pct": round(100.0 * (peak_after - warm) / warm, 2),
    }


async def main_async(args):
    stats = Stats()
    start = time.monotonic()
    duration = args.minutes * 60.0
    deadline = start + duration
    interval = args.rss_interval or max(0.5, min(2.0, duration / 120.0))
    series = []
    limits = httpx.Limits(max_connections=args.concurrency + 8, max_keepalive_connections=
                          args.concurrency + 8)
    async with httpx.AsyncClient(base_url=args.base_url, limits=limits,
                                 headers={"Authorization": f"Bearer {args.api_key}"}
                                 if args.api_key else None) as client:
        MODEL_ID[0] = (await client.get("/v1/models", timeout=30)).json()["data"][0]["id"]
        sampler = asyncio.create_task(sample_rss(args.pid, start, deadline + 0.01, interval,
                                                 series))
        progress = asyncio.create_task(report_progress(stats, start, deadline))
        pacer = Pacer(args.rate)
        workers = [asyncio.create_task(worker(client, args.seed * 1000 + i, deadline, stats,
                                              pacer))
                   for i in range(args.concurrency)]
        await asyncio.gather(*workers)
        await sampler
        progress.cancel()
        drained_s = round(time.monotonic() - deadline, 1)
        idle, metrics = await wait_idle(client, args.idle_timeout)
        health = None
        try:
            health = (await client.get("/health", timeout=10)).status_code
        except httpx.HTTPError as e:
            health = repr(e)

    warmup_end = args.warmup_fraction * duration
    rss = rss_summary(series, warmup_end)
    failures = []
    if stats.errors:
        failures.append(f"unexpected errors: {dict(stats.errors)}")
    if stats.cancelled < args.min_cancellations:
        failures.append(f"only {stats.cancelled} cancellations (< {args.min_cancellations})")
    if not idle:
        failures.append(f"engine not idle at the end ({IDLE_WANTED}): "
                        + json.dumps({k: v for k, v in metrics.items()
                                      if k.startswith("kestrel:kv_")
                                      or k.startswith("kestrel:num_requests")}))
    if health != 200:
        failures.append(f"/health answered {health}")
    if rss.get("samples", 0) < 3:
        failures.append("too few RSS samples (did the server die?)")
    elif rss["max_after_warmup_kib"] > rss["at_warmup_end_kib"] * (1 + args.rss_tolerance):
        failures.append(
            f"RSS grew {rss['growth_after_warmup_pct']}% after the warm-up "
            f"(limit {100 * args.rss_tolerance:.0f}%)")
    if args.server_log:
        with open(args.server_log, errors="replace") as f:
            log = f.read()
        if "panicked" in log:
            failures.append("the server log reports a panic")
    result = {
        "duration_s": round(duration, 1),
        "concurrency": args.concurrency,
        "rate": args.rate,
        "requests": stats.requests,
        "completed": stats.completed,
        "cancelled": stats.cancelled,
        "invalid_as_expected": stats.invalid_ok,
        "errors": dict(stats.errors),
        "error_samples": stats.error_samples,
        "by_route": dict(stats.by_route),
        "completion_tokens": stats.completion_tokens,
        "streamed_events": stats.streamed_events,
        "drain_s": drained_s,
        "final_metrics": {k: v for k, v in metrics.items() if k.startswith("kestrel:kv_")
                          or k.startswith("kestrel:num_requests")
                          or k in ("kestrel:generation_tokens_total",
                                   "kestrel:prompt_tokens_total",
                                   "kestrel:num_preemptions_total")},
        "rss": rss,
        "rss_series": series,
        "failures": failures,
        "passed": not failures,
    }
    with open(args.result, "w") as f:
        json.dump(result, f, indent=1)
    print_summary(result)
    return 0 if not failures else 1


async def report_progress(stats, start, deadline):
    shown = 0
    while True:
        await asyncio.sleep(min(60.0, max(10.0, (deadline - start) / 10)))
        t = time.monotonic() - start
        print(f"[{t:6.0f}s] requests {stats.requests} completed {stats.completed} "
              f"cancelled {stats.cancelled} invalid-ok {stats.invalid_ok} "
              f"errors {dict(stats.errors) or 0}", flush=True)
        for e in stats.error_samples[shown:20]:
            print(f"  error {e['kind']}: {e['detail']}", flush=True)
        shown = max(shown, min(20, len(stats.error_samples)))


def print_summary(r):
    rss = r["rss"]
    print("soak summary")
    print(f"  duration {r['duration_s']} s, {r['concurrency']} concurrent clients, "
          f"{r['rate']} request starts/s")
    print(f"  requests {r['requests']}: completed {r['completed']}, cancelled {r['cancelled']},"
          f" invalid (expected 4xx) {r['invalid_as_expected']}")
    print(f"  by route {r['by_route']}")
    print(f"  errors {r['errors'] or 'none'}")
    for s in r["error_samples"][:10]:
        print(f"    {s['kind']}: {s['detail']}")
    print(f"  completion tokens (finished requests) {r['completion_tokens']}, "
          f"stream events {r['streamed_events']}")
    print(f"  final metrics {r['final_metrics']}")
    if rss.get("samples"):
        print(f"  RSS samples {rss['samples']}: first {rss['first_kib']} KiB, at warm-up end "
              f"({rss['warmup_end_s']} s) {rss['at_warmup_end_kib']} KiB, max after "
              f"{rss['max_after_warmup_kib']} KiB ({rss['growth_after_warmup_pct']:+}%), "
              f"final {rss['final_kib']} KiB")
    print("  verdict: " + ("PASS" if r["passed"] else "FAIL: " + "; ".join(r["failures"])))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--pid", type=int, required=True, help="the server's process id (RSS)")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=8.0,
                    help="request starts per second over all clients (0: as fast as they go)")
    ap.add_argument("--result", required=True, help="JSON result file")
    ap.add_argument("--server-log")
    ap.add_argument("--api-key")
    ap.add_argument("--min-cancellations", type=int, default=-1,
                    help="default: 10000 per 30 minutes, prorated")
    ap.add_argument("--rss-tolerance", type=float, default=0.05)
    ap.add_argument("--warmup-fraction", type=float, default=0.2,
                    help="share of the run before the RSS reference point")
    ap.add_argument("--rss-interval", type=float, default=0.0)
    ap.add_argument("--idle-timeout", type=float, default=120.0)
    args = ap.parse_args()
    if args.min_cancellations < 0:
        args.min_cancellations = math.ceil(10_000 * args.minutes / 30.0)
    sys.exit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
