"""The chat page in headless Chromium (Debian's chromium and chromium-driver) through
Selenium: argv[1] is the server's base URL. Checks the model's name from /props in the
header and the page's markdown renderer (escaping included); sends a message with settings
set and waits for a streamed reply and the tokens/s line; reloads and finds the settings and
the conversation kept; regenerates the reply; then a second turn, stopped mid-way with the
Stop button; a new chat and back through the list of past chats; and, at a phone's width, no
horizontal scrolling. With TESSERA_SCREENSHOT=PATH, saves a screenshot after the first
reply. Exits non-zero on failure."""

import json
import os
import sys
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

base = sys.argv[1]
with urllib.request.urlopen(base + "/props", timeout=60) as r:
    alias = json.load(r)["model_alias"]
assert alias, "no model_alias in /props"

opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for flag in (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-first-run", "--disable-quic",
):
    opts.add_argument(flag)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)

ASSISTANT = ".msg.assistant .body"  # the reply; the bubble also holds Copy and Regenerate


def bodies(d, sel=ASSISTANT):
    return [e.text.strip() for e in d.find_elements(By.CSS_SELECTOR, sel)]


def open_settings():
    if not driver.find_element(By.ID, "max_tokens").is_displayed():
        driver.find_element(By.ID, "settings").click()
    wait.until(EC.visibility_of_element_located((By.ID, "max_tokens")))


def value(id_):
    return driver.find_element(By.ID, id_).get_property("value")


