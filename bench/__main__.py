"""``python -m bench run``: the benchmark table, as text on stdout and as JSON.

    python -m bench run [--backend postgres|cockroachdb|…] [--dsn DSN] [--jobs N]
                        [--repeat R] [--scenarios a,b,…] [--compare NAME,…|none]
    python -m bench list
    python -m bench profile SCENARIO [--backend NAME] [--jobs N] [--tool cprofile|pyinstrument]
    python -m bench report PATH [--rewrite]

Progress goes to stderr; the table to stdout; the JSON to
``bench/results/<date>-<backend>.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from bench import report
from bench.common import progress
from bench.runner import (
    DEFAULT_DSN,
    FULL_JOBS,
    GROUPS,
    PGBOSS,
    SCENARIOS,
    BenchError,
    Config,
    run,
    select_scenarios,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the scenarios and print the table")
    r.add_argument("--backend", default="postgres", help="backend profile (default postgres)")
    r.add_argument(
        "--compare",
        default=None,
        help="other profiles to run on the same server and compare with --backend, and/or"
        " pgboss (the real pg-boss as a peer side of each throughput scenario it has)"
        " (comma-separated, or 'none'; default: cockroachdb when --backend is postgres)",
    )
    r.add_argument("--dsn", default=DEFAULT_DSN, help=f"the server (default {DEFAULT_DSN})")
    r.add_argument(
        "--jobs",
        type=int,
        default=FULL_JOBS,
        help=f"jobs per throughput scenario (default {FULL_JOBS:,}); fewer also shortens the"
        " idle window and the latency samples in proportion",
    )
    r.add_argument("--repeat", type=int, default=3, help="runs per figure (default 3)")
    r.add_argument(
        "--scenarios",
        default="all",
        help="comma-separated scenario or group names (see `python -m bench list`)",
    )
    r.add_argument("--idle-seconds", type=float, default=None, help="idle window (default 30 s)")
    r.add_argument(
        "--latency-samples", type=int, default=None, help="wake-up samples per run (default 500)"
    )
    r.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/)")
    sub.add_parser("list", help="list the scenarios and groups")
    p = sub.add_parser("profile", help="run one scenario's qcore half under a profiler")
    p.add_argument("scenario", choices=[s.name for s in SCENARIOS])
    p.add_argument("--backend", default="postgres")
    p.add_argument("--dsn", default=DEFAULT_DSN)
    p.add_argument("--jobs", type=int, default=FULL_JOBS)
    p.add_argument("--tool", choices=["cprofile", "pyinstrument"], default="cprofile")
    rep = sub.add_parser("report", help="print the table of a results JSON again")
    rep.add_argument("path", type=Path)
    rep.add_argument(
        "--rewrite", action="store_true", help="also rewrite the JSON's summary in place"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        for s in SCENARIOS:
            print(f"{s.name:22} {s.title(FULL_JOBS)}: {s.qcore_label}")
        for name, members in GROUPS.items():
            print(f"{name:22} = {', '.join(members)}")
        return 0
    if args.command == "report":
        import json

        saved = json.loads(args.path.read_text())
        summary = report.summarise(
            {"meta": saved["meta"], "runs": saved["runs"], "notes": saved["notes"]}
        )
        if args.rewrite:
            report.write_json(summary, args.path)
        print(report.format_report(summary))
        return 0
    if args.command == "profile":
        from bench.profile import profile

        print(profile(args.dsn, args.backend, args.scenario, args.jobs, args.tool))
        return 0
    if args.jobs < 1 or args.repeat < 1:
        print("--jobs and --repeat must be at least 1", file=sys.stderr)
        return 2
    if args.compare is None:
        compare = ["cockroachdb"] if args.backend == "postgres" else []
    elif args.compare.strip().lower() in ("", "none"):
        compare = []
    else:
        compare = [c.strip() for c in args.compare.split(",") if c.strip()]
    peer = PGBOSS in compare  # the real pg-boss: a side of the run, not a backend profile
    compare = [c for c in compare if c != PGBOSS]
    try:
        cfg = Config(
            pgboss=peer,
            dsn=args.dsn,
            backend=args.backend,
            compare=compare,
            jobs=args.jobs,
            repeat=args.repeat,
            scenarios=select_scenarios(args.scenarios),
            idle_seconds=args.idle_seconds,
            latency_samples=args.latency_samples,
        )
        results = asyncio.run(run(cfg))
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    summary = report.summarise(results)
    path = report.write_json(summary, args.out or report.results_path(args.backend))
    print(report.format_report(summary))
    progress(f"JSON written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
