"""Images through `tessera serve --mmproj` (argv: base URL, an image, another image, the text
prompt, `tessera run`'s greedy continuation of the image and prompt), or, with `--no-vision`
after the URL, a server without a projector. Exits non-zero on any mismatch."""

import base64
import concurrent.futures
import json
import os
import struct
import sys
import urllib.error
import urllib.request
import zlib

import anthropic
import openai

url = sys.argv[1]


def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def get(path):
    with urllib.request.urlopen(url + path, timeout=60) as r:
        return json.loads(r.read())


def data_url(raw, mime="image/png"):
    return f"data:{mime};base64," + base64.b64encode(raw).decode()


def chat_image(raw, text="What is in the picture?"):
    return [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url(raw)}},
        {"type": "text", "text": text}]}]


def expect_400(status, body, field, words):
    assert status == 400, (status, body)
    msg = body["error"]["message"]
    assert body["error"].get("param") == field, (field, body)
    assert words in msg, (words, msg)


def png_chunk(name, data):
    return struct.pack(">I", len(data)) + name + data + struct.pack(">I", zlib.crc32(name + data))


def png_header(w, h):
    """A PNG that declares w x h RGB pixels and holds no image data."""
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + ihdr + png_chunk(b"IDAT", b"") + png_chunk(b"IEND", b"")


tiny = png_header(4, 4)[:33] + png_chunk(b"IDAT", b"garbage") + png_chunk(b"IEND", b"")

if sys.argv[2] == "--no-vision":
    assert get("/props")["modalities"]["vision"] is False
    status, body = post("/v1/chat/completions", {"messages": chat_image(tiny), "max_tokens": 2})
    expect_400(status, body, "messages[0].content[0]", "start it with --mmproj")
    sys.exit(0)

image, other, prompt, want = open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read(), \
    sys.argv[4], sys.argv[5]
assert get("/props")["modalities"]["vision"] is True

# llama-server's /completion with multimodal_data: run's greedy text; the same image again is
# reused from the cache (all but the prompt's last token); another image is not.
def completion(raw, text=prompt):
    return post("/completion", {
        "prompt": {"prompt_string": "<__media__>" + text,
                   "multimodal_data": [base64.b64encode(raw).decode()]},
        "n_predict": 8, "temperature": 0})


status, first = completion(image)
assert status == 200, first
assert first["content"] == want, (first["content"], want)
n_prompt = first["tokens_evaluated"]
status, again = completion(image)
assert again["content"] == want and again["timings"]["cache_n"] == n_prompt - 1, again
status, third = completion(other)
# <bos><start_of_image> only: the other image's positions are computed again.
assert status == 200 and third["timings"]["cache_n"] == 2, third["timings"]
# The first image again, after the slot took the other: its cells come back whole (from the
# host prompt cache or the other slot), past the image's last position.
status, back = completion(image, prompt + " Be brief.")
assert status == 200 and back["timings"]["cache_n"] >= 2 + 16 + 1, back["timings"]


# Both images at once, each computed afresh in its own slot: the answers of one at a time.
def fresh(raw):
    return post("/completion", {
        "prompt": {"prompt_string": "<__media__>" + prompt,
                   "multimodal_data": [base64.b64encode(raw).decode()]},
        "n_predict": 8, "temperature": 0, "cache_prompt": False})[1]["content"]


with concurrent.futures.ThreadPoolExecutor(2) as pool:
    both = list(pool.map(fresh, [image, other]))
assert both == [want, third["content"]], (both, want, third["content"])

# The official clients: OpenAI chat (plain and streamed), Anthropic messages and the Responses
# API render the same conversation, so their greedy replies agree.
oa = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=300)
r = oa.chat.completions.create(model="m", messages=chat_image(image), max_tokens=8, temperature=0)
text = r.choices[0].message.content
assert text and r.usage.prompt_tokens > 16, r
s = oa.chat.completions.create(model="m", messages=chat_image(image), max_tokens=8, temperature=0,
                               stream=True)
