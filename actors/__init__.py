"""The Ray actors that carry out the backpressure core: executors and the wire codec."""

from actors._actor import ActorSink, ExecutorActor
from actors._codec import DEFAULT_MAX_FRAME_BYTES, FrameError, decode_batch, encode_batch
from actors._errors import ErrorInfo, ErrorReporter
from actors._executor import EOS_STREAM, FLUSH, ExecutorCore
from actors._routing import StreamRouter, build_routers, stable_hash, stream_table

__all__ = [
    "ActorSink", "DEFAULT_MAX_FRAME_BYTES", "EOS_STREAM", "ErrorInfo", "ErrorReporter",
    "ExecutorActor", "ExecutorCore", "FLUSH", "FrameError", "StreamRouter", "build_routers",
    "decode_batch", "encode_batch", "stable_hash", "stream_table",
]
