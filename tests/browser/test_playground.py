"""The web playground (GET /) in a real headless Chromium, against real `kestrel serve`s.

Usage: test_playground.py URL KEYED_URL KEY LORA GATEWAY_URL
  URL          a server without an API key, serving a LoRA adapter named LORA
  KEYED_URL    a server started with --api-key KEY
  GATEWAY_URL  a fleet gateway with one live worker
Environment: KESTREL_PLAYGROUND_SCREENSHOT=PATH saves a screenshot of the page after two real
answers; CHROMIUM (default /usr/bin/chromium), CHROMEDRIVER (default /usr/bin/chromedriver).

Checks: the page loads without violating its own Content-Security-Policy; the markdown renderer
escapes HTML and renders code blocks; a streamed answer arrives in several renders with TTFT,
tokens/s, token count and cached prompt tokens filled (and a second turn hits the prefix cache);
Stop aborts a long ignore_eos answer and the server cancels it (the engine counts an abort and
running requests and KV usage return to 0, on /metrics and in the page's panel); on a keyed
server the page asks for the key, refuses a wrong one, keeps the right one in sessionStorage
only and then chats; the model menu labels the LoRA adapter with its base model and choosing it
sends requests answered by the adapter; on the gateway the page streams an answer and its live
panel shows the gateway's /health (the workers' heartbeats) with the output rate row hidden.
"""

import json
import os
import re
import sys
import time
import unittest
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

URL = KEYED_URL = KEY = LORA = GATEWAY_URL = ""
TIMEOUT = 120


def testid(name):
    return (By.CSS_SELECTOR, f'[data-testid="{name}"]')


def new_driver():
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1180,760",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(service=service, options=options)


def metrics(base):
    """Sums of every series per metric name, and the labelled series, from /metrics."""
    text = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
    sums, series = {}, {}
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m:
            continue
        value = float(m.group(3))
        sums[m.group(1)] = sums.get(m.group(1), 0.0) + value
        series[m.group(1) + (m.group(2) or "")] = value
    return sums, series


def aborted_total(base):
    _, series = metrics(base)
    return series.get('kestrel:request_success_total{finished_reason="abort"}', 0.0)


def number(text):
    m = re.search(r"[-+]?\d+(\.\d+)?", text)
    assert m, f"no number in {text!r}"
    return float(m.group(0))


class Page:
    """Helpers over one driver on one server."""

    def __init__(self, driver, base):
        self.d = driver
        self.base = base

    def open(self):
        self.d.get(self.base + "/")
        WebDriverWait(self.d, 30).until(lambda d: d.execute_script("return !!window.KestrelMarkdown"))

    def find(self, name):
        return self.d.find_element(*testid(name))

    def find_all(self, name):
        return self.d.find_elements(*testid(name))

    def set_value(self, name, value):
        el = self.find(name)
        el.clear()
        if value != "":
            el.send_keys(str(value))

    def wait(self, what, timeout=TIMEOUT):
        return WebDriverWait(self.d, timeout, poll_frequency=0.05).until(lambda _: what())

    def wait_for_models(self):
        self.wait(lambda: len(self.d.find_elements(By.CSS_SELECTOR, "#model option")) > 0, 60)

    def watch_renders(self):
        """Records the length of the newest answer's text at every change of the message list."""
        self.d.execute_script(
            """
            window.__renders = [];
            new MutationObserver(() => {
              const all = document.querySelectorAll('[data-testid="assistant-message"]');
              if (all.length) window.__renders.push(all[all.length - 1].textContent.length);
            }).observe(document.getElementById('messages'),
                       {childList: true, subtree: true, characterData: true});
            """
        )

    def renders(self):
        return self.d.execute_script("return window.__renders")

    def ask(self, text):
        self.set_value("prompt-input", text)
        self.find("send").click()

    def answers(self):
        return self.find_all("assistant-message")

    def wait_answer_done(self, count, timeout=TIMEOUT):
        self.wait(lambda: len(self.answers()) >= count and self.find("send").is_enabled(), timeout)

    def stat(self, name, index=-1):
        return self.find_all(name)[index].text

    def spy_on_chat(self):
        """Records each chat request's `model` and, once it ends, the text of its response."""
        self.d.execute_script(
            """
            window.__chat = [];
            const real = window.fetch;
            window.fetch = async (url, init) => {
              const resp = await real(url, init);
              if (String(url).endsWith('/v1/chat/completions')) {
                const entry = {model: JSON.parse(init.body).model, status: resp.status, text: null};
                window.__chat.push(entry);
                resp.clone().text().then((t) => { entry.text = t; });
              }
              return resp;
            };
            """
        )

    def chat_requests(self):
        """The spied requests, after every response has been read to its end."""
        self.wait(lambda: self.d.execute_script(
            "return window.__chat.length > 0 && window.__chat.every((e) => e.text !== null)"), 30)
        return self.d.execute_script("return window.__chat")

    def csp_violations(self):
        logs = self.d.get_log("browser")
        return [e["message"] for e in logs if "Content Security Policy" in e["message"]]


