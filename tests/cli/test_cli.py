"""The ``qcore`` command's own surface: ``--version``, help, usage errors (exit status
as argparse gives it)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest

from qcore.cli import main

pytestmark = pytest.mark.feature("cli")


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"qcore {version('qcore-queue')}"


def test_help_exits_0_and_names_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "usage: qcore" in out and "demo" in out and "--version" in out


def test_no_command_prints_the_help_as_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "usage: qcore" in captured.err and "demo" in captured.err


@pytest.mark.parametrize("argv", [["bogus"], ["demo", "--jobs", "0"], ["demo", "--nope"]])
def test_usage_errors_exit_2_and_say_what_is_wrong(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "qcore" in capsys.readouterr().err


def test_the_installed_script_answers() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "qcore", "--version"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.startswith("qcore ")
