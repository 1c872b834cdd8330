"""The web console (issue 16 item 5) in a real browser: Debian's Chromium, headless, at 1280x800,
driven through chromium-driver by selenium, against a ``bayou serve`` subprocess with known data.

Each page is loaded and what it shows is asserted (numbers from the data written here); the
message browser is clicked through (partition, offset and time seek, formats, per-record detail,
producing a test message), offsets are reset (preview, apply, refusal while the group has a
member), and errors and empty states appear in the page. Every page's screenshot is saved under
the test's tmp dir; with ``BAYOU_CONSOLE_SCREENSHOTS=DIR`` they are copied there too (that is how
docs/console/ was made).
"""

from __future__ import annotations

import base64
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from support.admin_api import call
from support.brokers import BrokerProcess
from support.cluster import v1

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
T = TypeVar("T")

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
                       reason="Chromium and chromium-driver are not installed (make test installs them)"),
]


class Console:
    """The browser on one broker's console, with waits on conditions (never fixed sleeps)."""

    def __init__(self, driver: Any, base: str, shots: Path) -> None:
        self.driver = driver
        self.base = base
        self.shots = shots

    def open(self, hash_: str, page: str) -> None:
        # a whole new load: a hash change alone would keep the previous page's state, and a
        # refresh right after it was once aborted by the page's own navigation under load
        # ("timeout from aborted by navigation" in a full `make test`)
        self.driver.get("about:blank")
        self.driver.get(f"{self.base}/{hash_}")
        self.wait(lambda: self.driver.find_element(By.ID, "page").get_attribute("data-page") == page
                  or None, f"page {page}")

    def wait(self, cond: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
        def attempt(_d: Any) -> T | None:
            try:
                return cond()
            except (StaleElementReferenceException, WebDriverException):
                return None
        try:
            result: T = WebDriverWait(self.driver, timeout, poll_frequency=0.05).until(attempt)
        except Exception as exc:
            self.shot(f"failed-{what.replace(' ', '-').replace('/', '-')[:40]}")
            raise AssertionError(f"waited {timeout} s for {what}; page: "
                                 f"{self.driver.find_element(By.TAG_NAME, 'main').text[:1500]}") from exc
        return result

    def el(self, css: str) -> Any:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        return str(self.el(css).text)

    def go_browse(self) -> None:
        """Click the message browser's Go and wait for that load to finish."""
        before = self.el("#browse-records").get_attribute("data-loads")
        self.el("#browse-go").click()
        self.wait(lambda: self.el("#browse-records").get_attribute("data-loads") != before or None,
                  "the browser's next load")

    def rows(self, table_id: str) -> list[list[str]]:
        return [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                for tr in self.driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")]

    def shot(self, name: str) -> Path:
        """``name``.png: the 1280x800 window from the top of the page; ``name``-full.png: the
        whole page at that width (what BAYOU_CONSOLE_SCREENSHOTS gets, as ``name``.png)."""
        self.driver.execute_script("window.scrollTo(0, 0)")
        path = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        height = int(self.driver.execute_script(
            "return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)"))
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": 1280, "height": max(800, height), "deviceScaleFactor": 1, "mobile": False})
        try:
            data = self.driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
        finally:
            self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        full = self.shots / f"{name}-full.png"
        full.write_bytes(base64.b64decode(data["data"]))
        out = os.environ.get("BAYOU_CONSOLE_SCREENSHOTS")
        if out and not name.startswith("failed"):
            Path(out).mkdir(parents=True, exist_ok=True)
            shutil.copy(full, Path(out) / f"{name}.png")
        return path


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("console") / "data").start()
    try:
        port = b.http_port
        assert call(port, "POST", "/topics", {"name": "orders", "partitions": 3})[0] == 201
        assert call(port, "POST", "/topics", {"name": "empty-topic", "partitions": 1})[0] == 201
        for n in range(5):
            status, doc = call(port, "POST", "/topics/orders/partitions/0/messages",
                               {"key": f"order-{n}", "value": {"n": n, "item": f"widget-{n}"},
                                "headers": {"source": "seed"}})
            assert status == 201 and doc["offset"] == n, doc
            time.sleep(0.002)  # distinct timestamps, for the time seek
        status, doc = call(port, "POST", "/groups/billing/reset-offsets",
                           {"topic": "orders", "to": "offset", "value": 2})
        assert status == 200, doc
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def console(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    shots = tmp_path_factory.mktemp("screenshots")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,800", "--hide-scrollbars", "--force-device-scale-factor=1",
                f"--user-data-dir={shots.parent / 'chromium-profile'}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_window_size(1280, 800)
    try:
        yield Console(driver, f"http://127.0.0.1:{broker.http_port}", shots)
    finally:
        driver.quit()


def test_overview(console: Console, broker: BrokerProcess) -> None:
    console.open("#/", "overview")
    assert console.text("#card-brokers .value") == "1"
    assert console.text("#card-topics .value") == "2"
    assert console.text("#card-partitions .value") == "4"
    assert console.text("#card-under .value") == "0"
    assert [r[0] for r in console.rows("overview-topics")] == ["empty-topic", "orders"]
    assert [r[2] for r in console.rows("overview-topics")] == ["0", "5"]
    console.wait(lambda: console.text("#card-in .value") == "5" or None, "records in = 5")
    # live chart: traffic between two samples shows as a rate above zero
    console.wait(lambda: int(console.el("#throughput").get_attribute("data-points")) >= 1 or None,
                 "a first rate")
    for n in range(20):
        assert call(broker.http_port, "POST", "/topics/empty-topic/partitions/0/messages",
                    {"value": f"burst-{n}"})[0] == 201
    console.wait(lambda: float(console.el("#throughput").get_attribute("data-max")) > 1 or None,
                 "the burst on the chart")
    console.wait(lambda: console.text("#card-in .value") == "25" or None, "records in = 25")
    assert "in/s" in console.text("#chart-note")
    console.shot("overview")


def test_topics_list_and_create(console: Console) -> None:
    console.open("#/topics", "topics")
    rows = {r[0]: r for r in console.rows("topics-table")}
    assert rows["orders"][1:4] == ["3", "1", "5"] and rows["orders"][5] == "healthy"
    console.shot("topics")
    # a bad name: the error is shown in the page, nothing is created
    console.el("#new-topic-name").send_keys("bad/name")
    console.el("#create-topic button").click()
    console.wait(lambda: "INVALID_TOPIC_NAME" in console.text("#create-result") or None, "the error shown")
    name = console.el("#new-topic-name")
    name.clear()
    name.send_keys("made-in-browser")
    parts = console.el("#new-topic-partitions")
    parts.clear()
    parts.send_keys("2")
    console.el("#create-topic button").click()
    console.wait(lambda: console.text("#topic-name") == "made-in-browser" or None, "the new topic's page")
    assert len(console.rows("partitions-table")) == 2
    assert "This partition is empty" in console.text("#browse-records")


def test_topic_page_browse_seek_detail_produce(console: Console, broker: BrokerProcess) -> None:
    console.open("#/topics/orders", "topics")
    parts = console.rows("partitions-table")
    assert [p[0] for p in parts] == ["0", "1", "2"]
    assert parts[0][1] == "0" and parts[0][5] == "5" and parts[0][6] == "5" and parts[0][9] == "in sync"
    assert console.text("#card-topic-records .value") == "5"
    # newest first page of partition 0 (the default)
    console.wait(lambda: [r[0] for r in console.rows("records-table")] == ["0", "1", "2", "3", "4"] or None,
                 "the newest records")
    # seek by offset
    Select(console.el("#browse-seek")).select_by_value("offset")
    console.el("#browse-at").send_keys("2")
    console.go_browse()
    console.wait(lambda: [r[0] for r in console.rows("records-table")] == ["2", "3", "4"] or None,
                 "offset 2 on")
    assert console.rows("records-table")[1][2] == "order-3"
    # per-record detail
    console.el('#records-table tr[data-offset="3"]').click()
    console.wait(lambda: "Record 3" in console.text("#browse-detail") or None, "the detail of record 3")
    assert console.text("#detail-key") == "order-3"
    assert '"n":3' in console.text("#detail-value").replace(" ", "")
    assert console.rows("detail-headers") == [["source", "seed"]]
    console.shot("topic")
    # json rendering pretty-prints the value
    Select(console.el("#browse-format")).select_by_value("json")
    console.go_browse()
    console.wait(lambda: console.el('#records-table tr[data-offset="3"]') or None, "json page")
    console.el('#records-table tr[data-offset="3"]').click()
    console.wait(lambda: '"item": "widget-3"' in console.text("#detail-value") or None, "pretty JSON")
    # hex rendering
    Select(console.el("#browse-format")).select_by_value("hex")
    console.go_browse()
    console.wait(lambda: console.rows("records-table")[0][2] == b"order-2".hex() or None, "hex keys")
    Select(console.el("#browse-format")).select_by_value("text")
    # seek by time: record 3's timestamp gives record 3 first
    _, page = call(broker.http_port, "GET", "/topics/orders/partitions/0/messages?offset=3&limit=1")
    ts = page["records"][0]["timestamp"]
    Select(console.el("#browse-seek")).select_by_value("timestamp")
    at = console.el("#browse-at")
    at.clear()
    at.send_keys(str(ts))
    console.go_browse()
    console.wait(lambda: console.rows("records-table")[0][0] == "3" or None, "time seek to record 3")
    # an empty partition says so
    Select(console.el("#browse-partition")).select_by_value("1")
    Select(console.el("#browse-seek")).select_by_value("newest")
    console.go_browse()
    console.wait(lambda: "This partition is empty" in console.text("#browse-records") or None, "empty state")
    # produce a test message: it shows up in the browser
    console.el("#produce-key").send_keys("from-browser")
    console.el("#produce-value").send_keys('{"hello": "bayou"}')
    console.el("#produce-headers").send_keys("trace: t-1")
    console.el("#produce-send").click()
    console.wait(lambda: "offset 5" in console.text("#produce-result") or None, "the produce result")
    console.wait(lambda: console.rows("records-table")[-1][0] == "5" or None, "the new record listed")
    assert console.rows("records-table")[-1][2] == "from-browser"
    _, page = call(broker.http_port, "GET", "/topics/orders/partitions/0/messages?offset=5&format=json")
    assert page["records"][0]["value"] == {"hello": "bayou"}
    assert page["records"][0]["headers"] == [{"key": "trace", "value": "t-1", "format": "text"}]


def test_groups_lag_and_reset_offsets(console: Console, broker: BrokerProcess) -> None:
    console.open("#/groups", "groups")
    rows = {r[0]: r for r in console.rows("groups-table")}
    assert rows["billing"][3] == "orders" and rows["billing"][4] == "0"
    lag = int(rows["billing"][5])
    assert lag >= 3  # 5 records (6 once the topic test produced) past offset 2 of partition 0
    console.shot("groups")
    console.el("#groups-table a").click()
    console.wait(lambda: console.text("#group-name") == "billing" or None, "the group page")
    table = console.rows("lag-table")
    assert table[0][:3] == ["orders", "0", "2"] and int(table[0][4]) == lag
    bar = console.el("#lag-chart rect")
    assert bar.get_attribute("data-lag") == str(lag)
    # preview changes nothing; apply moves the offset
    Select(console.el("#reset-to")).select_by_value("earliest")
    console.el("#reset-preview").click()
    console.wait(lambda: console.rows("reset-table") or None, "the preview")
    assert console.rows("reset-table")[0] == ["0", "2", "0"]
    assert "Preview" in console.text("#reset-result")
    assert console.rows("lag-table")[0][2] == "2"
    console.shot("group")
    console.el("#reset-apply").click()
    console.wait(lambda: console.rows("lag-table")[0][2] == "0" or None, "the offset reset to 0")
    assert "Offsets reset" in console.text("#reset-result")
    assert console.text("#card-group-lag .value") == str(int(table[0][3]))
    # to an offset
    Select(console.el("#reset-to")).select_by_value("offset")
    console.el("#reset-value").send_keys("4")
    console.el("#reset-apply").click()
    console.wait(lambda: console.rows("lag-table")[0][2] == "4" or None, "the offset reset to 4")
    _, doc = call(broker.http_port, "GET", "/groups/billing")
    assert doc["partitions"][0]["committed_offset"] == 4

    # a group with a member: the reset is refused and the page says why
    joined = v1(broker.port, "V1|1|JOIN|live orders c1")
    assert "generation=" in joined, joined
    console.open("#/groups/live", "groups")
    assert console.rows("members-table")[0][0] == "c1"
    Select(console.el("#reset-to")).select_by_value("latest")
    console.el("#reset-apply").click()
    console.wait(lambda: "active members" in console.text("#reset-result") or None, "the refusal")
    assert "GROUP_NOT_EMPTY" in console.text("#reset-result")


def test_cluster(console: Console) -> None:
    console.open("#/cluster", "cluster")
    assert console.text("#card-mode .value") == "single"
    assert console.text("#card-controller .value") == "0"
    [broker_row] = console.rows("brokers-table")
    assert broker_row[0] == "0" and "controller" in broker_row[3] and "this broker" in broker_row[3]
    assert "http" in broker_row[2] and "iggy" in broker_row[2]
    parts = console.rows("cluster-partitions")
    assert {(r[0], r[1]) for r in parts} >= {("orders", "0"), ("orders", "2"), ("empty-topic", "0")}
    assert all(r[5] == "in sync" for r in parts)
    console.shot("cluster")


def test_errors_and_unknown_pages_are_shown(console: Console) -> None:
    console.driver.get(f"{console.base}/#/topics/no-such-topic")
    console.driver.refresh()
    console.wait(lambda: console.el("#error").is_displayed() or None, "the error banner")
    assert "unknown topic no-such-topic" in console.text("#error")
    assert console.text("h1") == "Could not load this page"
    console.driver.get(f"{console.base}/#/nowhere")
    console.wait(lambda: console.text("h1") == "Not found" or None, "the not-found page")


def test_console_assets_are_served_offline(broker: BrokerProcess) -> None:
    import http.client
    for path, kind in (("/", "text/html"), ("/console/console.js", "text/javascript"),
                       ("/console/console.css", "text/css")):
        conn = http.client.HTTPConnection("127.0.0.1", broker.http_port, timeout=10)
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read().decode()
        conn.close()
        assert resp.status == 200 and resp.getheader("Content-Type", "").startswith(kind), path
        outside = body.replace("http://www.w3.org/2000/svg", "")  # a namespace name, not a fetch
        assert "http://" not in outside and "https://" not in outside, path
    conn = http.client.HTTPConnection("127.0.0.1", broker.http_port, timeout=10)
    conn.request("GET", "/console/../../etc/passwd")
    assert conn.getresponse().status == 404
    conn.close()
