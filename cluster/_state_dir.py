"""State never stays on one node unnoticed: at submit, on a cluster of more than one node
with the ``local`` provider's checkpoints in a directory of the local filesystem (a path,
or a ``file://`` URI), every node that holds one of the topology's placement-group
bundles must see the same directory. The driver writes a marker there; a task pinned to
each other node (``NodeAffinitySchedulingStrategy``) reads it; :func:`check_shared_dir`
decides from what they read (pure, so the refusal is unit-tested: a one-host
``ray.cluster_utils.Cluster`` shares its disk and cannot show it). Ray Train refuses local
``storage_path`` on a multi-node run the same way (Ray's docs, "Configuring Persistent
Storage").
"""

from __future__ import annotations

import contextlib
import os
import uuid

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from topology import TopologyError

#: how long the pinned reads may take (s)
READ_TIMEOUT_S = 60.0


def local_dir(directory: str) -> str | None:
    """The local path the ``local`` provider writes ``directory`` to (a path, or a
    ``file://`` URI resolved as the provider resolves it: ``pyarrow.fs.FileSystem
    .from_uri``, percent-escapes decoded), or None for another URI. Pure: no Ray.

    Raises:
        actors.state._fs.StorageError: a ``file://`` URI pyarrow cannot use."""
    from actors.state import _fs

    if _fs.is_uri(directory) and not directory.startswith("file://"):
        return None
    return _fs.resolve(directory).base


def check_shared_dir(directory: str, token: str, reads: dict[str, str | None]) -> None:
    """Refuse unless every node saw the marker: ``reads`` maps each node id holding a
    bundle to what it read from the marker (None: nothing there), ``token`` what the
    driver wrote.

    Raises:
        TopologyError: naming ``topology.state.checkpoint.dir``, the directory, the nodes
            that do not see it, and what to set instead.
    """
    blind = sorted(node for node, got in reads.items() if got != token)
    if not blind:
        return
    raise TopologyError(
        f"topology.state.checkpoint.dir {directory} is on this node's disk only: node(s) "
        f"{', '.join(blind)} of the topology's placement group do not see it, so a task "
        f"restarted there would not find its state. On a cluster of several nodes set "
        f"topology.state.checkpoint.dir to a URI every node reaches (s3://bucket/prefix, "
        f"gs://..., hdfs://...), or to a directory on a shared mount, or use "
        f"topology.state.provider \"redis\"")


@ray.remote(num_cpus=0, max_retries=0)
def _read_marker(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def check_bundle_nodes(directory: str, pg) -> None:
    """After ``pg.ready()``: refuse (:func:`check_shared_dir`) if a node holding one of
    ``pg``'s bundles, other than the driver's, does not see ``directory`` (a local path).
    Nothing is asked when every bundle is on the driver's node. Blocks for one task per
    other node (up to :data:`READ_TIMEOUT_S`; a node that does not answer counts as not
    seeing it).

    Raises:
        TopologyError: see :func:`check_shared_dir`.
    """
    here = ray.get_runtime_context().get_node_id()
    nodes = set(ray.util.placement_group_table(pg)["bundles_to_node_id"].values()) - {here}
    if not nodes:
        return
    token = uuid.uuid4().hex
    os.makedirs(directory, exist_ok=True)
    marker = os.path.join(directory, f".shared-check-{token}")
    with open(marker, "w", encoding="utf-8") as f:
        f.write(token)
    try:
        refs = {n: _read_marker.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id=n, soft=False)).remote(marker) for n in sorted(nodes)}
        reads: dict[str, str | None] = {}
        for node, ref in refs.items():
            try:
                reads[node] = ray.get(ref, timeout=READ_TIMEOUT_S)
            except Exception:  # noqa: BLE001 (a node that cannot answer: not seen)
                reads[node] = None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(marker)
    check_shared_dir(directory, token, reads)
