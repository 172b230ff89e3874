"""What one actor call costs here: the per-frame price every batch pays.

One sender actor sends ``--calls`` frames of bytes to one receiver actor the way
``ActorSink`` does (``receive.remote(frame).future()``, a done callback, at most two calls in
flight) and the CPU time of both processes is read from ``/proc`` (psutil) before and after.
Frames of 2 KB and 20 KB (about 100 and 1,000 tuples) show how much of the cost is per call
and how much per byte. Divide by the tuples in a frame to get the per-tuple share: this is
why ``topology.producer.batch.size`` and the flush rules matter, and why acking (which
sends several times more frames per tuple than the data alone) costs what it does. The same
20 KB frames also go, alternating, to a method declared with ``enable_task_events=False``
(as the executors' and transfer actors' frame methods are): ``task_events_off_cpu_ratio``
is its CPU per call over the default's.

    python -m benchmarks.actor_call [--calls 3000]

Writes benchmarks/results/actor_call.json; the last line is `key=value ...`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import psutil
import ray

from benchmarks._common import write_result


@ray.remote(num_cpus=0.1, concurrency_groups={"data": 1, "control": 1})
class Receiver:
    @ray.method(concurrency_group="data")
    def receive(self, frame: bytes) -> int:
        return len(frame)

    @ray.method(concurrency_group="data", enable_task_events=False)
    def receive_quiet(self, frame: bytes) -> int:
        """As ``receive``, without Ray task events (as ``ExecutorActor.receive``)."""
        return len(frame)

    @ray.method(concurrency_group="control")
    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0.1, concurrency_groups={"control": 1})
class Sender:
    def __init__(self, receiver) -> None:
        self.receiver = receiver

    @ray.method(concurrency_group="control")
    def pid(self) -> int:
        return os.getpid()

    @ray.method(concurrency_group="control")
    def run(self, calls: int, size: int, max_inflight: int = 2,
            method: str = "receive") -> float:
        """Send ``calls`` frames of ``size`` bytes to ``method`` from a thread of our own
        (as the executor thread does); returns the seconds it took."""
        frame = b"x" * size
        wake = threading.Event()
        send = getattr(self.receiver, method)

        def send_all() -> None:
            inflight: list = []
            for _ in range(calls):
                while len(inflight) >= max_inflight:
                    inflight = [f for f in inflight if not f.done()]
                    if len(inflight) >= max_inflight:
                        wake.wait(0.001)
                        wake.clear()
                fut = send.remote(frame).future()
                fut.add_done_callback(lambda _f: wake.set())
                inflight.append(fut)
            for f in inflight:
                f.result()

        t = threading.Thread(target=send_all)
        t0 = time.perf_counter()
        t.start()
        t.join()
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    args = ap.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    receiver = Receiver.remote()
    sender = Sender.remote(receiver)
    procs = {"sender": psutil.Process(ray.get(sender.pid.remote())),
             "receiver": psutil.Process(ray.get(receiver.pid.remote()))}

    def cpu() -> dict:
        return {k: sum(p.cpu_times()[:2]) for k, p in procs.items()}

    def measure(size: int, method: str = "receive") -> dict:
        c0 = cpu()
        dt = ray.get(sender.run.remote(args.calls, size, 2, method))
        c1 = cpu()
        r = {"calls_per_s": args.calls / dt,
             "sender_cpu_us_per_call": (c1["sender"] - c0["sender"]) / args.calls * 1e6,
             "receiver_cpu_us_per_call": (c1["receiver"] - c0["receiver"]) / args.calls * 1e6}
        r["cpu_us_per_call"] = r["sender_cpu_us_per_call"] + r["receiver_cpu_us_per_call"]
        return r

    ray.get(sender.run.remote(200, 2000))  # warm-up
    runs = {str(size): measure(size) for size in (2000, 20000)}
    # Ray task events on and off (20 KB frames), alternating: the host's speed drifts
    events: dict = {"receive": [], "receive_quiet": []}
    for _ in range(3):
        for method in events:
            events[method].append(measure(20000, method)["cpu_us_per_call"])
    ray.shutdown()
    quiet_ratio = (statistics.median(events["receive_quiet"])
                   / statistics.median(events["receive"]))
    write_result("actor_call", {"calls": args.calls, "max_inflight": 2, "frames": runs,
                                "task_events_cpu_us_per_call": events,
                                "task_events_off_cpu_ratio": quiet_ratio})
    for size, r in runs.items():
        print(f"{int(size):>6} B frames: {r['calls_per_s']:,.0f} calls/s, CPU per call "
              f"{r['sender_cpu_us_per_call']:.0f} µs sender + "
              f"{r['receiver_cpu_us_per_call']:.0f} µs receiver")
    print("CPU per 20 KB call with task events (Ray's default):",
          ", ".join(f"{x:.0f}" for x in events["receive"]), "µs; without:",
          ", ".join(f"{x:.0f}" for x in events["receive_quiet"]), "µs")
    small, big = runs["2000"], runs["20000"]
    print(f"cpu_us_per_call_2kb={small['cpu_us_per_call']:.0f} "
          f"cpu_us_per_call_20kb={big['cpu_us_per_call']:.0f} "
          f"calls_per_s_20kb={big['calls_per_s']:.0f} "
          f"task_events_off_cpu_ratio={quiet_ratio:.2f}")

if __name__ == "__main__":
    main()
