"""Summaries, the printed table and the JSON file.

Every figure is the median of the runs with their min and max. A ratio is
qcore's median over the raw baseline's median, both from the same
invocation on the same server (the per-run ratios, each from one fresh
schema, are kept too). The targets of the issue are evaluated, never
asserted.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.runner import INFORMATIONAL, PGBOSS, SCENARIOS, Scenario

__all__ = ["format_report", "results_path", "stat", "summarise", "write_json"]

RESULTS_DIR = Path(__file__).resolve().parent / "results"

#: the issue's targets (reported as met or missed, never asserted)
LATENCY_P50_MS = 5.0
LATENCY_P99_MS = 10.0
IDLE_QUERIES_PER_WORKER_PER_INTERVAL = 1.0
WORKER_RSS_MIB = 60.0
PROFILE_RATIO = 0.80
#: against the real pg-boss (``--compare pgboss``): throughput at least, latency at most
PGBOSS_THROUGHPUT_RATIO = 1.25
PGBOSS_LATENCY_RATIO = 0.80


def stat(values: Sequence[float]) -> dict[str, Any] | None:
    """Median, min and max of the runs (None when there are none)."""
    if not values:
        return None
    vals = [float(v) for v in values]
    return {
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
        "runs": vals,
    }


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    if not a or not b or not b["median"]:
        return None
    return float(a["median"] / b["median"])


def _ok(side: dict[str, Any] | None) -> bool:
    return bool(side) and not {"unavailable", "error"} & set(side)  # type: ignore[arg-type]


def _errors(runs: list[dict[str, Any]]) -> list[str]:
    return [
        f"{side}: {r['error']}"
        for run in runs
        for side, r in run.items()
        if isinstance(r, dict) and "error" in r
    ]


# --------------------------------------------------------------------------- summarise


def _throughput(scenario: Scenario, runs: list[dict[str, Any]]) -> dict[str, Any]:
    if any(PGBOSS in run for run in runs):  # the pg-boss peer ran too (--compare pgboss)
        scenario = replace(scenario, raw_sides=(*scenario.raw_sides, PGBOSS))
    sides = ["qcore", *scenario.raw_sides]
    rates: dict[str, list[float]] = {s: [] for s in sides}
    rss: dict[str, list[float]] = {s: [] for s in sides}
    per_run: dict[str, list[float]] = {s: [] for s in scenario.raw_sides}
    problems: list[str] = []
    for run in runs:
        for side in sides:
            r = run.get(side)
            if _ok(r):
                rates[side].append(r["jobs"] / r["elapsed"])  # type: ignore[index]
                rss[side].append(r["peak_rss_mib"])  # type: ignore[index]
        for side in scenario.raw_sides:
            q, r = run.get("qcore"), run.get(side)
            if _ok(q) and _ok(r):
                per_run[side].append(
                    (q["jobs"] / q["elapsed"]) / (r["jobs"] / r["elapsed"])  # type: ignore[index]
                )
        for side, found in run.get("problems", {}).items():
            problems += [f"{side}: {p}" for p in found]
    out: dict[str, Any] = {
        "unit": "jobs/s",
        "qcore": stat(rates["qcore"]),
        "raw": stat(rates["raw"]),
        "ratio": _ratio(stat(rates["qcore"]), stat(rates["raw"])),
        "ratio_runs": stat(per_run["raw"]),
        "peak_rss_mib": {side: stat(v) for side, v in rss.items() if v},
        "problems": problems,
    }
    cpu: dict[str, dict[str, Any]] = {}
    for side in sides:
        per_job: dict[str, list[float]] = {"client": [], "server": []}
        for run in runs:
            r = run.get(side)
            if not _ok(r) or not r.get("jobs"):  # type: ignore[union-attr]
                continue
            for where in ("client", "server"):
                value = r.get(f"{where}_cpu_s")  # type: ignore[union-attr]
                if value is not None:
                    per_job[where].append(value / r["jobs"] * 1e6)  # type: ignore[index]
        if per_job["client"]:
            cpu[side] = {where: stat(v) for where, v in per_job.items() if v}
    out["cpu_us_per_job"] = cpu
    extra = [s for s in scenario.raw_sides if s != "raw" and rates[s]]
    if extra:
        out["other_baselines"] = {
            side: {
                "rate": stat(rates[side]),
                "ratio": _ratio(stat(rates["qcore"]), stat(rates[side])),
                "ratio_runs": stat(per_run[side]),
            }
            for side in extra
        }
    checks = [run.get("check", {}) for run in runs]
    payload = [c["payload_bytes"] for c in checks if "payload_bytes" in c]
    if payload:
        out["payload_bytes"] = payload[0]
    retried = [run["raw"].get("retries", 0) for run in runs if _ok(run.get("raw"))]
    if any(retried):
        out["raw_retries"] = stat(retried)
    if scenario.drain:
        polls = [run["qcore"].get("empty_polls", 0) for run in runs if _ok(run.get("qcore"))]
        if polls and any(polls):
            out["qcore_empty_fetches"] = stat(polls)
    return out


_LATENCY_KEYS = ("send_p50_ms", "send_p99_ms", "wake_p50_ms", "wake_p99_ms")


def _latency(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [run["qcore"] for run in runs if _ok(run.get("qcore"))]
    peer = [run[PGBOSS] for run in runs if _ok(run.get(PGBOSS))]
    out = _latency_figures(ok)
    if peer:  # the pg-boss peer ran too (--compare pgboss): its figures and the ratios
        theirs = _latency_figures(peer)
        out[PGBOSS] = theirs
        out["pgboss_ratio"] = {
            key: _ratio(out[key], theirs[key]) for key in ("p50_ms", "p99_ms", *_LATENCY_KEYS)
        }
    return out


def _latency_figures(ok: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "unit": "ms",
        "p50_ms": stat([r["p50_ms"] for r in ok]),
        "p99_ms": stat([r["p99_ms"] for r in ok]),
        "max_ms": stat([r["max_ms"] for r in ok]),
        **{key: stat([r[key] for r in ok]) for key in _LATENCY_KEYS if ok and key in ok[0]},
        "samples_per_run": ok[0]["samples"] if ok else 0,
    }


def _idle(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [run["qcore"] for run in runs if _ok(run.get("qcore"))]
    return {
        "workers": ok[0]["workers"] if ok else None,
        "seconds": ok[0]["seconds"] if ok else None,
        "polling_interval_seconds": ok[0]["polling_interval_seconds"] if ok else None,
        "queries_per_second": stat([r["queries_per_second"] for r in ok]),
        "queries_per_worker_per_interval": stat([r["queries_per_worker_per_interval"] for r in ok]),
        "cpu_percent": stat([r["cpu_percent"] for r in ok]),
        "statements": stat([r["statements"] for r in ok]),
        "transactions": stat([r["transactions"] for r in ok]),
    }


def _status(runs: list[dict[str, Any]], note: str | None) -> str:
    if note and note.startswith("n/a"):
        return "n/a"
    if note:
        return "unavailable"
    if any(run.get("problems") for run in runs):
        return "check failed"
    if _errors(runs):
        return "errors"
    return "ok"


def summarise(results: dict[str, Any]) -> dict[str, Any]:
    """Figures, ratios, profile comparison and targets from :func:`bench.runner.run`."""
    meta = results["meta"]
    jobs = int(meta["jobs"])
    profiles: dict[str, Any] = {}
    for profile, by_scenario in results["runs"].items():
        figures: dict[str, Any] = {}
        for scenario in SCENARIOS:
            if scenario.name not in by_scenario:
                continue
            runs = by_scenario[scenario.name]
            note = results["notes"][profile].get(scenario.name)
            skip_locked = meta["fetch_strategies"][profile] == "skip_locked"
            entry: dict[str, Any] = {
                "label": scenario.title(jobs),
                "kind": scenario.kind,
                "qcore_label": scenario.qcore_label,
                "raw_label": scenario.raw_title(skip_locked),
                "status": _status(runs, note),
                "note": note,
                "runs": len(runs),
                "errors": _errors(runs),
            }
            if scenario.kind == "throughput":
                entry.update(_throughput(scenario, runs))
                if scenario.target_ratio is not None:
                    entry["target_ratio"] = scenario.target_ratio
            elif scenario.kind == "latency":
                entry.update(_latency(runs))
            else:
                entry.update(_idle(runs))
            figures[scenario.name] = entry
        figures["memory"] = _memory(figures)
        profiles[profile] = figures
    summary: dict[str, Any] = {"meta": meta, "profiles": profiles}
    summary["comparison"] = _comparison(meta["profiles"], profiles, jobs)
    summary["targets"] = _targets(meta["profiles"], profiles, summary["comparison"])
    summary["notes"] = results["notes"]
    summary["runs"] = results["runs"]  # every child's own result, for a closer look
    return summary


def _memory(figures: dict[str, Any]) -> dict[str, Any]:
    """Peak RSS of the worker (qcore) process in each drain scenario, and of the raw
    client process for reference."""
    qcore: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    for scenario in SCENARIOS:
        entry = figures.get(scenario.name)
        if not scenario.drain or not entry:
            continue
        rss = entry.get("peak_rss_mib", {})
        if rss.get("qcore"):
            qcore[scenario.name] = rss["qcore"]
        if rss.get("raw"):
            raw[scenario.name] = rss["raw"]
    peak = max((s["max"] for s in qcore.values()), default=None)
    return {"unit": "MiB", "qcore": qcore, "raw_client": raw, "peak_mib": peak}


def _comparison(names: list[str], profiles: dict[str, Any], jobs: int) -> dict[str, Any]:
    """Each other profile's qcore throughput over the main profile's, per scenario."""
    main = names[0]
    out: dict[str, Any] = {}
    for other in names[1:]:
        rows: dict[str, Any] = {}
        for scenario in SCENARIOS:
            a = profiles[main].get(scenario.name)
            b = profiles[other].get(scenario.name)
            if not a or not b or scenario.kind != "throughput":
                continue
            qa, qb = a.get("qcore"), b.get("qcore")
            paired = (
                [y / x for x, y in zip(qa["runs"], qb["runs"], strict=True) if x]
                if qa and qb and len(qa["runs"]) == len(qb["runs"])
                else []
            )
            rows[scenario.name] = {
                "label": scenario.title(jobs),
                main: qa,
                other: qb,
                "ratio": _ratio(qb, qa),
                # each repeat ran both profiles back to back: the ratio within each repeat
                "ratio_runs": stat(paired),
                "drain": scenario.drain,
            }
        out[f"{other}/{main}"] = rows
    return out


def _target(
    name: str, profile: str, goal: str, value: float | None, limit: float, higher: bool
) -> dict[str, Any]:
    met = None if value is None else (value >= limit if higher else value <= limit)
    margin = None if value is None else (value - limit)
    return {
        "target": name,
        "profile": profile,
        "goal": goal,
        "value": value,
        "met": met,
        "margin": margin,
    }


def _targets(
    names: list[str], profiles: dict[str, Any], comparison: dict[str, Any]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for profile in names:
        figures = profiles[profile]
        for scenario in SCENARIOS:
            entry = figures.get(scenario.name)
            if not entry or scenario.target_ratio is None:
                continue
            limit = scenario.target_ratio
            out.append(
                _target(
                    f"{scenario.name} ratio to raw",
                    profile,
                    f">= {limit:.2f}",
                    entry.get("ratio"),
                    limit,
                    True,
                )
            )
        for scenario in SCENARIOS:
            peer = figures.get(scenario.name, {}).get("other_baselines", {}).get(PGBOSS)
            if scenario.kind == "throughput" and peer:
                out.append(
                    _target(
                        f"{scenario.name} ratio to pg-boss",
                        profile,
                        f">= {PGBOSS_THROUGHPUT_RATIO:.2f}",
                        peer["ratio"],
                        PGBOSS_THROUGHPUT_RATIO,
                        True,
                    )
                )
        latency = figures.get("wakeup_latency")
        if latency and latency["status"] != "n/a":
            for key, limit in (("p50_ms", LATENCY_P50_MS), ("p99_ms", LATENCY_P99_MS)):
                value = latency[key]["median"] if latency.get(key) else None
                out.append(
                    _target(
                        f"wake-up latency {key[:3]}",
                        profile,
                        f"<= {limit:g} ms",
                        value,
                        limit,
                        False,
                    )
                )
            if latency.get("pgboss_ratio"):
                out.append(
                    _target(
                        "wake-up latency p50 ratio to pg-boss",
                        profile,
                        f"<= {PGBOSS_LATENCY_RATIO:.2f}",
                        latency["pgboss_ratio"]["p50_ms"],
                        PGBOSS_LATENCY_RATIO,
                        False,
                    )
                )
        idle = figures.get("idle")
        if idle:
            per = idle.get("queries_per_worker_per_interval")
            out.append(
                _target(
                    "idle queries per worker per polling interval",
                    profile,
                    f"<= {IDLE_QUERIES_PER_WORKER_PER_INTERVAL:g}",
                    per["median"] if per else None,
                    IDLE_QUERIES_PER_WORKER_PER_INTERVAL,
                    False,
                )
            )
        memory = figures.get("memory")
        if memory and (memory["qcore"] or any(figures.get(s.name) for s in SCENARIOS if s.drain)):
            out.append(
                _target(
                    "worker process peak RSS",
                    profile,
                    f"<= {WORKER_RSS_MIB:g} MiB",
                    memory["peak_mib"],
                    WORKER_RSS_MIB,
                    False,
                )
            )
    for pair, rows in comparison.items():
        for name, row in rows.items():
            if row["drain"]:
                out.append(
                    _target(
                        f"{name} profile ratio {pair}",
                        pair.split("/")[0],
                        f">= {PROFILE_RATIO:.2f}",
                        row["ratio"],
                        PROFILE_RATIO,
                        True,
                    )
                )
    return out


# --------------------------------------------------------------------------- text


def _ratio_text(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _num(value: float, unit: str) -> str:
    if unit == "jobs/s":
        return f"{value:,.0f}"
    if unit == "ms":
        return f"{value:.2f}"
    return f"{value:.2f}"


def _fig(s: dict[str, Any] | None, unit: str) -> str:
    if not s:
        return "—"
    return f"{_num(s['median'], unit)} {unit} ({_num(s['min'], unit)}–{_num(s['max'], unit)})"


def _verdict(target: dict[str, Any] | None) -> str:
    if target is None:
        return ""
    if target["met"] is None:
        return f"{target['goal']}: not measured"
    return f"{target['goal']}: {'met' if target['met'] else 'MISSED'}"


def _find(targets: list[dict[str, Any]], name: str, profile: str) -> dict[str, Any] | None:
    for t in targets:
        if t["target"] == name and t["profile"] == profile:
            return t
    return None


def format_report(summary: dict[str, Any]) -> str:
    meta = summary["meta"]
    lines: list[str] = []
    server = meta["server"]
    lines.append(
        f"qcore bench — {meta['date']} — {meta['cpu_count']} CPU cores — PostgreSQL"
        f" {server.get('server_version')} (synchronous_commit={server.get('synchronous_commit')},"
        f" fsync={server.get('fsync')}) — {meta['jobs']:,} jobs — median of"
        f" {meta['repeat']} run(s) (min–max), each on a fresh schema"
    )
    for profile, figures in summary["profiles"].items():
        lines += ["", f"## {profile} profile", ""]
        lines += _profile_table(profile, figures, summary["targets"])
    for pair, rows in summary["comparison"].items():
        if not rows:
            continue
        other, main = pair.split("/")
        lines += ["", f"## {other} profile vs {main} profile (qcore, same server, same run)", ""]
        lines.append(f"| scenario | {main} | {other} | {other} / {main} | target |")
        lines.append("|---|---|---|---|---|")
        for name, row in rows.items():
            t = _find(summary["targets"], f"{name} profile ratio {pair}", other)
            ratio = "—" if row["ratio"] is None else f"{row['ratio']:.2f}"
            if row.get("ratio_runs"):
                rr = row["ratio_runs"]
                ratio += f" (per repeat {rr['min']:.2f}–{rr['max']:.2f})"
            lines.append(
                f"| {row['label']} | {_fig(row[main], 'jobs/s')} | {_fig(row[other], 'jobs/s')}"
                f" | {ratio} | {_verdict(t)} |"
            )
    lines += ["", "## targets", ""]
    for t in summary["targets"]:
        value = "—" if t["value"] is None else f"{t['value']:.3f}"
        verdict = "not measured" if t["met"] is None else ("met" if t["met"] else "MISSED")
        margin = "" if t["margin"] is None else f" (margin {t['margin']:+.3f})"
        lines.append(f"- [{t['profile']}] {t['target']} {t['goal']}: {value} — {verdict}{margin}")
    return "\n".join(lines)


def _profile_table(
    profile: str, figures: dict[str, Any], targets: list[dict[str, Any]]
) -> list[str]:
    lines = [
        "| scenario | qcore | raw baseline (same server, same run) | ratio | target |",
        "|---|---|---|---|---|",
    ]
    legend: list[str] = []
    for scenario in SCENARIOS:
        entry = figures.get(scenario.name)
        if not entry:
            continue
        status = entry["status"]
        if scenario.kind == "throughput":
            ratio = "—" if entry["ratio"] is None else f"{entry['ratio']:.2f}"
            if entry.get("ratio_runs"):
                rr = entry["ratio_runs"]
                ratio += f" ({rr['min']:.2f}–{rr['max']:.2f})"
            qcore = _fig(entry["qcore"], "jobs/s") if status != "unavailable" else status
            t = _find(targets, f"{scenario.name} ratio to raw", profile)
            lines.append(
                f"| {entry['label']} | {qcore} | {_fig(entry['raw'], 'jobs/s')} | {ratio}"
                f" | {_verdict(t)} |"
            )
            legend.append(
                f"- {entry['label']}: qcore = {scenario.qcore_label}; raw = {entry['raw_label']}"
            )
            cpu = entry.get("cpu_us_per_job", {})
            if cpu:
                legend.append(
                    "  - CPU per job (µs, median): "
                    + "; ".join(
                        f"{side} client {v['client']['median']:.0f}"
                        + (f" + server {v['server']['median']:.0f}" if v.get("server") else "")
                        for side, v in cpu.items()
                    )
                )
            for side, other in entry.get("other_baselines", {}).items():
                r = "—" if other["ratio"] is None else f"{other['ratio']:.2f}"
                legend.append(
                    f"  - informational baseline {side} ({INFORMATIONAL[side]}):"
                    f" {_fig(other['rate'], 'jobs/s')}, qcore / {side} = {r}"
                )
            if entry.get("problems"):
                legend.append(f"  - CHECK FAILED: {'; '.join(entry['problems'])}")
            if entry.get("errors"):
                legend.append(f"  - ERRORS: {'; '.join(entry['errors'])}")
            if entry.get("raw_retries"):
                legend.append(
                    f"  - the raw claim was run again after a deadlock/serialization failure"
                    f" {entry['raw_retries']['median']:.0f} times per run (median)"
                )
        elif scenario.kind == "latency":
            if status in ("n/a", "unavailable"):
                lines.append(f"| {entry['label']} | {entry['note']} | — | | |")
                continue
            for key in ("p50_ms", "p99_ms"):
                t = _find(targets, f"wake-up latency {key[:3]}", profile)
                lines.append(
                    f"| {entry['label']}, {key[:3]} | {_fig(entry[key], 'ms')} | — (absolute) |"
                    f" | {_verdict(t)} |"
                )
            legend.append(
                f"- {entry['label']}: {scenario.qcore_label}; {entry['samples_per_run']}"
                f" samples per run; max {_fig(entry['max_ms'], 'ms')}; send() itself"
                f" {_fig(entry['send_p50_ms'], 'ms')} (p50)"
            )
            theirs = entry.get(PGBOSS)
            if theirs:
                ratio = entry["pgboss_ratio"]
                t = _find(targets, "wake-up latency p50 ratio to pg-boss", profile)
                lines.append(
                    f"| {entry['label']}, p50 against pg-boss | {_fig(entry['p50_ms'], 'ms')}"
                    f" | pg-boss {_fig(theirs['p50_ms'], 'ms')} | {_ratio_text(ratio['p50_ms'])}"
                    f" | {_verdict(t)} |"
                )
                legend.append(
                    f"  - pg-boss ({INFORMATIONAL[PGBOSS]}, useListenNotify on, polling 2 s):"
                    f" p50 {_fig(theirs['p50_ms'], 'ms')}, p99 {_fig(theirs['p99_ms'], 'ms')},"
                    f" send() {_fig(theirs['send_p50_ms'], 'ms')} (p50), after it"
                    f" {_fig(theirs['wake_p50_ms'], 'ms')} (p50); qcore / pg-boss p50"
                    f" {_ratio_text(ratio['p50_ms'])}, p99 {_ratio_text(ratio['p99_ms'])},"
                    f" after send() p50 {_ratio_text(ratio['wake_p50_ms'])}"
                )
            if "wake_p99_ms" in entry:
                legend.append(
                    f"  - split: send() returning (INSERT + commit) p50"
                    f" {_fig(entry['send_p50_ms'], 'ms')}, p99 {_fig(entry['send_p99_ms'], 'ms')};"
                    f" after it, to the handler (NOTIFY, fetch + commit) p50"
                    f" {_fig(entry['wake_p50_ms'], 'ms')}, p99 {_fig(entry['wake_p99_ms'], 'ms')}"
                )
        else:
            if status == "unavailable":
                lines.append(f"| {entry['label']} | {entry['note']} | — | | |")
                continue
            t = _find(targets, "idle queries per worker per polling interval", profile)
            qps = entry["queries_per_second"]
            per = entry["queries_per_worker_per_interval"]
            cpu = entry["cpu_percent"]
            text = (
                f"{_fig(qps, 'q/s')}; {_fig(per, 'per worker per interval')}; CPU {_fig(cpu, '%')}"
            )
            lines.append(
                f"| {entry['label']}, {entry['workers']} workers, {entry['seconds']:.0f} s"
                f" | {text} | — | | {_verdict(t)} |"
            )
    memory = figures.get("memory", {})
    if memory.get("qcore") or any(
        figures.get(s.name, {}).get("status") == "unavailable" for s in SCENARIOS if s.drain
    ):
        parts = [f"{name}: {_fig(s, 'MiB')}" for name, s in memory.get("qcore", {}).items()] or [
            "worker scenarios unavailable"
        ]
        raw = "; ".join(f"{n}: {s['median']:.0f} MiB" for n, s in memory["raw_client"].items())
        t = _find(targets, "worker process peak RSS", profile)
        lines.append(
            f"| memory, peak RSS of the worker process | {'; '.join(parts)} | —"
            f" (raw client process: {raw or '—'}) | | {_verdict(t)} |"
        )
    return [*lines, "", *legend]


# --------------------------------------------------------------------------- JSON


def results_path(backend: str, directory: Path = RESULTS_DIR) -> Path:
    """``bench/results/<date>-<backend>.json``; ``-2``, ``-3`` … when that exists."""
    day = dt.date.today().isoformat()
    path = directory / f"{day}-{backend}.json"
    n = 2
    while path.exists():
        path = directory / f"{day}-{backend}-{n}.json"
        n += 1
    return path


def write_json(summary: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return path
