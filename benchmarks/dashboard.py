"""Dashboard speed as felt: each page's first open in a real browser (issue 43, target: every page
<= 2 s on first open on 2 cores with the quickstart's results, the Live page's first view of a new
sentence <= 2 s once the model is loaded).

One dashboard server on RESULTS (the quickstart's results folder) and one headless Chromium tab
(:mod:`bertology.apps.screenshots`); each page is opened by its deep link, in registry order, and
timed from the request to its title with the script run finished (the Live page: its charts):
``first`` is its first open in that server (nothing of it cached yet), with the server's CPU
seconds in it (every thread: what the page costs with no one else on the cores), ``again`` a
second open.
The server's own start (imports) is timed apart, on a request that renders no page. The Live page
opens on ``--model`` (first open: the model is loaded), then a new sentence is typed: ``first`` is
that sentence's view, the model already loaded. ``--rounds N`` repeats everything with a fresh
server N times and prints the median of each column; ``--baseline DIR`` times the same pages with
the package found first in DIR (a copy of the tree before a change, laid out as an installed
``bertology``), interleaved round by round with the working tree, under the same load.

    .venv/bin/python benchmarks/dashboard.py RESULTS [--rounds 3] [--baseline DIR] [--model minilm-l6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 2.0
NEW_SENTENCE = "the cat sat down"  # 4 words: the caption says "for 4 words" when it is drawn


def time_pages(results: Path, model: str) -> dict[str, dict[str, float]]:
    """``{page: {"first": s, "again": s}}`` and ``"(server start)"``: one server, one browser tab."""
    from bertology.apps import screenshots
    from bertology.apps.pages import PAGES

    times: dict[str, dict[str, float]] = {}
    t0 = time.perf_counter()
    with screenshots.serve(results) as base, screenshots.browser() as tab:
        server = server_pid()
        times["(server start)"] = {"first": time.perf_counter() - t0, "first cpu": cpu_seconds(server)}
        for page in PAGES:
            c0 = cpu_seconds(server)
            times[page.key] = {"first": open_seconds(tab, base, page.key, results, model)}
            times[page.key]["first cpu"] = cpu_seconds(server) - c0
        for page in PAGES:
            times[page.key]["again"] = open_seconds(tab, base, page.key, results, model)
        open_seconds(tab, base, "Live", results, model)  # the model loaded: a new sentence on it
        c0 = cpu_seconds(server)
        times["Live (new sentence)"] = {"first": new_sentence_seconds(tab), "first cpu": cpu_seconds(server) - c0}
    return times


def server_pid() -> int:
    """The dashboard server this process started (its child running ``streamlit``)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
            if int(fields[1]) == os.getpid() and (b"streamlit" in command or b"bertology.apps.serve" in command):
                return int(stat.parent.name)
        except (OSError, IndexError, ValueError):
            continue
    raise RuntimeError("no streamlit server among this process's children")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, every thread (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_seconds(tab, base: str, key: str, results: Path, model: str) -> float:
    """Seconds from the request of page ``key`` to its content, script run finished."""
    from bertology.apps import screenshots

    # the Live page: its charts; a study page: its title, then the script run finished (the charts a
    # page shows depend on the runs it finds: the registry's counts are the tour's)
    wanted = None if key == "Live" else 0
    params = {"model": model} if key == "Live" else {}
    t0 = time.perf_counter()
    screenshots.open_page(tab, base, key, params, charts=wanted, tables=wanted, polling="raf")
    return time.perf_counter() - t0


def new_sentence_seconds(tab) -> float:
    """On the open Live page: seconds from typing a new sentence (Enter) to its figures."""
    from bertology.apps import screenshots

    box = tab.get_by_label("sentence (press Enter)")
    box.fill(NEW_SENTENCE)
    t0 = time.perf_counter()
    box.press("Enter")
    tab.get_by_text(f"for {len(NEW_SENTENCE.split())} words").first.wait_for()
    screenshots.settle(tab, 240_000, "raf")
    return time.perf_counter() - t0


def one_round(results: Path, model: str, tree: Path | None) -> dict[str, dict[str, float]]:
    """:func:`time_pages` in a child process (``tree``: found first on its ``PYTHONPATH``)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(results), "--model", model, "--child"],
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"timing {tree or 'the working tree'} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def medians(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per page and column, the median over rounds."""
    return {
        page: {col: statistics.median(r[page][col] for r in rounds) for col in rounds[0][page]} for page in rounds[0]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a results folder (the quickstart's)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", type=Path, default=None, help="a tree to time first, round by round")
    parser.add_argument("--model", default="minilm-l6", help="the Live page's model")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one round, run by one_round
    args = parser.parse_args()
    if args.child:  # run as a script, this folder is on sys.path (common.py) and PYTHONPATH picks the tree
        print(json.dumps(time_pages(args.results, args.model)))
        return
    trees = {"now": None} if args.baseline is None else {"baseline": args.baseline.resolve(), "now": None}
    rounds: dict[str, list] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            rounds[name].append(one_round(args.results.resolve(), args.model, tree))
            print(json.dumps({name: rounds[name][-1]}), flush=True)  # the raw times, as they come
    table = {name: medians(r) for name, r in rounds.items()}
    print_times(table, args.rounds)


def print_times(table: dict[str, dict[str, dict[str, float]]], rounds: int) -> None:
    """One row per page: first open and second open per tree, and whether the first meets the target."""
    from common import print_table

    names = list(table)
    rows = []
    for page in table["now"]:
        row = {"page": page}
        for name in names:
            times = table[name].get(page, {})  # a page one tree does not have: "-"
            for column, key in (("first s", "first"), ("server cpu s", "first cpu"), ("again s", "again")):
                row[f"{name} {column}"] = round(times[key], 2) if key in times else "-"
        first = table["now"][page]["first"]
        row[f"<= {TARGET_S:g} s"] = (
            "-" if page in ("(server start)", "Live") else ("yes" if first <= TARGET_S else "NO")
        )
        rows.append(row)
    load = os.getloadavg()[0]
    print_table(rows, f"Dashboard pages, seconds to content in Chromium (median of {rounds}; load {load:.1f})")


if __name__ == "__main__":
    main()
