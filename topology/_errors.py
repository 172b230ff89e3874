"""Errors raised by the topology API."""

from __future__ import annotations


class TopologyError(ValueError):
    """An invalid topology, raised by ``create_topology()`` or at submit time.

    The message always names the component, stream and field involved.
    """


class ConfigError(ValueError):
    """An unknown ``topology.*`` key or a value of the wrong type or range."""


class EmitError(ValueError):
    """An emit that does not match its stream's declaration (wrong arity, undeclared stream)."""
