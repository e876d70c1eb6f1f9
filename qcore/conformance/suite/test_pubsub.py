"""Publish/subscribe on every backend: subscriptions in pg-boss's table, one job per
subscribed queue, a queue's failure reported without stopping the others."""

from __future__ import annotations

import pytest

from qcore import Boss
from qcore.conformance.helpers import count, totals
from qcore.errors import PublishError, QueueNotFoundError, ValidationError

pytestmark = pytest.mark.feature("pubsub")


async def test_publish_sends_one_job_to_each_subscribed_queue(boss: Boss) -> None:
    for name in ("audit", "mail", "other"):
        await boss.create_queue(name)
    await boss.subscribe("user.created", "audit")
    await boss.subscribe("user.created", "mail")
    await boss.subscribe("user.deleted", "other")
    sent = await boss.publish("user.created", {"user": 7}, priority=3)
    assert sorted(sent) == ["audit", "mail"]
    for name, job_id in sent.items():
        assert job_id is not None
        job = await boss.get_job_by_id(name, job_id)
        assert job is not None and job.data == {"user": 7} and job.priority == 3
    assert await count(boss.context(), "job", "name = $1", "other") == 0
    assert await boss.publish("nobody.listens", {"x": 1}) == {}


async def test_subscribe_again_and_unsubscribe(boss: Boss) -> None:
    await boss.create_queue("a")
    await boss.create_queue("b")
    await boss.subscribe("e", "a")
    await boss.subscribe("e", "a")  # again: still one subscription
    await boss.subscribe("e", "b")
    ctx = boss.context()
    assert await count(ctx, "subscription", "event = $1", "e") == 2
    assert await boss.unsubscribe("e", "a") is True
    assert await boss.unsubscribe("e", "a") is False
    assert sorted(await boss.publish("e")) == ["b"]
    await boss.delete_queue("b")  # its subscriptions go with it
    assert await count(ctx, "subscription") == 0
    assert await boss.publish("e") == {}


async def test_bad_input_is_refused_before_anything_is_written(boss: Boss) -> None:
    await boss.create_queue("a")
    before = await totals(boss.context())
    with pytest.raises(QueueNotFoundError, match="'missing' does not exist"):
        await boss.subscribe("e", "missing")
    for bad in ("", None, 5):
        for call in (
            boss.subscribe(bad, "a"),  # type: ignore[arg-type]
            boss.unsubscribe(bad, "a"),  # type: ignore[arg-type]
            boss.publish(bad),  # type: ignore[arg-type]
        ):
            with pytest.raises(ValidationError, match="event must be a non-empty string"):
                await call
    with pytest.raises(ValidationError, match="queue name"):
        await boss.subscribe("e", "bad name!")
    await boss.subscribe("e", "a")
    with pytest.raises(ValidationError, match="priority"):
        await boss.publish("e", {"x": 1}, priority="high")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="takes no id"):
        await boss.publish("e", {"x": 1}, id="00000000-0000-0000-0000-000000000001")
    with pytest.raises(ValidationError):
        await boss.publish("e", {"x": object()})  # not JSON
    with pytest.raises(ValidationError, match="unknown option"):
        await boss.publish("e", colour="red")  # type: ignore[call-arg]
    assert await totals(boss.context()) == before


async def test_one_queue_failing_does_not_stop_the_others(boss: Boss) -> None:
    await boss.create_queue("plain")
    await boss.create_queue("keyed", policy="key_strict_fifo")  # every job needs a key
    await boss.create_queue("short", policy="short")
    for name in ("plain", "keyed", "short"):
        await boss.subscribe("e", name)
    await boss.send("short", {"first": True})  # short keeps one queued job (no key)
    with pytest.raises(PublishError) as caught:
        await boss.publish("e", {"n": 1})
    error = caught.value
    assert set(error.failed) == {"keyed"}
    assert isinstance(error.failed["keyed"], ValidationError)
    assert "keyed" in str(error) and "1 of 3" in str(error)
    assert error.sent["plain"] is not None
    assert error.sent["short"] is None  # dropped by its policy: not a failure
    assert await count(boss.context(), "job", "name = $1", "plain") == 1
    assert await count(boss.context(), "job", "name = $1", "keyed") == 0


async def test_publish_in_a_callers_transaction(boss: Boss) -> None:
    await boss.create_queue("a")
    await boss.create_queue("b")
    await boss.subscribe("e", "a")
    await boss.subscribe("e", "b")

    class Undo(Exception):
        pass

    with pytest.raises(Undo):
        async with boss.db.transaction() as tx:
            assert sorted(await boss.publish("e", {"n": 1}, db=tx)) == ["a", "b"]
            raise Undo
    assert await count(boss.context(), "job") == 0
    async with boss.db.transaction() as tx:
        await boss.publish("e", {"n": 2}, db=tx)
    assert await count(boss.context(), "job") == 2
