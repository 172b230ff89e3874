"""Where a detached topology keeps its code: Ray's GCS key-value store.

A detached topology outlives the driver that submitted it, so a restarted executor cannot
read its topology from an object the driver owned (Ray frees it with its owner). Storm keeps
a submitted topology in Nimbus's blob store; we keep the pickled topology in the GCS's
internal key-value store (``ray.experimental.internal_kv``: the store Ray itself uses for
job and runtime-env data), under the submit's actor-name prefix, until the topology is
killed.
"""

from __future__ import annotations

from dataclasses import dataclass

KV_NAMESPACE = "storm-on-ray"


def _key(prefix: str) -> str:
    return f"{prefix}/topology"


@dataclass(frozen=True)
class StoredTopology:
    """A reference to a topology stored by :func:`store_topology` (what a detached
    topology's executors receive instead of the topology itself)."""

    prefix: str

    def load(self):
        """The stored topology object.

        Raises:
            LookupError: nothing is stored under this prefix (the topology was killed).
        """
        import ray.cloudpickle as cloudpickle
        from ray.experimental import internal_kv

        blob = internal_kv._internal_kv_get(_key(self.prefix), namespace=KV_NAMESPACE)
        if blob is None:
            raise LookupError(f"no stored topology under {self.prefix!r} (killed?)")
        return cloudpickle.loads(blob)


def store_topology(prefix: str, topology) -> StoredTopology:
    """Pickle ``topology`` (cloudpickle, so classes defined in ``__main__`` travel by value)
    into the GCS under ``prefix``; blocks for one GCS round trip."""
    import ray.cloudpickle as cloudpickle
    from ray.experimental import internal_kv

    internal_kv._internal_kv_put(_key(prefix), cloudpickle.dumps(topology),
                                 namespace=KV_NAMESPACE)
    return StoredTopology(prefix)


def delete_topology(prefix: str) -> None:
    """Forget the topology stored under ``prefix`` (no error if there is none)."""
    from ray.experimental import internal_kv

    internal_kv._internal_kv_del(_key(prefix), namespace=KV_NAMESPACE)


def has_topology(prefix: str) -> bool:
    """True while a topology is stored under ``prefix``."""
    from ray.experimental import internal_kv

    return internal_kv._internal_kv_exists(_key(prefix), namespace=KV_NAMESPACE)
