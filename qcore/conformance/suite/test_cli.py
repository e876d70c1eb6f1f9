"""The operator's command line on every backend: ``qcore create``, ``version``,
``doctor``, ``queues``, ``jobs``, ``job``, ``cancel``, ``resume``, ``delete``,
``migrate`` and the offline ``plans``, each in a subprocess against the backend's
database with ``--backend``, its JSON parsed and its exit status checked. (Every
option and error of each command is tested on PostgreSQL in ``tests/cli/``.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from qcore.backend import Backend
from qcore.conformance.provisioners import Provisioner
from qcore.context import Context
from qcore.identifiers import quote

pytestmark = pytest.mark.feature("cli")


def _cli(backend: Backend, *args: str) -> subprocess.CompletedProcess[str]:
    """``qcore ARGS --backend <backend>`` with no database setting from the environment."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PG") and k not in ("QCORE_DATABASE_URL", "DATABASE_URL")
    }
    command = [sys.executable, "-m", "qcore", *args, "--backend", backend.name]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, env=env, check=False
    )


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_the_schema_and_job_commands(
    provisioned: Provisioner, backend: Backend, db: Any, schema: str
) -> None:
    if backend.capabilities.single_session:
        pytest.skip("the command runs in a second process; this engine has one session")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return _cli(backend, *args, "--url", provisioned.url, "--schema", schema)

    created = cli("create")
    assert created.returncode == 0, created.stderr
    version = _json(cli("version", "--json"))
    assert version["installed"] == 46 and version["pending_migrations"] == []
    doctor = cli("doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert cli("migrate").stdout.strip().endswith("nothing to do")

    ctx = Context(db=db, backend=backend, schema_spec=schema)
    await db.execute(f"SELECT {ctx.q}.create_queue('mail', '{{\"policy\": \"standard\"}}')")
    rows = await db.execute(
        f"INSERT INTO {quote(schema)}.job (name, data) VALUES ('mail', $1) RETURNING id", [{"n": 1}]
    )
    job_id = str(rows[0]["id"])

    queues = _json(cli("queues", "--json"))
    assert [q["name"] for q in queues] == ["mail"]
    jobs = _json(cli("jobs", "mail", "--json"))
    assert [j["id"] for j in jobs] == [job_id]
    assert _json(cli("job", "mail", job_id, "--json"))["data"] == {"n": 1}
    assert cli("cancel", "mail", job_id).returncode == 0
    assert _json(cli("job", "mail", job_id, "--json"))["state"] == "cancelled"
    assert cli("resume", "mail", job_id).returncode == 0
    assert _json(cli("job", "mail", job_id, "--json"))["state"] == "created"
    assert cli("delete", "mail", job_id).returncode == 0
    missing = cli("job", "mail", job_id)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr


def test_plans_offline(backend: Backend) -> None:
    install = _cli(backend, "plans", "create", "--schema", "offline")
    assert install.returncode == 0, install.stderr
    assert 'INSERT INTO "offline".version (version) VALUES (46)' in install.stdout
    upgrade = _cli(backend, "plans", "migrate", "--from-version", "45")
    if backend.schema.partitioned:
        assert upgrade.returncode == 0, upgrade.stderr
        assert upgrade.stdout.rstrip().endswith('UPDATE "pgboss".version SET version = 46;')
    else:
        assert upgrade.returncode == 1 and "partitioned backend" in upgrade.stderr
