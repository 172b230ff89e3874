"""``LocalCluster``: run topologies on an embedded (or already running) Ray."""

from __future__ import annotations

import logging
import os
from typing import Any

import ray

from cluster._auth import check_token, use_available_token
from cluster._handle import TopologyHandle
from cluster._stats import TopologyStats
from cluster._submit import submit
from topology import StormTopology, TopologyError

logger = logging.getLogger("storm_on_ray.cluster")


def _check_auth(address: str) -> None:
    """Use the user's token for ``address`` and say at once if the cluster refuses it
    (``ray.init`` would keep retrying, then call the cluster unreachable)."""
    use_available_token()
    if address != "auto" and "://" not in address and ":" in address:
        check_token(address)


#: the savepoint a submitted job's topologies start from (storm-on-ray submit --restore)
RESTORE_ENV = "STORM_ON_RAY_RESTORE"


class LocalCluster:
    """Storm's ``LocalCluster`` on Ray: starts an embedded Ray, or joins the running one.

    Args:
        address: a Ray address to join (``"auto"`` for a running local cluster); ``None``
            joins the Ray already initialised in this process, else the cluster in
            ``RAY_ADDRESS`` (set for a job by ``ray job submit``), else starts an embedded
            one.
        nodes: with ``address=None`` and no Ray running, start this many Ray nodes on this
            machine (``ray.cluster_utils.Cluster``), each with ``num_cpus`` CPUs, so
            ``topology.worker.placement = "spread"`` puts workers on different nodes as on
            a real cluster. 1 (default) starts a plain embedded Ray.
        **ray_init_kwargs: passed to ``ray.init`` when this object starts Ray (with
            ``nodes`` > 1 only ``num_cpus`` is used, per node).

    Ray's token authentication is left as Ray sets it: an embedded Ray has it on (Ray's
    default), and joining a cluster uses the token Ray keeps for this user
    (``~/.ray/auth_token``) or the one in ``RAY_AUTH_TOKEN`` (``cluster/_auth.py``).

    Use as a context manager: leaving kills its topologies and stops the Ray it started.

    Raises:
        ClusterAuthError: joining a cluster (at ``host:port``) that refuses this process's
            token, or requires one and this process has none; raised within about 5 s.
    """

    def __init__(self, address: str | None = None, nodes: int = 1,
                 **ray_init_kwargs: Any) -> None:
        self._owns_ray = False
        self._ray_cluster = None
        if nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {nodes}")
        joining = address is not None or bool(os.environ.get("RAY_ADDRESS"))
        if not ray.is_initialized():
            if joining:  # a running cluster (``ray job submit`` sets RAY_ADDRESS)
                _check_auth(address or os.environ["RAY_ADDRESS"])
                ray.init(address=address, log_to_driver=True, **ray_init_kwargs)
            elif nodes > 1:
                from ray.cluster_utils import Cluster

                cpus = ray_init_kwargs.get("num_cpus", 2)
                self._ray_cluster = Cluster(initialize_head=True, head_node_args={
                    "num_cpus": cpus, "include_dashboard": False})
                for _ in range(nodes - 1):
                    self._ray_cluster.add_node(num_cpus=cpus)
                self._ray_cluster.wait_for_nodes()
                ray.init(address=self._ray_cluster.address, log_to_driver=True)
                self._owns_ray = True
            else:
                # "local": a Ray of its own, as documented, never one a `ray start` left
                # running on this machine (ray.init's default would join it)
                kwargs = {"address": "local", "include_dashboard": False,
                          "log_to_driver": True, **ray_init_kwargs}
                ray.init(**kwargs)
                self._owns_ray = True
        self.topologies: dict[str, TopologyHandle] = {}

    def submit_topology(self, name: str, conf: dict | None, topology: StormTopology,
                        detached: bool = False, restore_from: str | None = None,
                        allow_non_restored_state: bool = False) -> TopologyHandle:
        """Start ``topology`` under ``name`` (Storm's argument order); returns its handle.

        ``detached=True``: the topology outlives this driver and :meth:`shutdown` leaves it
        running; stop it with ``handle.kill()`` or ``storm-on-ray kill NAME`` (see
        ``cluster.submit``). ``restore_from``: a savepoint to start from (see
        ``cluster.submit``); when not given, the environment variable
        ``STORM_ON_RAY_RESTORE`` is used if set (``storm-on-ray submit SCRIPT --restore
        PATH`` sets it for the script).

        Raises:
            TopologyError: a topology of that name is running here, or invalid input.
            ConfigError: invalid config.
            SavepointError: a savepoint the topology cannot start from.
        """
        if name in self.topologies:
            raise TopologyError(f"a topology named {name!r} is already running; kill it or "
                                f"pick another name")
        if restore_from is None:
            restore_from = os.environ.get(RESTORE_ENV) or None
        handle = submit(name, conf, topology, detached=detached, restore_from=restore_from,
                        allow_non_restored_state=allow_non_restored_state)
        self.topologies[name] = handle
        return handle

    def run(self, name: str, conf: dict | None, topology: StormTopology,
            timeout: float | None = None, restore_from: str | None = None,
            allow_non_restored_state: bool = False) -> TopologyStats:
        """Submit a finite topology, wait for it to complete, return its final stats
        (``restore_from``: as :meth:`submit_topology`).

        Raises:
            TimeoutError: not complete within ``timeout`` s (the topology is killed).
            TopologyFailed: an executor died.
        """
        handle = self.submit_topology(name, conf, topology, restore_from=restore_from,
                                      allow_non_restored_state=allow_non_restored_state)
        try:
            if not handle.wait(timeout):
                raise TimeoutError(f"topology {name!r} did not complete within {timeout} s; "
                                   f"last stats:\n{handle.stats().summary()}")
            return handle.stats()
        finally:
            self.kill_topology(name)

    def kill_topology(self, name: str) -> None:
        handle = self.topologies.pop(name, None)
        if handle is None:
            raise KeyError(f"no topology {name!r}; running: {sorted(self.topologies)}")
        handle.kill()

    def shutdown(self) -> None:
        """Kill every topology but the detached ones; stop Ray if this object started it
        (which ends detached topologies too: they live as long as the cluster)."""
        for name, handle in list(self.topologies.items()):
            if handle.detached:
                logger.info("topology %r is detached: left running", name)
                del self.topologies[name]
            else:
                self.kill_topology(name)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        if self._ray_cluster is not None:
            self._ray_cluster.shutdown()
            self._ray_cluster = None

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