class Playground(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.driver = new_driver()

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()

    def page(self, base):
        page = Page(self.driver, base)
        page.open()
        return page

    def test_1_page_and_markdown(self):
        p = self.page(URL)
        self.assertEqual(self.driver.title, "Kestrel playground")
        for name in ("prompt-input", "send", "stop", "reset", "system-prompt", "param-max-tokens"):
            self.assertTrue(p.find(name).is_displayed(), name)
        self.assertFalse(p.find("stop").is_enabled(), "stop is disabled while idle")
        self.assertFalse(p.find("api-key-form").is_displayed(), "no key form without a key")
        p.wait_for_models()
        served = json.load(urllib.request.urlopen(f"{URL}/v1/models", timeout=10))
        options = [o.get_attribute("value") for o in self.driver.find_elements(By.CSS_SELECTOR, "#model option")]
        self.assertEqual(options, [m["id"] for m in served["data"]])
        render = lambda s: self.driver.execute_script("return window.KestrelMarkdown.render(arguments[0])", s)
        hostile = '<img src=x onerror="alert(1)"> <script>alert(2)</script>'
        html = render(hostile)
        self.assertNotIn("<img", html)
        self.assertNotIn("<script", html)
        self.assertIn("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;", html)
        html = render("Use `a<b` and **bold**:\n\n```rust\nfn main() { println!(\"<hi>\"); }\n```\n- one\n- two")
        self.assertIn("<code>a&lt;b</code>", html)
        self.assertIn("<strong>bold</strong>", html)
        self.assertIn('<pre><code class="language-rust">fn main() { println!(&quot;&lt;hi&gt;&quot;); }</code></pre>', html)
        self.assertIn("<ul><li>one</li><li>two</li></ul>", html)
        self.assertNotIn("<a", render("[x](javascript:alert(1))"))
        self.assertIn('<a href="https://example.org/a?b=1&amp;c=2" target="_blank" rel="noopener noreferrer">x</a>',
                      render("[x](https://example.org/a?b=1&c=2)"))
        self.assertIn("<code>**not bold**</code>", render("`**not bold**`"))
        # A fence still open (as while an answer streams) runs to the end as code.
        self.assertEqual(render("```\n<b>x"), "<pre><code>&lt;b&gt;x</code></pre>")
        # The live panel: running, waiting and KV usage from /metrics.
        p.wait(lambda: p.find("metrics-panel").is_displayed() and "%" in p.find("kv-usage").text, 20)
        self.assertEqual(p.csp_violations(), [])

    def test_2_streamed_answer(self):
        p = self.page(URL)
        p.wait_for_models()
        p.set_value("param-temperature", 0)
        p.set_value("param-max-tokens", 96)
        p.set_value("system-prompt", "You are a concise assistant. Answer in markdown.")
        p.watch_renders()
        p.ask("Give a one-line Python example that prints hello, in a code block.")
        p.wait_answer_done(1)
        answer = p.answers()[0]
        self.assertTrue(answer.text.strip(), "the answer has text")
        renders = [n for n in p.renders() if n > 0]
        self.assertGreaterEqual(len(set(renders)), 2, f"the answer arrived in one piece: {renders}")
        # Markdown may shorten the text for a moment (a fence's backticks become a block).
        self.assertLess(renders[0], renders[-1], f"the streamed text grows: {renders}")
        ttft = number(p.stat("ttft"))
        tps = number(p.stat("tokens-per-second"))
        tokens = p.stat("token-count")
        self.assertTrue(p.stat("ttft").endswith(" s"))
        self.assertGreater(ttft, 0.0)
        self.assertLess(ttft, 60.0)
        self.assertGreater(tps, 0.0)
        self.assertRegex(tokens, r"^\d+$", "exact count from the usage chunk")
        self.assertLessEqual(int(tokens), 96)
        self.assertIn(p.stat("finish-reason"), ("stop", "length"))
        self.assertRegex(p.stat("cached-tokens"), r"^\d+ / \d+$")
        self.assertEqual(len(p.find_all("user-message")), 1)
        self.assertEqual(p.find("prompt-input").get_attribute("value"), "")
        # Copy: the button reports success (async clipboard, or the textarea fallback).
        p.find("copy").click()
        p.wait(lambda: p.find("copy").text == "Copied", 5)


        # A second turn repeats the first as its prefix: the prefix cache serves part of it.
        p.ask("And in Rust?")
        p.wait_answer_done(2)
        cached, prompt = (int(x) for x in p.stat("cached-tokens").split(" / "))
        self.assertGreater(cached, 0, "the second turn's prompt starts with the first turn")
        self.assertLess(cached, prompt)
        self.assertEqual(len(p.find_all("user-message")), 2)
        shot = os.environ.get("KESTREL_PLAYGROUND_SCREENSHOT")
        if shot:
            self.driver.save_screenshot(shot)
        # Reset clears the conversation.
        p.find("reset").click()
        self.assertEqual(p.answers(), [])
        self.assertEqual(p.csp_violations(), [])

    def test_3_stop_cancels_on_the_server(self):
        p = self.page(URL)
        p.wait_for_models()
        aborted_before = aborted_total(URL)
        p.set_value("param-max-tokens", 3000)
        p.find("param-ignore-eos").click()
        self.assertTrue(p.find("param-ignore-eos").is_selected())
        p.ask("Count from 1 to 10000, one number per line.")
        # Streaming, and running on the server.
        p.wait(lambda: p.answers() and len(p.answers()[0].text) > 20, 60)
        self.assertTrue(p.find("stop").is_enabled())
        sums, _ = metrics(URL)
        self.assertGreaterEqual(sums.get("kestrel:num_requests_running", 0), 1)
        self.assertGreater(sums.get("kestrel:kv_cache_usage_perc", 0), 0)
        p.find("stop").click()
        p.wait(lambda: p.find("send").is_enabled(), 10)
        self.assertEqual(p.stat("finish-reason"), "stopped")
        self.assertTrue(p.stat("token-count").startswith("~"), "no usage chunk after a stop")
        # The dropped connection cancels the request: the engine counts an abort and frees
        # every KV block, well before 3000 tokens.
        deadline = time.monotonic() + 15
        while True:
            sums, _ = metrics(URL)
            idle = (sums.get("kestrel:num_requests_running", -1) == 0
                    and sums.get("kestrel:kv_cache_usage_perc", -1) == 0)
            if idle and aborted_total(URL) >= aborted_before + 1:
                break
            self.assertLess(time.monotonic(), deadline, f"not idle 15 s after stop: {sums}")
            time.sleep(0.2)
        generated = sums.get("kestrel:generation_tokens_total", 0)
        time.sleep(1.0)
        self.assertEqual(metrics(URL)[0].get("kestrel:generation_tokens_total", 0), generated,
                         "nothing is generated after the stop")
        # The page's panel sees the same.
        p.wait(lambda: p.find("running").text == "0" and p.find("kv-usage").text == "0.0 %", 10)
        self.assertEqual(p.csp_violations(), [])

    def test_4_api_key(self):
        p = self.page(KEYED_URL)
        p.wait(lambda: p.find("api-key-form").is_displayed(), 20)
        self.assertIn("API key", p.find("status").text)
        # A wrong key is refused and the form asks again.
        p.set_value("api-key-input", KEY + "-wrong")
        p.find("api-key-save").click()
        p.wait(lambda: p.find("api-key-form").is_displayed() and "refused" in p.find("status").text, 20)
        p.set_value("api-key-input", KEY)
        p.find("api-key-save").click()
        p.wait(lambda: not p.find("api-key-form").is_displayed(), 20)
        p.wait_for_models()
        self.assertEqual(self.driver.execute_script("return sessionStorage.getItem('kestrel.apiKey')"), KEY)
        self.assertEqual(self.driver.execute_script("return localStorage.length"), 0)
        p.set_value("param-max-tokens", 24)
        p.ask("Say hello.")
        p.wait_answer_done(1)
        self.assertTrue(p.answers()[0].text.strip())
        self.assertGreater(number(p.stat("ttft")), 0.0)
        # A reload in the same tab keeps the key: no form.
        p.open()
        p.wait_for_models()
        self.assertFalse(p.find("api-key-form").is_displayed())
        self.assertEqual(p.csp_violations(), [])

    def test_5_lora_adapter_in_the_menu(self):
        p = self.page(URL)
        p.wait_for_models()
        served = json.load(urllib.request.urlopen(f"{URL}/v1/models", timeout=10))["data"]
        bases = [m["id"] for m in served if not m.get("parent")]
        adapters = [m for m in served if m.get("parent")]
        self.assertEqual(len(bases), 1, served)
        self.assertEqual([m["id"] for m in adapters], [LORA], served)
        self.assertEqual(adapters[0]["parent"], bases[0])
        labels = {o.get_attribute("value"): o.text
                  for o in self.driver.find_elements(By.CSS_SELECTOR, "#model option")}
        self.assertEqual(labels, {bases[0]: bases[0], LORA: f"{LORA} (LoRA on {bases[0]})"})
        Select(self.driver.find_element(By.ID, "model")).select_by_value(LORA)
        p.spy_on_chat()
        p.set_value("param-temperature", 0)
        p.set_value("param-max-tokens", 24)
        p.ask("Say hello.")
        p.wait_answer_done(1)
        self.assertTrue(p.answers()[0].text.strip(), "the adapter's answer has text")
        self.assertGreater(number(p.stat("ttft")), 0.0)
        [request] = p.chat_requests()
        self.assertEqual(request["model"], LORA, "the request names the adapter")
        self.assertEqual(request["status"], 200)
        chunks = [json.loads(line[len("data: "):]) for line in request["text"].splitlines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
        self.assertGreater(len(chunks), 1, request["text"])
        self.assertEqual({c["model"] for c in chunks}, {LORA}, "the adapter answered")
        self.assertEqual(p.csp_violations(), [])

    def test_6_gateway(self):
        p = self.page(GATEWAY_URL)
        p.wait_for_models()
        served = json.load(urllib.request.urlopen(f"{GATEWAY_URL}/v1/models", timeout=10))["data"]
        options = [o.get_attribute("value") for o in self.driver.find_elements(By.CSS_SELECTOR, "#model option")]
        self.assertEqual(options, [m["id"] for m in served])
        p.set_value("param-temperature", 0)
        p.set_value("param-max-tokens", 48)
        p.watch_renders()
        p.ask("Name three colours.")
        p.wait_answer_done(1)
        self.assertTrue(p.answers()[0].text.strip(), "the fleet's answer has text")
        renders = [n for n in p.renders() if n > 0]
        self.assertGreaterEqual(len(set(renders)), 2, f"the answer arrived in one piece: {renders}")
        self.assertTrue(p.stat("ttft").endswith(" s"))
        ttft = number(p.stat("ttft"))
        self.assertGreater(ttft, 0.0)
        self.assertLess(ttft, 60.0)
        self.assertIn(p.stat("finish-reason"), ("stop", "length"))
        # The gateway exports no engine gauges, so the panel shows its /health and hides the
        # output rate row.
        sums, _ = metrics(GATEWAY_URL)
        self.assertNotIn("kestrel:num_requests_running", sums)

        def panel_matches_health():
            h = json.load(urllib.request.urlopen(f"{GATEWAY_URL}/health", timeout=10))
            return (p.find("metrics-panel").is_displayed()
                    and p.find("running").text == str(h["running"])
                    and p.find("waiting").text == str(h["waiting"])
                    and p.find("kv-usage").text == f"{h['kv_cache_usage'] * 100:.1f} %")

        p.wait(panel_matches_health, 20)
        self.assertFalse(p.find("output-tps").is_displayed(), "no output rate on a gateway")
        self.assertFalse(self.driver.find_element(By.ID, "m-tps-label").is_displayed())
        self.assertEqual(p.csp_violations(), [])


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    URL, KEYED_URL, KEY, LORA, GATEWAY_URL = (a.rstrip("/") for a in sys.argv[1:6])
    unittest.main(argv=[sys.argv[0], "-v"])
