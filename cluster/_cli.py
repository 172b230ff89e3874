"""``storm-on-ray``: the command line (Storm's ``storm`` command, on a Ray cluster).

    storm-on-ray submit examples/wordcount.py [args...]   # ray job submit, working dir .
    storm-on-ray list
    storm-on-ray stats NAME
    storm-on-ray deactivate NAME | activate NAME
    storm-on-ray submit SCRIPT --restore PATH [args...]  # its topologies start from a savepoint
    storm-on-ray kill NAME [--wait SECS] [--drain | --savepoint PATH]
    storm-on-ray savepoint NAME PATH                   # a savepoint of a running topology
    storm-on-ray state PATH [--checkpoint N] [--json]   # checkpointed state, offline:
        # a local checkpoint dir, a savepoint (path or URI), or --redis HOST:PORT PATH

``--address`` names the cluster: a GCS address (``host:6379``) or ``auto`` for ``list``,
``stats``, ``activate``, ``deactivate`` and ``kill``; the dashboard's job address
(``http://host:8265``) for ``submit``. Without it, ``RAY_ADDRESS`` or the local cluster.
Exit status: 0 done, 1 the command failed (the message says why), 2 no cluster reachable,
3 the cluster refused this user's authentication token (or there is none).

Ray's token authentication stays as Ray sets it: the commands use the token Ray keeps
(``~/.ray/auth_token``, or ``RAY_AUTH_TOKEN`` / ``RAY_AUTH_TOKEN_PATH``; see
``cluster/_auth.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys

NO_CLUSTER = 2
AUTH_REFUSED = 3


def _connect(address: str | None) -> None:
    from cluster._auth import ClusterAuthError, check_token, use_available_token

    use_available_token()  # before Ray reads RAY_AUTH_MODE

    import ray
    from ray.exceptions import AuthenticationError

    target = address or os.environ.get("RAY_ADDRESS") or "auto"
    if target != "auto" and ":" in target and "://" not in target:
        # Ray retries an unreachable GCS for a long time: ask the port first
        host, _, port = target.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except (OSError, ValueError) as e:
            print(f"storm-on-ray: no Ray cluster reachable at {target} ({e}); start one with "
                  f"`ray start --head` or pass --address", file=sys.stderr)
            raise SystemExit(NO_CLUSTER) from None
        try:  # a refused token, said at once (ray.init would go on retrying it; tests/test_auth.py)
            check_token(target)
        except ClusterAuthError as e:
            print(f"storm-on-ray: {e}", file=sys.stderr)
            raise SystemExit(AUTH_REFUSED) from None
    try:
        ray.init(address=target, log_to_driver=False, logging_level="ERROR")
    except AuthenticationError as e:
        print(f"storm-on-ray: {e}", file=sys.stderr)
        raise SystemExit(AUTH_REFUSED) from None
    except (ConnectionError, RuntimeError, ValueError) as e:
        print(f"storm-on-ray: no Ray cluster reachable at {address or 'auto'} ({e}); start "
              f"one with `ray start --head` or pass --address", file=sys.stderr)
        raise SystemExit(NO_CLUSTER) from None


def _list(args) -> int:
    from cluster._registry import find_topologies

    found = find_topologies()
    if not found:
        print("no topologies running")
        return 0
    print(f"{'name':<32}{'tasks':>7}{'workers':>9}  namespace")
    for name, t in sorted(found.items()):
        print(f"{name:<32}{len(t['tasks']):>7}{max(1, len(t['workers'])):>9}  {t['namespace']}")
    return 0


def _stats(args) -> int:
    from cluster._registry import attach
    from cluster._stats import (
        checkpoint_lines,
        dead_letter_lines,
        flow_control_lines,
        fmt,
        shed_lines,
        window_lines,
    )

    s = attach(args.name).stats()
    print(f"topology {args.name}: {len(s.tasks)} tasks, "
          f"{'complete' if s.complete else 'running'}")
    print(f"{'component':<16}{'tasks':>6}{'rate/s':>10}{'capacity':>10}{'busy':>7}{'bp':>6}"
          f"  level (cause)")
    for r in s.rows():
        print(f"{r['component']:<16}{r['tasks']:>6}{fmt(r['rate_per_s'], ',.0f'):>10}"
              f"{fmt(r['capacity'], '.2f'):>10}{fmt(r['busy'], '.0%'):>7}"
              f"{fmt(r['backpressured'], '.0%'):>6}  {r['level']}")
    for line in (window_lines(s) + checkpoint_lines(s) + dead_letter_lines(s) + shed_lines(s)
                 + flow_control_lines(s)):
        print(line)
    for e in s.errors:
        print(f"ERROR {e['component']}:{e['task']} {e['error_type']}: {e['message']} "
              f"(x{e['count']})")
    for t in s.stalled_tasks():
        print(f"STALLED {t.component}:{t.task} for {t.stalled_seconds:.0f} s")
    return 0


def _control(args) -> int:
    from cluster._registry import attach

    handle = attach(args.name)
    if args.command == "savepoint":
        print(f"savepoint: {args.name} → {handle.savepoint(args.path)}")
        return 0
    if args.command == "kill":
        if args.savepoint:
            handle.kill(wait_secs=args.wait or 0, savepoint=args.savepoint)
            where = args.savepoint if "://" in args.savepoint else os.path.abspath(
                args.savepoint)
            print(f"savepoint: {args.name} → {where}")
        elif args.drain:
            done = handle.drain(args.wait)
            if not done:
                print(f"drain: {args.name} did not complete within {args.wait} s; "
                      f"killing it", file=sys.stderr)
            handle.kill()
        else:
            handle.kill(wait_secs=args.wait or 0)
    elif args.command == "activate":
        handle.activate()
    else:
        handle.deactivate()
    print(f"{args.command}: {args.name}")
    return 0


def _submit(args) -> int:
    from cluster._auth import use_available_token
    from cluster._local import RESTORE_ENV

    use_available_token()  # `ray job submit` sends the token only in token mode
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    cmd = [ray_cli if os.path.exists(ray_cli) else "ray", "job", "submit"]
    if args.address:
        cmd += ["--address", args.address]
    if args.restore:  # (submit_topology reads it when not given restore_from)
        cmd += ["--runtime-env-json",
                json.dumps({"env_vars": {RESTORE_ENV: os.path.abspath(args.restore)}})]
    cmd += ["--working-dir", ".", "--", "python", args.file, *args.args]
    return subprocess.call(cmd)


def _read_any_state(args) -> tuple[dict, int | None, str]:
    """``({component: {task: {key: value}}}, checkpoint id, where)`` of what ``args``
    names: a Redis-backed submit (``--redis HOST:PORT``, PATH ``TOPOLOGY/SUBMIT_ID``), a
    savepoint (a URI, or a directory holding ``metadata.json``; tasks by index), or a
    local submit's (or component's) checkpoint directory."""
    from urllib.parse import unquote

    from actors.state._common import StateSnapshot, decoded
    from actors.state._fs import is_uri
    from actors.state.providers import LOG_FILE, RedisProvider, read_state
    from actors.state.savepoints import METADATA, read_savepoint

    if args.redis:
        host, sep, port = args.redis.rpartition(":")
        topology, _, submit = args.path.strip("/").partition("/")
        if not sep or not port.isdigit() or not topology or not submit:
            raise ValueError(f"--redis {args.redis!r} with PATH {args.path!r}: give "
                             f"--redis HOST:PORT and PATH TOPOLOGY/SUBMIT_ID")
        p = RedisProvider(topology, submit, {"host": host, "port": int(port)})
        try:
            state = p.read_state(args.checkpoint)
        finally:
            p.close()
        return state, state.checkpoint_id, f"redis {p.address} {p.root}"
    if is_uri(args.path) or os.path.isfile(os.path.join(args.path, METADATA)):
        sp = read_savepoint(args.path)
        if args.checkpoint not in (None, sp.checkpoint_id):
            raise ValueError(f"savepoint {sp.path} holds checkpoint {sp.checkpoint_id} only")
        raw = StateSnapshot(sp.entries)
        raw.checkpoint_id = sp.checkpoint_id
        return decoded(raw), sp.checkpoint_id, f"savepoint {sp.path}"
    state = read_state(args.path, args.checkpoint)
    path = os.path.abspath(args.path)
    components = state if os.path.isfile(os.path.join(path, LOG_FILE)) else {
        unquote(os.path.basename(path)): state}
    return components, state.checkpoint_id, path


def _state(args) -> int:
    """Print checkpointed state: a local submit's (or component's) directory, a savepoint
    at a path or URI, or a Redis-backed submit; no Ray."""
    import json

    from actors.state._provider import CorruptCheckpoint
    from actors.state.providers import RedisStateError

    try:  # FrameError (an undecodable entry), SavepointError, ConfigError are ValueErrors
        components, checkpoint_id, where = _read_any_state(args)
    except (OSError, ValueError, CorruptCheckpoint, RedisStateError) as e:
        print(f"storm-on-ray: {e}", file=sys.stderr)
        return 1

    def key_str(k) -> str:
        return k if isinstance(k, str) else repr(k)

    if args.json:
        def plain(v):
            if isinstance(v, dict):
                return {key_str(k): plain(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [plain(x) for x in v]
            if v is None or isinstance(v, (str, int, float, bool)):
                return v
            return v.isoformat() if hasattr(v, "isoformat") else str(v)
        print(json.dumps({"checkpoint": checkpoint_id, "state": plain(components)},
                         indent=2))
        return 0
    ckpt = "none committed" if checkpoint_id is None else checkpoint_id
    print(f"checkpoint {ckpt}: {where}")
    for component, tasks in components.items():
        for task, entries in tasks.items():
            print(f"{component} task {task}: {len(entries)} keys")
            try:
                keys = sorted(entries)
            except TypeError:  # keys of several types
                keys = sorted(entries, key=key_str)
            for k in keys:
                print(f"  {key_str(k)} = {entries[k]!r}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser (no cluster needed)."""
    ap = argparse.ArgumentParser(prog="storm-on-ray", description=__doc__.splitlines()[0])
    ap.add_argument("--address", help="Ray cluster address (see the module help)")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("submit", help="run a topology file as a Ray job (ray job submit)")
    p.add_argument("file")
    p.add_argument("--restore", default=None, metavar="PATH",
                   help="the script's topologies start from this savepoint "
                        "(STORM_ON_RAY_RESTORE)")
    p.add_argument("args", nargs=argparse.REMAINDER)
    sub.add_parser("list", help="running topologies")
    for cmd, what in (("stats", "per-component rate, capacity and backpressure"),
                      ("activate", "spouts emit again"),
                      ("deactivate", "spouts stop emitting"),
                      ("kill", "stop a topology and free its actors")):
        p = sub.add_parser(cmd, help=what)
        p.add_argument("name")
        if cmd == "kill":
            p.add_argument("--wait", "-w", type=float, default=None, metavar="SECS",
                           help="deactivate the spouts, wait SECS, then kill (Storm's "
                                "kill -w); with --drain, the most to wait for the drain")
            p.add_argument("--drain", action="store_true",
                           help="drain first: spouts take no new input and end their "
                                "streams, windows fire, the topology completes; then kill")
            p.add_argument("--savepoint", default=None, metavar="PATH",
                           help="stop with a savepoint: deactivate, take a savepoint at "
                                "PATH once a checkpoint commits, then kill")
    p = sub.add_parser("savepoint", help="copy a running topology's last checkpoint to a "
                                         "savepoint directory")
    p.add_argument("name")
    p.add_argument("path", help="a new or empty directory")
    p = sub.add_parser("state", help="print checkpointed state (no cluster needed)")
    p.add_argument("path", help="<topology.state.checkpoint.dir>/<topology>/<submit id>, or "
                                "a component's directory in it; a savepoint's path or "
                                "URI; with --redis, <topology>/<submit id>")
    p.add_argument("--redis", default=None, metavar="HOST:PORT",
                   help="read a submit of the redis provider (default key prefix, db 0, "
                        "no password) from this server")
    p.add_argument("--checkpoint", type=int, default=None, metavar="N",
                   help="this checkpoint instead of the last committed one")
    p.add_argument("--json", action="store_true", help="print JSON")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "submit":
        return _submit(args)
    if args.command == "state":
        return _state(args)
    _connect(args.address)
    try:
        return {"list": _list, "stats": _stats}.get(args.command, _control)(args)
    except KeyError as e:
        print(f"storm-on-ray: {e.args[0]}", file=sys.stderr)
        return 1
    except ValueError as e:  # a savepoint that cannot be taken (path, no state)
        print(f"storm-on-ray: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
