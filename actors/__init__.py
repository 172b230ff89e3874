"""The Ray actors that carry out the backpressure core: executors, transfer actors and the
msgpack wire codec."""

from actors._actor import ActorSink, ExecutorActor
from actors._codec import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameError,
    decode_batch,
    decode_status,
    decode_transfer,
    encode_batch,
    encode_status,
    encode_transfer,
)
from actors._errors import ErrorInfo, ErrorReporter
from actors._executor import EOS_STREAM, FLUSH, ExecutorCore
from actors._routing import StreamRouter, build_routers, stable_hash, stream_table
from actors._transfer import FRAME_LOST, TransferActor, executor_name, transfer_name

__all__ = [
    "ActorSink", "DEFAULT_MAX_FRAME_BYTES", "EOS_STREAM", "FRAME_LOST", "ErrorInfo",
    "ErrorReporter", "ExecutorActor", "ExecutorCore", "FLUSH", "FrameError", "StreamRouter",
    "build_routers",
    "TransferActor", "decode_batch", "decode_status", "decode_transfer", "encode_batch",
    "encode_status", "encode_transfer", "executor_name", "stable_hash", "stream_table",
    "transfer_name",
]
