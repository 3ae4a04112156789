"""The chat page in headless Chromium (Debian's chromium and chromium-driver) through
Selenium: argv[1] is the server's base URL. Types a message, sends it, and waits for a
streamed reply and the tokens/s line; then a second turn, stopped mid-way with the Stop
button. Exits non-zero on failure."""

import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

base = sys.argv[1]
opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for flag in (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-first-run", "--disable-quic",
):
    opts.add_argument(flag)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
try:
    driver.set_page_load_timeout(30)
    driver.get(base + "/")
    assert driver.title == "Tessera chat", driver.title
    # Generous: CI runs this beside other tests on two cores in a debug build.
    wait = WebDriverWait(driver, 240)
    # A bounded first reply: sampling is seeded at random, and an unbounded answer can run
    # to the context's end.
    driver.find_element(By.ID, "max_tokens").send_keys("48")
    box = driver.find_element(By.ID, "input")
    box.send_keys("Hello! What is the capital of France?")
    driver.find_element(By.ID, "send").click()
    # A reply streams into the assistant bubble; the send button comes back when it ends.
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".msg.assistant").text.strip() != "")
    wait.until(EC.element_to_be_clickable((By.ID, "send")))
    reply = driver.find_element(By.CSS_SELECTOR, ".msg.assistant").text
    stats = driver.find_element(By.ID, "stats").text
    assert "tokens/s" in stats, stats
    assert int(stats.split()[0]) <= 48, stats  # the page sent max_tokens
    assert "Error" not in reply, reply
    # Second turn: the conversation is kept (two user bubbles), and Stop cuts the reply.
    driver.find_element(By.ID, "max_tokens").clear()  # unbounded: only Stop ends it
    box.send_keys("Now tell me a very long story about it.")
    driver.find_element(By.ID, "send").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 2
               and d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[1].text.strip() != "")
    driver.find_element(By.ID, "stop").click()
    wait.until(EC.element_to_be_clickable((By.ID, "send")))
    assert len(driver.find_elements(By.CSS_SELECTOR, ".msg.user")) == 2
    assert "(stopped)" in driver.find_element(By.ID, "stats").text
    print("browser chat: ok:", repr(reply[:60]), "|", stats)
finally:
    driver.quit()
