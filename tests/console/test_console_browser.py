"""The console in a real browser (Debian's headless chromium) against a whole embedded stack: log in, search and
find a memory, correct it and see the change arrive live, no serious accessibility violation (axe), no horizontal scroll
at 375 px. Saves a screenshot to bench-results/console.png and prints each step's time."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.stack import Stack, embedded_stack, user_path

pytestmark = pytest.mark.e2e
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "bench-results" / "console.png"
TENANT = "console-acme"

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip("needs /usr/bin/chromium and /usr/bin/chromedriver", allow_module_level=True)

from axe_selenium_python import Axe  # noqa: E402
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def console_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    slow_ok = {"MEMSTREAM_HTTP_REQUEST_TIMEOUT": "15", "MEMSTREAM_COMMAND_WAIT_TIMEOUT": "12"}
    with embedded_stack(Path(tmp_path_factory.mktemp("console")), extra_env=slow_ok) as running:
        yield running


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


class Steps:
    def __init__(self) -> None:
        self.times: list[tuple[str, float]] = []

    def run(self, name: str, step: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        result = step()
        self.times.append((name, time.perf_counter() - started))
        print(f"step {name}: {self.times[-1][1]:.2f}s")
        return result


def test_console_end_to_end(console_stack: Stack, browser: WebDriver) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    steps = Steps()
    wait = WebDriverWait(browser, 60)

    def seed() -> None:
        path = f"/v1/users/{user_path(user)}/memories"
        body = {"type": "preference", "text": "Prefers aisle seats"}
        answer = console_stack.request("POST", path, params={"tenant_id": TENANT, "wait": "true"}, json=body)
        assert answer.status_code == 200, answer.text

    def login() -> None:
        browser.get(f"{console_stack.base_url}/console/")
        browser.find_element(By.ID, "api-key").send_keys(console_stack.api_key)
        browser.find_element(By.ID, "tenant").send_keys(TENANT)
        browser.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()
        wait.until(ec.element_to_be_clickable((By.XPATH, f"//table[@id='users']//button[text()='{user}']"))).click()

    def search() -> None:
        browser.find_element(By.ID, "query").send_keys("aisle seats")
        browser.find_element(By.CSS_SELECTOR, "#search button[type=submit]").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "results"), "score"))
        assert "Prefers aisle seats" in browser.find_element(By.ID, "results").text
        assert browser.find_elements(By.CSS_SELECTOR, "#results .signals dt"), "each result shows its signals"

    def find_memory() -> None:
        memory = (By.XPATH, "//ol[@id='memories']//button[text()='Prefers aisle seats']")
        wait.until(ec.element_to_be_clickable(memory)).click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "memory-text"), "Prefers aisle seats"))
        wait.until(ec.text_to_be_present_in_element((By.ID, "sources"), "No archived source turns"))

    def correct_and_see_it_live() -> None:
        box = browser.find_element(By.ID, "correction")
        box.clear()
        box.send_keys("Prefers window seats")
        browser.find_element(By.CSS_SELECTOR, "#correct button[type=submit]").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "changes"), "added: Prefers window seats"))

    def accessibility() -> list[dict[str, Any]]:
        axe = Axe(browser)
        axe.inject()
        result = axe.run()
        found: list[dict[str, Any]] = result["violations"]
        assert result["passes"], "axe ran no rule"
        print(f"axe: {len(result['passes'])} rules passed, {len(found)} violated: {[v['id'] for v in found]}")
        return [v for v in found if v.get("impact") in ("serious", "critical")]

    def narrow() -> tuple[int, int]:
        browser.set_window_size(375, 800)
        browser.execute_script("window.scrollTo(0, 0)")
        time.sleep(0.5)
        widths: tuple[int, int] = browser.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SCREENSHOT))
        return widths

    def operations() -> None:
        browser.set_window_size(1200, 900)
        browser.find_element(By.CSS_SELECTOR, "button[data-view=ops]").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "serving"), "Answering from generation default"))
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#lag tbody tr")) > 0)
        stages = {row.text.split()[0] for row in browser.find_elements(By.CSS_SELECTOR, "#lag tbody tr")}
        assert {"window", "embedder", "consolidator"} <= stages, stages
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#keys tbody tr")) > 0)

    steps.run("seed a memory", seed)
    steps.run("log in and open the user", login)
    steps.run("search with recall", search)
    steps.run("find the memory", find_memory)
    steps.run("correct it and see the change live", correct_and_see_it_live)
    serious = steps.run("axe check", accessibility)
    assert not serious, [(v["id"], v["impact"], v["help"]) for v in serious]
    scroll, client = steps.run("375 px window", narrow)
    assert scroll <= client, f"horizontal scroll at 375 px: {scroll} > {client}"
    steps.run("operations: generation, lag, keys", operations)
    serious = steps.run("axe check, operations", accessibility)
    assert not serious, [(v["id"], v["impact"], v["help"]) for v in serious]
    assert "memstream-key" not in browser.current_url
    print("total", f"{sum(t for _, t in steps.times):.2f}s")
