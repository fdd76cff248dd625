"""The benchmark report shows the newest commit's runs in its main tables and keeps earlier commits on a page apart."""
from __future__ import annotations

import subprocess
from pathlib import Path

from bench.__main__ import code_source
from bench.plot import TOOL_COLOURS, tool_colour
from bench.report import current_invocations, latest_source, write_markdown

META = {"command": "python -m bench", "date": "d", "machine": "m", "server": "s", "sizes": [1000], "alter": "a",
        "light_rate": 1, "heavy_rate": 2, "load_threads": 1, "baseline_s": 1.0, "repetitions": 1,
        "time_limit_s": 1.0}


def run(tool: str, seconds: float, invocation: int) -> dict:
    return {"tool": tool, "scenario": "idle", "rows": 1000, "repetition": 0, "finished": True, "seconds": seconds,
            "load_tx_per_s": 0, "invocation": invocation}


def test_main_tables_show_only_the_newest_commit_and_earlier_ones_follow(tmp_path: Path):
    invocations = [{**META, "stream_osc_source": "old1111"}, {**META, "stream_osc_source": "new2222"}]
    runs = [run("stream-osc", 99.0, 0), run("server-copy", 33.0, 0),
            run("stream-osc", 12.0, 1), run("server-copy", 10.0, 1)]
    path = tmp_path / "benchmarks.md"
    write_markdown(path, invocations, runs, plots=[])
    current, earlier = path.read_text(), (tmp_path / "benchmarks-history.md").read_text()
    assert "| 1,000 | idle | stream-osc | 12.0 |" in current and "99.0" not in current
    assert "[benchmarks-history.md](benchmarks-history.md)" in current
    assert "### At old1111" in earlier and "| 1,000 | idle | stream-osc | 99.0 |" in earlier
    assert "12.0" not in earlier


def test_every_tool_keeps_its_colour():
    assert len(set(TOOL_COLOURS.values())) == len(TOOL_COLOURS)
    assert tool_colour("stream-osc") == TOOL_COLOURS["stream-osc"]
    assert tool_colour("unknown") not in TOOL_COLOURS.values()


def test_the_current_invocations_are_those_of_the_newest_commit_measured():
    invocations = [{"stream_osc_source": "abc"}, {"stream_osc_source": "def"}, {"stream_osc_source": "abc"}]
    assert (latest_source(invocations), current_invocations(invocations)) == ("abc", [0, 2])
    assert (latest_source([]), current_invocations([])) == (None, [])


def test_the_measured_code_is_named_by_its_commit_and_only_code_changes_mark_it(tmp_path: Path):
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "tests").mkdir()
    for name in ("docs/benchmarks.md", "README.md", "tests/test_tool.py", "tool.py"):
        (tmp_path / name).write_text("a\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    (tmp_path / "docs/benchmarks.md").write_text("the report, rewritten by the benchmark\n")
    (tmp_path / "README.md").write_text("prose\n")
    (tmp_path / "tests/test_tool.py").write_text("a test the benchmark does not run\n")
    assert code_source(tmp_path) == commit
    (tmp_path / "tool.py").write_text("changed code\n")
    assert code_source(tmp_path) == f"{commit} with uncommitted changes"
