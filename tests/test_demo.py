"""``qcore demo``: the whole run, its summary read back from the database, and a rerun."""

from __future__ import annotations

import re

import pytest

from qcore.cli import main
from qcore.cli.demo import always_fails, fails_once

pytestmark = pytest.mark.feature("demo")


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, int]:
    """``main(argv)``; the summary's counts by name."""
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "progress:" in out.err  # not a TTY: periodic lines, no bar
    counts = {
        name: int(value.replace(",", ""))
        for name, value in re.findall(r"^  ([a-z-]+) +([\d,]+)\b", out.out, re.M)
        if name in ("jobs", "completed", "retried", "dead-lettered")
    }
    assert re.search(r"^  engine +PostgreSQL", out.out, re.M)
    return counts


def expected(jobs: int) -> dict[str, int]:
    dead = sum(always_fails(n, jobs) for n in range(jobs))
    once = sum(fails_once(n, jobs) for n in range(jobs))
    return {"jobs": jobs, "completed": jobs - dead, "retried": dead + once, "dead-lettered": dead}


@pytest.mark.postgres
def test_demo_on_a_server_adds_up_and_runs_twice(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    want = expected(300)
    assert want["dead-lettered"] == 5 and want["retried"] > 5
    for _ in range(2):  # a second run starts from what the first left: nothing
        counts = run(capsys, ["demo", "--dsn", pg_dsn, "--jobs", "300"])
        assert counts == want
        assert counts["completed"] + counts["dead-lettered"] == counts["jobs"]


@pytest.mark.pglite
def test_demo_on_pglite(capsys: pytest.CaptureFixture[str]) -> None:
    counts = run(capsys, ["demo", "--jobs", "120", "--workers", "2", "--batch-size", "10"])
    assert counts == expected(120)


def test_demo_refuses_a_bad_count(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--jobs", "0"])
    assert "must be at least 1" in capsys.readouterr().err