assert "".join(c.choices[0].delta.content or "" for c in s if c.choices) == text
ant = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0, timeout=300)
m = ant.messages.create(model="m", max_tokens=8, extra_body={"temperature": 0}, messages=[
    {"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": base64.b64encode(image).decode()}},
        {"type": "text", "text": "What is in the picture?"}]}])
assert m.content[0].text == text, (m.content[0].text, text)
resp = oa.responses.create(model="m", max_output_tokens=8, temperature=0, input=[
    {"role": "user", "content": [
        {"type": "input_image", "image_url": data_url(image)},
        {"type": "input_text", "text": "What is in the picture?"}]}])
assert resp.output_text == text, (resp.output_text, text)
# Another image, another answer's prompt: the image is in the reply's prompt tokens.
r2 = oa.chat.completions.create(model="m", messages=chat_image(other), max_tokens=8, temperature=0)
assert r2.usage.prompt_tokens == r.usage.prompt_tokens, (r2.usage, r.usage)

# Named errors.
big = png_header(8000, 6500)  # 52 megapixels, refused from the header
for raw, words in [(tiny, "corrupt"), (big, "megapixels"), (b"hello", "not a PNG")]:
    status, body = post("/v1/chat/completions", {"messages": chat_image(raw), "max_tokens": 2})
    expect_400(status, body, "messages[0].content[0]", words)
remote = [{"role": "user", "content": [
    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]
status, body = post("/v1/chat/completions", {"messages": remote, "max_tokens": 2})
expect_400(status, body, "messages[0].content[0]", "remote image URLs are not fetched")
system = [{"role": "system", "content": [
    {"type": "image_url", "image_url": {"url": data_url(image)}}]}]
status, body = post("/v1/chat/completions", {"messages": system, "max_tokens": 2})
expect_400(status, body, "messages[0].content[0]", "user messages")
status, body = post("/completion", {"prompt": {"prompt_string": "no marker",
                                               "multimodal_data": [base64.b64encode(image).decode()]}})
expect_400(status, body, "prompt", "0 media markers")
try:
    ant.messages.create(model="m", max_tokens=2, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}])
    raise AssertionError("a remote image was taken")
except anthropic.BadRequestError as e:
    assert "messages[0].content[0].source" in str(e), e
try:
    oa.responses.create(model="m", max_output_tokens=2, input=[{"role": "user", "content": [
        {"type": "input_image", "file_id": "file-1"}]}])
    raise AssertionError("a file id was taken")
except openai.BadRequestError as e:
    assert "input[0].content[0].file_id" in str(e), e

# The chat page (headless Chromium, as tests/py/browser_chat.py in the server crate; skipped
# with TESSERA_SKIP_BROWSER): the Image button shows for a server that sees, an attached image
# is previewed, sent with the message and shown in its bubble, and the greedy reply is the
# OpenAI client's.
if os.environ.get("TESSERA_SKIP_BROWSER"):
    print("ok (browser skipped)")
    sys.exit(0)
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--disable-background-networking", "--no-first-run"):
    opts.add_argument(flag)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
try:
    driver.set_page_load_timeout(60)
    driver.get(url + "/")
    wait = WebDriverWait(driver, 240)
    wait.until(EC.visibility_of_element_located((By.ID, "attach")))
    driver.find_element(By.ID, "settings").click()
    for field, v in (("temperature", "0"), ("max_tokens", "8")):
        el = driver.find_element(By.ID, field)
        el.clear()
        el.send_keys(v)
    # The file chooser is the browser's: hand the hidden input the file as the dialog would.
    driver.execute_script("document.getElementById('file').hidden = false")
    driver.find_element(By.ID, "file").send_keys(os.path.abspath(sys.argv[2]))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#attached img"))
    driver.find_element(By.ID, "input").send_keys("What is in the picture?")
    driver.find_element(By.ID, "send").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.user img"))
    assert not driver.find_elements(By.CSS_SELECTOR, "#attached img"), "still attached after sending"
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant .tools"))
    reply = driver.find_element(By.CSS_SELECTOR, ".msg.assistant .body").text.strip()
    assert reply == text.strip(), (reply, text)
finally:
    driver.quit()
print("ok")
