// Kestrel's web playground: streaming chat over /v1/chat/completions, the models of /v1/models
// (LoRA adapters included), a live panel from /metrics, and an API key form after a 401.
// No dependencies and no network but this server; text from the model is escaped before any
// markup is added (see renderMarkdown).
"use strict";

(function () {
  const KEY_STORAGE = "kestrel.apiKey";
  const METRICS_INTERVAL_MS = 2000;

  // ---------------------------------------------------------------------------------------
  // Markdown: a small, safe subset. Every piece of source text goes through escapeHtml before
  // it is wrapped in tags this code writes itself, so model output can never become markup.
  // ---------------------------------------------------------------------------------------

  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
  }

  // Inline markup of one line of escaped text: `code`, [text](http(s) URL), **bold**, *italic*.
  // Code spans and links are set aside first so that emphasis never reaches into them.
  function renderInline(escaped) {
    const stash = [];
    const keep = (html) => {
      stash.push(html);
      return "\u0000" + (stash.length - 1) + "\u0000";
    };
    let s = escaped.replace(/`([^`]+)`/g, (_, code) => keep("<code>" + code + "</code>"));
    s = s.replace(/\[([^\]]+)\]\((https?:\/\/[^\s)"]+)\)/g, (_, label, url) =>
      keep('<a href="' + url + '" target="_blank" rel="noopener noreferrer">' + label + "</a>"));
    s = s.replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>");
    s = s.replace(/__([^_]+)__/g, "<strong>$1</strong>");
    s = s.replace(/(^|[^*\w])\*([^*\s][^*]*)\*(?![*\w])/g, "$1<em>$2</em>");
    s = s.replace(/(^|[^_\w])_([^_\s][^_]*)_(?![_\w])/g, "$1<em>$2</em>");
    return s.replace(/\u0000(\d+)\u0000/g, (_, i) => stash[Number(i)]);
  }

  const inline = (line) => renderInline(escapeHtml(line));

  // Collects the consecutive lines from `i` that match `re`; returns [captured texts, next i].
  function collect(lines, i, re, group) {
    const items = [];
    let m;
    while (i < lines.length && (m = lines[i].match(re))) {
      items.push(m[group]);
      i++;
    }
    return [items, i];
  }

  // Renders markdown source to HTML: fenced code blocks (an unclosed fence, as while an
  // answer streams, runs to the end), headings, rules, quotes, lists and paragraphs.
  function renderMarkdown(source) {
    const lines = String(source).replace(/\u0000/g, "").replace(/\r\n?/g, "\n").split("\n");
    const out = [];
    let para = [];
    const flush = () => {
      if (para.length) out.push("<p>" + para.map(inline).join("<br>") + "</p>");
      para = [];
    };
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      const fence = line.match(/^\s*(`{3,}|~{3,})\s*([\w+#.-]*)/);
      if (fence) {
        flush();
        const body = [];
        i++;
        while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
        i++;
        const lang = fence[2] ? ' class="language-' + escapeHtml(fence[2]) + '"' : "";
        out.push("<pre><code" + lang + ">" + escapeHtml(body.join("\n")) + "</code></pre>");
        continue;
      }
      const heading = line.match(/^(#{1,6})\s+(.*)$/);
      if (heading) {
        flush();
        const n = heading[1].length;
        out.push("<h" + n + ">" + inline(heading[2]) + "</h" + n + ">");
        i++;
        continue;
      }
      if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
        flush();
        out.push("<hr>");
        i++;
        continue;
      }
      let items;
      if (/^\s*>/.test(line)) {
        flush();
        [items, i] = collect(lines, i, /^\s*>\s?(.*)$/, 1);
        out.push("<blockquote>" + items.map(inline).join("<br>") + "</blockquote>");
        continue;
      }
      if (/^\s*[-*+]\s+/.test(line)) {
        flush();
        [items, i] = collect(lines, i, /^\s*[-*+]\s+(.*)$/, 1);
        out.push("<ul>" + items.map((t) => "<li>" + inline(t) + "</li>").join("") + "</ul>");
        continue;
      }
      const ordered = line.match(/^\s*(\d{1,9})[.)]\s+/);
      if (ordered) {
        flush();
        [items, i] = collect(lines, i, /^\s*\d{1,9}[.)]\s+(.*)$/, 1);
        const start = Number(ordered[1]) === 1 ? "" : ' start="' + Number(ordered[1]) + '"';
        out.push("<ol" + start + ">" + items.map((t) => "<li>" + inline(t) + "</li>").join("") + "</ol>");
        continue;
      }
      if (line.trim() === "") flush();
      else para.push(line);
      i++;
    }
    flush();
    return out.join("");
  }

  window.KestrelMarkdown = Object.freeze({ render: renderMarkdown, escapeHtml: escapeHtml });

  // ---------------------------------------------------------------------------------------
  // Page state and small helpers.
  // ---------------------------------------------------------------------------------------

  const $ = (id) => document.getElementById(id);
  const state = {
    key: readKey(),
    history: [], // {role, content} of the finished turns
    controller: null, // the AbortController of the answer in flight
    afterKey: null, // what to retry once a key is entered
    lastGen: null, // {value, at} of kestrel:generation_tokens_total
  };

  function readKey() {
    try {
      return sessionStorage.getItem(KEY_STORAGE) || "";
    } catch (_) {
      return "";
    }
  }

  function storeKey(key) {
    try {
      sessionStorage.setItem(KEY_STORAGE, key);
    } catch (_) {
      // Storage refused (private mode): the key lives in this page only.
    }
  }

  function headers(json) {
    const h = {};
    if (json) h["Content-Type"] = "application/json";
    if (state.key) h["Authorization"] = "Bearer " + state.key;
    return h;
  }

  function setStatus(text, isError) {
    const el = $("status");
    el.textContent = text;
    el.classList.toggle("error", Boolean(isError));
  }

  // The error message of a failed response: OpenAI's {"error": {"message"}}, TGI's
  // {"error": "..."} or the start of the text.
  async function errorText(resp) {
    const text = await resp.text().catch(() => "");
    try {
      const body = JSON.parse(text);
      if (body && body.error) return typeof body.error === "string" ? body.error : body.error.message;
    } catch (_) {
      // not JSON
    }
    return text.slice(0, 300);
  }

  function el(tag, className, testid) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (testid) node.dataset.testid = testid;
    return node;
  }

  // ---------------------------------------------------------------------------------------
  // API key form: shown after a 401; the key is kept in sessionStorage (this tab) only.
  // ---------------------------------------------------------------------------------------

  function askForKey(retry) {
    state.afterKey = retry;
    const refused = Boolean(state.key);
    setStatus(refused ? "the API key was refused; enter another" : "this server needs an API key", true);
    $("key-form").hidden = false;
    $("key-input").focus();
  }

  function onKeySubmit(event) {
    event.preventDefault();
    const key = $("key-input").value.trim();
    if (!key) return;
    state.key = key;
    storeKey(key);
    $("key-input").value = "";
    $("key-form").hidden = true;
    setStatus("");
    const retry = state.afterKey;
    state.afterKey = null;
    if (retry) retry();
  }

  // ---------------------------------------------------------------------------------------
  // Models.
  // ---------------------------------------------------------------------------------------

  // A model's entry in the select: LoRA adapters name their model, and on a server of several
  // models each says whether it is in memory (the first request for an unloaded one loads it).
  function modelLabel(card) {
    let label = card.parent ? card.id + " (LoRA on " + card.parent + ")" : card.id;
    if (card.status && !card.parent) label += " [" + card.status.value + "]";
    return label;
  }

  async function loadModels() {
    let resp;
    try {
      resp = await fetch("/v1/models", { headers: headers(false) });
    } catch (e) {
      setStatus("cannot reach the server: " + e.message, true);
      return;
    }
    if (resp.status === 401) return askForKey(loadModels);
    if (!resp.ok) {
      setStatus("/v1/models: " + resp.status + " " + (await errorText(resp)), true);
      if (resp.status === 503) setTimeout(loadModels, 2000);
      return;
    }
    const body = await resp.json();
    const select = $("model");
    const previous = select.value;
    select.replaceChildren();
    for (const card of body.data || []) {
      const option = document.createElement("option");
      option.value = card.id;
      option.textContent = modelLabel(card);
      select.append(option);
    }
    if (previous && [...select.options].some((o) => o.value === previous)) select.value = previous;
    setStatus("ready");
  }

  // ---------------------------------------------------------------------------------------
  // Chat.
  // ---------------------------------------------------------------------------------------

  function numberField(id, parse) {
    const raw = $(id).value.trim();
    if (raw === "") return undefined;
    const n = parse(raw);
    return Number.isFinite(n) ? n : undefined;
  }

  function requestBody(messages) {
    const body = {
      messages: messages,
      stream: true,
      stream_options: { include_usage: true },
    };
    const model = $("model").value;
    if (model) body.model = model;
    const fields = {
      temperature: numberField("temperature", parseFloat),
      top_p: numberField("top-p", parseFloat),
      max_tokens: numberField("max-tokens", (s) => parseInt(s, 10)),
      seed: numberField("seed", (s) => parseInt(s, 10)),
    };
    for (const [name, value] of Object.entries(fields)) if (value !== undefined) body[name] = value;
    if ($("ignore-eos").checked) body.ignore_eos = true;
    return body;
  }

  function conversation(userText) {
    const messages = [];
    const system = $("system").value.trim();
    if (system) messages.push({ role: "system", content: system });
    return messages.concat(state.history, [{ role: "user", content: userText }]);
  }

  function setBusy(busy) {
    $("send").disabled = busy;
    $("stop").disabled = !busy;
  }

  function addUserMessage(text) {
    const node = el("div", "message user", "user-message");
    node.textContent = text;
    $("messages").append(node);
  }

  // An assistant message: its rendered text, a stats line and a copy button.
  function addAssistantMessage() {
    const node = el("div", "message assistant");
    const body = el("div", "body", "assistant-message");
    const stats = el("div", "stats");
    const field = (label, testid) => {
      const wrap = el("span", "stat");
      const value = el("span", "value", testid);
      value.textContent = "–";
      wrap.append(label + " ", value);
      stats.append(wrap);
      return value;
    };
    const view = {
      text: "",
      body: body,
      ttft: field("TTFT", "ttft"),
      tps: field("tok/s", "tokens-per-second"),
      tokens: field("tokens", "token-count"),
      cached: field("cached prompt tokens", "cached-tokens"),
      end: field("end", "finish-reason"),
      pending: false,
    };
    const copy = el("button", "copy", "copy");
    copy.type = "button";
    copy.textContent = "Copy";
    copy.addEventListener("click", () => copyText(view.text, copy));
    stats.append(copy);
    node.append(body, stats);
    $("messages").append(node);
    return view;
  }

  // Re-renders at most once per frame while tokens stream in.
  function scheduleRender(view) {
    if (view.pending) return;
    view.pending = true;
    requestAnimationFrame(() => {
      view.pending = false;
      view.body.innerHTML = renderMarkdown(view.text);
      const box = $("messages");
      box.scrollTop = box.scrollHeight;
    });
  }

  function showError(view, message) {
    const note = el("div", "error", "message-error");
    note.textContent = message;
    view.body.after(note);
  }

  async function copyText(text, button) {
    try {
      await navigator.clipboard.writeText(text);
    } catch (_) {
      // No async clipboard (plain http on another host): copy through a selected textarea.
      const area = document.createElement("textarea");
      area.value = text;
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    button.textContent = "Copied";
    setTimeout(() => (button.textContent = "Copy"), 1200);
  }

  // Timings and counts of one answer. Tokens/s is the decode rate: tokens after the first over
  // the time after the first; the count is usage.completion_tokens once the usage chunk came,
  // before that (or after a stop) the number of content chunks, marked "~".
  function updateStats(view, run) {
    if (run.first !== null) view.ttft.textContent = ((run.first - run.start) / 1000).toFixed(3) + " s";
    const exact = run.usage !== null;
    const n = exact ? run.usage.completion_tokens : run.chunks;
    view.tokens.textContent = (exact ? "" : "~") + n;
    const span = (run.last - run.first) / 1000;
    if (run.first !== null && n >= 2 && span > 0) view.tps.textContent = ((n - 1) / span).toFixed(1);
    if (exact) {
      const details = run.usage.prompt_tokens_details;
      const cached = details && Number.isFinite(details.cached_tokens) ? details.cached_tokens : null;
      view.cached.textContent = cached === null ? "n/a" : cached + " / " + run.usage.prompt_tokens;
    }
    if (run.finish) view.end.textContent = run.finish;
  }

  // Handles one SSE event; returns false once the stream is over.
  function onEvent(event, view, run) {
    const data = event
      .split("\n")
      .filter((l) => l.startsWith("data:"))
      .map((l) => l.slice(5).replace(/^ /, ""))
      .join("\n");
    if (data === "") return true;
    if (data === "[DONE]") return false;
    let chunk;
    try {
      chunk = JSON.parse(data);
    } catch (_) {
      return true;
    }
    const now = performance.now();
    if (chunk.error) {
      showError(view, chunk.error.message || String(chunk.error));
      return true;
    }
    const choice = chunk.choices && chunk.choices[0];
    if (choice) {
      const content = choice.delta && choice.delta.content;
      if (content) {
        if (run.first === null) run.first = now;
        run.chunks++;
        view.text += content;
        scheduleRender(view);
      }
      if (choice.finish_reason) run.finish = choice.finish_reason;
      run.last = now;
    }
    if (chunk.usage) run.usage = chunk.usage;
    updateStats(view, run);
    return true;
  }

  async function readStream(resp, view, run, signal) {
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += decoder.decode(value, { stream: true }).replace(/\r/g, "");
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          if (!onEvent(event, view, run)) return;
        }
      }
    } catch (e) {
      if (!signal.aborted) showError(view, "the stream broke: " + e.message);
    }
  }

  async function send() {
    if (state.controller) return;
    const text = $("prompt").value;
    if (text.trim() === "") return;
    const messages = conversation(text);
    const controller = new AbortController();
    state.controller = controller;
    setBusy(true);
    setStatus("generating…");
    const run = { start: performance.now(), first: null, last: null, chunks: 0, usage: null, finish: null };
    let resp;
    try {
      resp = await fetch("/v1/chat/completions", {
        method: "POST",
        headers: headers(true),
        body: JSON.stringify(requestBody(messages)),
        signal: controller.signal,
      });
    } catch (e) {
      done(controller, controller.signal.aborted ? "stopped" : "request failed: " + e.message);
      return;
    }
    if (resp.status === 401) {
      done(controller, "");
      askForKey(send);
      return;
    }
    if (!resp.ok) {
      done(controller, resp.status + ": " + (await errorText(resp)), true);
      return;
    }
    $("prompt").value = "";
    addUserMessage(text);
    const view = addAssistantMessage();
    await readStream(resp, view, run, controller.signal);
    if (controller.signal.aborted && !run.finish) run.finish = "stopped";
    updateStats(view, run);
    view.body.innerHTML = renderMarkdown(view.text);
    if (state.controller === controller) {
      state.history.push({ role: "user", content: text }, { role: "assistant", content: view.text });
    }
    // The answer may have loaded its model (and unloaded another): show the new states.
    await loadModels();
    done(controller, run.finish === "stopped" ? "stopped" : "ready");
  }

  function done(controller, message, isError) {
    if (state.controller !== controller) return;
    state.controller = null;
    setBusy(false);
    setStatus(message, isError);
  }

  function stop() {
    if (state.controller) state.controller.abort();
  }

  function reset() {
    const inFlight = state.controller;
    state.controller = null;
    if (inFlight) inFlight.abort();
    state.history = [];
    $("messages").replaceChildren();
    setBusy(false);
    setStatus("conversation cleared");
  }

  // ---------------------------------------------------------------------------------------
  // Live panel: /metrics every 2 s. A fleet gateway exports no engine gauges, so running,
  // waiting and KV usage then come from its /health (the workers' heartbeats) and the output
  // rate row is hidden; without /metrics the panel is hidden.
  // ---------------------------------------------------------------------------------------

  // Sums every series of each metric name (labels ignored).
  function parsePrometheus(text) {
    const sums = new Map();
    for (const line of text.split("\n")) {
      const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/);
      if (!m) continue;
      const v = Number(m[3]);
      if (Number.isFinite(v)) sums.set(m[1], (sums.get(m[1]) || 0) + v);
    }
    return sums;
  }

  async function fetchHealth() {
    try {
      const resp = await fetch("/health", { headers: headers(false), cache: "no-store" });
      return await resp.json();
    } catch (_) {
      return null;
    }
  }

  async function pollMetrics() {
    if (document.hidden) return;
    let text;
    try {
      const resp = await fetch("/metrics", { headers: headers(false), cache: "no-store" });
      if (!resp.ok) throw new Error(String(resp.status));
      text = await resp.text();
    } catch (_) {
      $("metrics-panel").hidden = true;
      return;
    }
    const m = parsePrometheus(text);
    let running = m.get("kestrel:num_requests_running");
    let waiting = m.get("kestrel:num_requests_waiting");
    let kv = m.get("kestrel:kv_cache_usage_perc");
    const engine = running !== undefined;
    if (!engine) {
      const health = await fetchHealth();
      if (health) {
        running = health.running;
        waiting = health.waiting;
        kv = health.kv_cache_usage;
      }
    }
    const show = (id, v, fmt) => ($(id).textContent = Number.isFinite(v) ? fmt(v) : "–");
    show("m-running", running, String);
    show("m-waiting", waiting, String);
    show("m-kv", kv, (v) => (v * 100).toFixed(1) + " %");
    // The counter appears with the first generated token; an engine without it has made none.
    const gen = engine ? m.get("kestrel:generation_tokens_total") || 0 : undefined;
    $("m-tps").hidden = $("m-tps-label").hidden = gen === undefined;
    const now = performance.now();
    if (gen !== undefined && state.lastGen) {
      const dt = (now - state.lastGen.at) / 1000;
      show("m-tps", dt > 0 ? Math.max(0, gen - state.lastGen.value) / dt : NaN, (v) => v.toFixed(1));
    }
    state.lastGen = gen === undefined ? null : { value: gen, at: now };
    $("metrics-panel").hidden = false;
  }

  // ---------------------------------------------------------------------------------------
  // Wiring.
  // ---------------------------------------------------------------------------------------

  function init() {
    $("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      send();
    });
    $("prompt").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        send();
      }
    });
    $("stop").addEventListener("click", stop);
    $("reset").addEventListener("click", reset);
    $("key-form").addEventListener("submit", onKeySubmit);
    setBusy(false);
    loadModels();
    pollMetrics();
    setInterval(pollMetrics, METRICS_INTERVAL_MS);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
