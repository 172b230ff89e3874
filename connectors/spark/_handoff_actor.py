"""The hand-off of a ``StreamingDataFrameSpout`` as a Ray actor: an async actor that
carries out a :class:`~connectors.spark.handoff.HandoffCore` (which decides everything)
and only waits on its predicates."""

from __future__ import annotations

import asyncio

from connectors.spark.handoff import HandoffCore

_actor_class = None


class _Handoff:
    """The hand-off as an async Ray actor carrying out a :class:`HandoffCore`: a ``put``
    waiting for room or for acks is a suspended coroutine, so takes, acks and control
    calls go on meanwhile (one event loop, no locks beyond the condition)."""

    def __init__(self, max_batches: int, max_rows: int, wait_for_acks: bool) -> None:
        self.core = HandoffCore(max_batches, max_rows, wait_for_acks)
        self.cond = asyncio.Condition()

    async def put(self, batch_id: int, blocks: list) -> str:
        core = self.core
        rows = sum(r for _, r in blocks)
        async with self.cond:
            if not core.can_enter(rows) and core.put_answer() is None:
                core.put_waits += 1
            await self.cond.wait_for(
                lambda: core.can_enter(rows) or core.put_answer() is not None)
            if not core.can_enter(rows):
                return core.put_answer()
            core.enter(batch_id, blocks)
            self.cond.notify_all()
            await self.cond.wait_for(lambda: core.put_done(batch_id) is not None)
            return core.put_done(batch_id)

    async def reopened(self, task: int, positions: list | None = None) -> int:
        async with self.cond:
            n = self.core.reopened(task, {(b, i): r for b, i, r in positions or ()})
            self.cond.notify_all()
            return n

    async def take(self, wait_s: float, task: int | None = None) -> tuple:
        core = self.core
        async with self.cond:
            if not core.has_answer_for_take():
                try:
                    await asyncio.wait_for(self.cond.wait_for(core.has_answer_for_take),
                                           wait_s)
                except asyncio.TimeoutError:
                    pass
            answer = core.take(task)
            if answer[0] == "block":
                self.cond.notify_all()  # room for a waiting put
            return answer

    async def acked(self, batch_id: int, index: int) -> None:
        async with self.cond:
            self.core.acked(batch_id, index)
            self.cond.notify_all()

    async def drain(self) -> None:
        async with self.cond:
            self.core.drain()
            self.cond.notify_all()

    async def close(self) -> None:
        async with self.cond:
            self.core.close()
            self.cond.notify_all()

    async def fail(self, error: str) -> bool:
        async with self.cond:
            changed = self.core.fail(error)
            self.cond.notify_all()
            return changed

    async def stats(self) -> dict:
        return self.core.stats()


def handoff_actor():
    """The Ray actor class of :class:`_Handoff` (made on first use, so this module
    imports without Ray)."""
    global _actor_class
    if _actor_class is None:
        import ray

        _actor_class = ray.remote(num_cpus=0, max_concurrency=1000)(_Handoff)
    return _actor_class


__all__ = ["handoff_actor"]
