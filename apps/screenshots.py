"""Start the dashboard on localhost and save a screenshot of every page with headless Chromium.

Usage: ``python -m bertology.apps.screenshots --results results --out docs/screenshots``
Needs Debian's ``chromium`` (installed by scripts/setup.sh when run as root). The server binds to
127.0.0.1 only and is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path


PAGES = ["Runs", "Probing", "Feature combinations", "Heads", "Pruning", "Embeddings", "Alignment", "Pretraining",
         "Compare runs"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"dashboard did not answer at {url} within {timeout}s")


def is_blank(png: Path, min_share: float = 0.01) -> bool:
    """True when fewer than ``min_share`` of the pixels differ from white (the page did not render)."""
    from PIL import Image

    img = Image.open(png).convert("L")
    pixels = img.getdata()
    return sum(1 for p in pixels if p < 235) < min_share * len(pixels)


def _shoot(chromium: str, url: str, target: Path, width: int, height: int, budget_ms: int) -> None:
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={width},{height}", f"--virtual-time-budget={budget_ms}",
                    f"--screenshot={target}", url],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


def take_screenshots(results: Path, out: Path, pages: list[str] = PAGES, width: int = 1400, height: int = 1100,
                     budget_ms: int = 20000) -> list[Path]:
    chromium = find_chromium()
    if chromium is None:
        raise RuntimeError("no Chromium found: apt-get install chromium")
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = dict(os.environ, BERTOLOGY_RESULTS=str(results.resolve()))
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(Path(__file__).resolve().parent / "dashboard.py"), "--server.address", "127.0.0.1",
         "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    shots = []
    try:
        wait_for(f"http://127.0.0.1:{port}/_stcore/health")
        _shoot(chromium, f"http://127.0.0.1:{port}/", out / ".warmup.png", width, height, budget_ms)
        (out / ".warmup.png").unlink(missing_ok=True)
        for page in pages:
            target = out / f"{page.lower().replace(' ', '_')}.png"
            url = f"http://127.0.0.1:{port}/?page={urllib.parse.quote(page)}"
            for attempt in range(4):  # a render can still be running on a busy machine: wait longer
                _shoot(chromium, url, target, width, height, budget_ms * (attempt + 1))
                if not is_blank(target):
                    break
            shots.append(target)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
    return shots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--out", type=Path, default=Path("docs") / "screenshots")
    args = parser.parse_args()
    for path in take_screenshots(args.results, args.out):
        print(path)


if __name__ == "__main__":
    main()
