"""Where a topology keeps its code: Ray's GCS key-value store.

A restarted executor runs its constructor again and must read its topology again. Passed as
a constructor argument, the topology would be an object in the driver's object store (Ray
puts large arguments there): Ray warns at every submit that such an actor may not restart
once its driver has gone, and for a detached topology, which outlives its driver, it could
not. Storm keeps a submitted topology in Nimbus's blob store; we keep the pickled topology
in the GCS's internal key-value store (``ray.experimental.internal_kv``: the store Ray
itself uses for job and runtime-env data), under the submit's actor-name prefix, until the
topology is killed. Every executor receives a :class:`StoredTopology` (a name, a few bytes)
instead of the topology.

What the topology's own components hold is another matter: a ``DataFrameSpout`` carries
references to Arrow blocks that live in its driver's object store and die with it.

The same store records which actors of a submit have started once (:func:`first_start`),
which is how a restarted actor knows that it must rejoin its topology.
"""

from __future__ import annotations

from dataclasses import dataclass

KV_NAMESPACE = "storm-on-ray"


def _key(prefix: str) -> str:
    return f"{prefix}/topology"


@dataclass(frozen=True)
class StoredTopology:
    """A reference to a topology stored by :func:`store_topology` (what every executor
    receives instead of the topology itself)."""

    prefix: str

    def load(self):
        """The stored topology object; blocks for one GCS round trip.

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
    """Forget the topology stored under ``prefix`` and its actors' start records (no error
    if there are none); blocks for one GCS round trip."""
    from ray.experimental import internal_kv

    internal_kv._internal_kv_del(f"{prefix}/", del_by_prefix=True, namespace=KV_NAMESPACE)


def has_topology(prefix: str) -> bool:
    """True while a topology is stored under ``prefix``."""
    from ray.experimental import internal_kv

    return internal_kv._internal_kv_exists(_key(prefix), namespace=KV_NAMESPACE)


def first_start(prefix: str, actor: str) -> bool:
    """Record that ``actor`` (its name within the submit, e.g. ``task-3``) of the submit
    ``prefix`` has started; True the first time, False for every later instance (one that
    Ray restarted). Atomic in the GCS, one round trip.

    Ray's ``RuntimeContext.was_current_actor_reconstructed`` answers the same question, but
    in Ray 2.60 it reads the deprecated ``RuntimeContext.actor_id`` and prints a
    deprecation warning from every actor, and no current public API gives an actor's
    restart count."""
    from ray.experimental import internal_kv

    existed = internal_kv._internal_kv_put(f"{prefix}/started/{actor}", b"1",
                                           overwrite=False, namespace=KV_NAMESPACE)
    return not existed


def was_started(prefix: str, actor: str) -> bool:
    """True once :func:`first_start` has recorded ``actor`` of the submit ``prefix`` (read
    only)."""
    from ray.experimental import internal_kv

    return bool(internal_kv._internal_kv_exists(f"{prefix}/started/{actor}",
                                                namespace=KV_NAMESPACE))
