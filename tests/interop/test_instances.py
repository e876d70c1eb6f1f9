"""The instance registry shared with the real pg-boss 12.38 on one schema: each lists
the other's rows, and their liveness and shapes agree. Local PostgreSQL only."""

from __future__ import annotations

from qcore import Boss
from qcore.context import Context
from tests.interop.pgboss import in_thread, interop_marks

pytestmark = interop_marks()


async def test_each_runtime_lists_the_others_rows(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    async with Boss(
        pg_dsn,
        schema=ctx.schema_spec,
        supervise=False,
        schedule=False,
        register_instance=True,
        instance_name="py-1",
    ) as boss:
        results = await in_thread(pg_dsn, ctx, {"op": "getInstances", "args": [{}]})
        listed = {row["name"]: row for row in results[0]}
        mine = listed["py-1"]
        assert mine["live"] is True and mine["id"] == str(boss.instance_id)
        assert mine["nodeVersion"].startswith("Python ")
        assert mine["applicationName"] == f"qcore:{str(boss.instance_id)[:8]}"
        assert mine["config"]["adapter"] == "qcore" and mine["workers"] == []
        # pg-boss registered itself too, and stopped: qcore reads its row
        theirs = [i for i in await boss.get_instances() if i.id != boss.instance_id]
        assert len(theirs) == 1 and not theirs[0].live and theirs[0].stopped_on is not None
        assert theirs[0].node_version.startswith("v") and theirs[0].config["adapter"] == "pg"