try:
    driver.set_page_load_timeout(60)
    driver.set_window_size(1100, 800)
    driver.get(base + "/")
    assert driver.title == "Tessera chat", driver.title
    # Generous: CI runs this beside other tests on two cores in a debug build.
    wait = WebDriverWait(driver, 240)

    # The model's name (from GET /props) in the header.
    wait.until(lambda d: alias in d.find_element(By.ID, "model").text)

    # The markdown renderer: blocks and inline marks, and HTML in the text stays text.
    sample = (
        "## Title\n\nSome **bold**, *italic* and `a<b`.\n\n- one\n- two\n\n1. first\n2. second\n\n"
        "```python\nprint('<b>hi</b>')\n```\n\n"
        "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">\n"
        "[good](https://example.com/?a=1&b=2) [bad](javascript:alert(1))"
    )
    html = driver.execute_script("return renderMarkdown(arguments[0])", sample)
    got = driver.execute_script(
        """const d = document.createElement('div');
        d.innerHTML = arguments[0];
        const n = (s) => d.querySelectorAll(s).length;
        return {script: n('script'), img: n('img'), h2: n('h2'), strong: n('strong'), em: n('em'),
                inline_code: n('p > code'), ul: n('ul > li'), ol: n('ol > li'),
                code: [...d.querySelectorAll('pre > code.language-python')].map((c) => c.textContent),
                copy: n('.code button'), links: [...d.querySelectorAll('a')].map((a) => a.href),
                text: d.textContent, pwned: window.pwned === undefined ? null : window.pwned};""",
        html,
    )
    assert got["script"] == 0 and got["img"] == 0 and got["pwned"] is None, (got, html)
    assert "<script>window.pwned = 1</script>" in got["text"], got
    assert (got["h2"], got["strong"], got["em"], got["inline_code"], got["ul"], got["ol"]) == (
        1, 1, 1, 1, 2, 2), (got, html)
    assert got["code"] == ["print('<b>hi</b>')"] and got["copy"] == 1, (got, html)
    assert got["links"] == ["https://example.com/?a=1&b=2"], (got, html)

    # Settings (kept in localStorage). A bounded first reply: sampling is seeded at random,
    # and an unbounded answer can run to the context's end.
    open_settings()
    driver.find_element(By.ID, "system").send_keys("You are a helpful assistant.")
    driver.find_element(By.ID, "temperature").send_keys("0.7")
    driver.find_element(By.ID, "max_tokens").send_keys("48")
    box = driver.find_element(By.ID, "input")
    box.send_keys("Hello! What is the capital of France?")
    driver.find_element(By.ID, "send").click()
    # A reply streams into the assistant bubble; the send button comes back when it ends.
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ASSISTANT).text.strip() != "")
    wait.until(EC.element_to_be_clickable((By.ID, "send")))
    reply = driver.find_element(By.CSS_SELECTOR, ASSISTANT).text
    stats = driver.find_element(By.ID, "stats").text
    assert "tokens/s" in stats, stats
    assert int(stats.split()[0]) <= 48, stats  # the page sent max_tokens
    assert "Error" not in reply, reply
    shot = os.environ.get("TESSERA_SCREENSHOT")
    if shot:
        driver.save_screenshot(shot)
    # Copy works without a clipboard API too (the textarea fallback); the button says so.
    driver.find_element(By.CSS_SELECTOR, ".msg.assistant .copy-msg").click()
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".msg.assistant .copy-msg").text == "Copied")

    # A reload keeps the settings and the conversation.
    driver.refresh()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.user")) == 1
               and len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 1)
    assert bodies(driver) == [reply.strip()], (bodies(driver), reply)
    assert (value("system"), value("temperature"), value("max_tokens")) == (
        "You are a helpful assistant.", "0.7", "48"), (value("system"), value("temperature"))
    wait.until(lambda d: alias in d.find_element(By.ID, "model").text)

    # Regenerate drops the last reply and streams a new one in its place.
    old = driver.find_element(By.CSS_SELECTOR, ".msg.assistant")
    driver.find_element(By.CSS_SELECTOR, ".msg.assistant .regen").click()
    wait.until(EC.staleness_of(old))
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ASSISTANT).text.strip() != "")
    wait.until(EC.element_to_be_clickable((By.ID, "send")))
    assert len(driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 1
    assert len(driver.find_elements(By.CSS_SELECTOR, ".msg.user")) == 1
    assert "tokens/s" in driver.find_element(By.ID, "stats").text
    assert "Error" not in bodies(driver)[0], bodies(driver)

    # Second turn: the conversation is kept (two user bubbles), and Stop cuts the reply.
    open_settings()
    driver.find_element(By.ID, "max_tokens").clear()  # unbounded: only Stop ends it
    box = driver.find_element(By.ID, "input")
    box.send_keys("Now tell me a very long story about it.")
    driver.find_element(By.ID, "send").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 2
               and bodies(d)[1] != "")
    stop = driver.find_element(By.ID, "stop")
    streaming = stop.is_enabled()  # the model may end its story first (end of text)
    stop.click()
    wait.until(EC.element_to_be_clickable((By.ID, "send")))
    assert len(driver.find_elements(By.CSS_SELECTOR, ".msg.user")) == 2
    stopped = driver.find_element(By.ID, "stats").text
    assert "(stopped)" in stopped or not streaming, stopped

    # New chat empties the page; the past chat comes back from the list.
    driver.find_element(By.ID, "clear").click()
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, ".msg"))
    history = Select(driver.find_element(By.ID, "history"))
    past = [o.get_attribute("value") for o in history.options if o.get_attribute("value")]
    assert len(past) == 1, [o.text for o in history.options]
    history.select_by_value(past[0])
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.user")) == 2)

    # A phone's width: no horizontal scrolling, even with a long code line and a long word.
    driver.set_window_size(390, 844)
    overflow = driver.execute_script(
        """const d = document.createElement('div');
        d.className = 'msg assistant';
        d.innerHTML = '<div class="body">' + renderMarkdown(
            '```\\n' + 'x'.repeat(300) + '\\n```\\n\\n' + 'y'.repeat(300)) + '</div>';
        document.getElementById('log').appendChild(d);
        const pre = d.querySelector('pre');
        const r = {page: document.documentElement.scrollWidth, inner: window.innerWidth,
                   header: Math.max(...[...document.querySelectorAll('header > *')]
                                    .map((e) => e.getBoundingClientRect().right)),
                   pre_scrolls: pre.scrollWidth > pre.clientWidth};
        d.remove();
        return r;""")
    assert overflow["page"] <= overflow["inner"], overflow
    assert overflow["header"] <= overflow["inner"], overflow
    assert overflow["pre_scrolls"], overflow
    print("browser chat: ok:", repr(reply[:60]), "|", stats, "|", stopped)
finally:
    driver.quit()
