"""A headless Chromium for the HTML report and the TensorBoard tab, and what the tests read off its pages."""

from __future__ import annotations

import json
import shutil
import struct
import time
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.builders import TraceBuilder, attention_block

from tracekit.cli import cli


XSS_IMG = '<img src=x onerror="window.__pwned=1">'


XSS_END = "</script><script>window.__pwned2=1</script>"


def hostile_trace(path: Path) -> Path:
    """Block and kernel names that are markup: a page that pastes them as HTML would run them."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    b.annotation("ProfilerStep#1", 0, 400)
    attention_block(b, 1, name=f"layer0.attention{XSS_IMG}{XSS_END}")
    for ev in b.events:
        if ev["name"].startswith("void (anonymous namespace)::softmax"):
            ev["name"] = f"softmax_{XSS_IMG}{XSS_END}"
    return b.write(path)


def report(*args: object) -> None:
    res = CliRunner().invoke(cli, ["report", *map(str, args)])
    assert res.exit_code == 0, res.output


def start_browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver") or shutil.which("chromium-driver")
    if not binary or not driver:
        pytest.skip("chromium and chromedriver are not installed (.ci/run installs them)")
    opts = Options()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1400"):
        opts.add_argument(a)
    opts.binary_location = binary
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)


def open_page(d, path: Path, timeout: float = 20) -> float:
    """Load a report; fail on console errors or any request but the page itself. Returns seconds to draw."""
    d.get_log("browser")
    d.get_log("performance")
    t0 = time.perf_counter()
    d.get(path.resolve().as_uri())
    while d.execute_script("return document.body && document.body.getAttribute('data-ready')") != "1":
        assert time.perf_counter() - t0 < timeout, "the page never finished drawing"
        time.sleep(0.02)
    took = time.perf_counter() - t0
    errors = [e for e in d.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert not errors, errors
    urls = [json.loads(m["message"])["message"]["params"].get("request", {}).get("url")
            for m in d.get_log("performance")]
    urls = [u for u in urls if u]
    assert urls and set(urls) == {path.resolve().as_uri()}, urls
    return took


def png_colours(png: bytes) -> int:
    """Distinct colours in an 8-bit RGB/RGBA PNG (decoded with zlib: no imaging library needed)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(png):
        n, kind = struct.unpack(">I4s", png[pos:pos + 8])
        body = png[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colours = set()
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 4 == 0:  # every 4th row is plenty to tell a drawing from a blank page
            colours.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp))
        prev = line
    return len(colours)


def shot(d, name: str) -> int:
    out = Path("/tmp/h10r") if Path("/tmp/h10r").is_dir() else None
    png = d.get_screenshot_as_png()
    if out is not None:
        (out / f"{name}.png").write_bytes(png)
    return png_colours(png)


def js(d, code: str):
    return d.execute_script(code)
