"""The executor factory: a task's executor by its component's kind (Storm's
``Executor.mkExecutor``), apart from the base class so that the subclasses' modules can
import ``actors._executor`` without a circle."""

from __future__ import annotations

from actors._bolt_executor import BoltExecutor
from actors._executor import ExecutorCore
from actors._spout_executor import SpoutExecutor
from topology import StormTopology


def make_executor(topology_name: str, topology: StormTopology, conf: dict, task_id: int,
                  task_worker: dict[int, int]) -> ExecutorCore:
    """The executor of ``task_id``: a ``SpoutExecutor`` or a ``BoltExecutor`` (an acker
    is a bolt), as Storm's ``Executor.mkExecutor``. Arguments as :class:`ExecutorCore`."""
    spout = topology.components[topology.task_component(task_id)].is_spout
    return (SpoutExecutor if spout else BoltExecutor)(topology_name, topology, conf, task_id,
                                                      task_worker)
