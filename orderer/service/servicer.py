"""The gRPC edge of the service: :class:`OrdererServicer` (the grpc.aio servicer of
``evb.v1.Orderer``) and ``_status``, the one translation of errors into status codes.

Why so thin: each method only converts between protobuf messages and API types
(:mod:`orderer.wire.convert`; ``Submit`` from raw bytes, :mod:`orderer.wire.submit`), calls
the :class:`~orderer.service.orderer_service.OrdererService`, and translates what it raises,
once, here: a refused input (``InterfaceError``, ``ConfigError``) is INVALID_ARGUMENT, a
service that cannot take it now (``ServiceUnavailable``) is UNAVAILABLE (clients retry),
anything else INTERNAL. A late fragment is data, never an error.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.errors import ConfigError, EvbError, InterfaceError, ServiceUnavailable
from orderer.service.orderer_service import OrdererService
from orderer.service.submit_stream import ACK, SubmitStream
from orderer.wire import convert
from orderer.wire.refusal import refusal_metadata

__all__ = ["RAW_REQUESTS", "SERVICE_NAME", "OrdererServicer", "add_to_server"]

log = logging.getLogger("evb.service")

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["Orderer"].full_name
"""The gRPC service's full name, as health checks and reflection name it."""


def _status(error: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and details a call ends with when ``error`` stops it."""
    if isinstance(error, InterfaceError | ConfigError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(error)
    if isinstance(error, ServiceUnavailable):
        return grpc.StatusCode.UNAVAILABLE, str(error)
    return grpc.StatusCode.INTERNAL, f"internal error: {error!r}"


class OrdererServicer(pb_grpc.OrdererServicer):
    """The gRPC edge: converts messages, calls :class:`OrdererService`, maps errors to codes."""

    def __init__(self, service: OrdererService) -> None:
        self._service = service

    async def _read_submissions(self, requests: AsyncIterator[bytes], stream: SubmitStream) -> None:
        """Each request arrives as its raw bytes (see :func:`add_to_server`) and is only
        queued here (``take_message``): the orderer's thread decodes, checks and deduplicates
        it, and ends the stream with the error if it refuses it."""
        service = self._service
        try:
            async for data in requests:
                await service.room_for_input()
                if not stream.reading:
                    return
                stream.received(len(data))
                service.take_message(stream, data)
            service.finish_stream(stream)
        except asyncio.CancelledError:
            stream.finish()
            raise
        except EvbError as error:
            log.warning("Submit stream refused: %s", error)
            stream.finish(error)
        except Exception as error:
            log.exception("Submit stream failed")
            stream.finish(error)

    async def Submit(
        self,
        request_iterator: AsyncIterator[bytes],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.SubmitReply]:
        stream = self._service.open_stream(context.peer())
        if stream.error is not None:  # refused at once: the reason where a client can read it
            await context.send_initial_metadata(refusal_metadata(*_status(stream.error)))
        reader = asyncio.create_task(self._read_submissions(request_iterator, stream))
        try:
            async for kind, source, value in stream.replies():
                if kind == ACK:
                    yield pb.SubmitReply(ack=pb.Ack(source=source, durable_sequence=value))
                else:
                    yield pb.SubmitReply(flow_control=pb.FlowControl(source=source, paused=value))
        finally:
            reader.cancel()
            self._service.close_stream(stream)
        if stream.error is not None:
            code, details = _status(stream.error)
            await context.abort(code, details)

    async def Subscribe(
        self, request: pb.SubscribeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.OrderedBatch]:
        service = self._service
        try:
            async for batch, durable in service.subscribe(
                request.from_offset, request.max_fragments, payload=not request.omit_payload
            ):
                yield convert.emitted_to_pb(
                    batch,
                    next_offset=durable,
                    high_water_mark=service.high_water_mark,
                    payload=not request.omit_payload,
                )
        except EvbError as error:
            code, details = _status(error)
            await context.abort(code, details)

    async def GetStats(
        self, request: pb.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> pb.Stats:
        return convert.stats_to_pb(self._service.stats(request.barrier_log_limit))

    async def Configure(
        self, request: pb.ConfigureRequest, context: grpc.aio.ServicerContext
    ) -> pb.OrdererConfig:
        async def configure() -> Any:  # the request is read inside: a bad one is refused too
            return await self._service.configure(convert.configure_changes_from_pb(request))

        return convert.config_to_pb(await _answered(context, configure()))

    async def Commit(
        self, request: pb.CommitRequest, context: grpc.aio.ServicerContext
    ) -> pb.CommitReply:
        commit = self._service.commit
        metadata = request.metadata if request.HasField("metadata") else None
        offset, lowest, kept = await _answered(
            context, commit, request.consumer, request.offset, metadata
        )
        return pb.CommitReply(offset=offset, lowest=lowest, metadata=kept, known=True)

    async def GetCommitted(
        self, request: pb.GetCommittedRequest, context: grpc.aio.ServicerContext
    ) -> pb.CommitReply:
        read = self._service.get_committed
        known, offset, lowest, metadata = await _answered(context, read, request.consumer)
        return pb.CommitReply(offset=offset, lowest=lowest, metadata=metadata, known=known)

    async def DeleteConsumer(
        self, request: pb.DeleteConsumerRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteConsumerReply:
        delete = self._service.delete_consumer
        existed, lowest = await _answered(context, delete, request.consumer)
        return pb.DeleteConsumerReply(existed=existed, lowest=lowest)

    async def SetSourceState(
        self, request: pb.SourceStateRequest, context: grpc.aio.ServicerContext
    ) -> pb.SourceStateReply:
        change = self._service.set_source_state(request.source, request.dead)
        was_known, dead = await _answered(context, change)
        return pb.SourceStateReply(was_known=was_known, dead=dead)

    async def GetSliceIndex(
        self, request: pb.GetSliceIndexRequest, context: grpc.aio.ServicerContext
    ) -> pb.SliceIndex:
        read = self._service.slice_index
        index = await _answered(context, read, request.from_slice, request.limit)
        return convert.slice_index_to_pb(index)

    async def EndRun(
        self, request: pb.EndRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.EndRunReply:
        next_offset = await _answered(context, self._service.end_run())
        return pb.EndRunReply(next_offset=next_offset)

    async def BeginRun(
        self, request: pb.BeginRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.BeginRunReply:
        number = request.run if request.HasField("run") else None
        run, start = await _answered(context, self._service.begin_run(number))
        return pb.BeginRunReply(run=run, start_offset=start)


_HANDLERS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}
RAW_REQUESTS = frozenset({"Submit"})
"""Methods whose requests reach the servicer undecoded, as bytes (no request deserializer)."""


def add_to_server(servicer: OrdererServicer, server: grpc.aio.Server) -> None:
    """Serve ``evb.v1.Orderer`` with ``servicer``: what the generated
    ``add_OrdererServicer_to_server`` does, except that ``Submit`` requests are not decoded by
    the protobuf runtime, which made Python objects of every field on the event loop's thread.
    They come as raw bytes to ``decode_submit`` (:mod:`orderer.wire.submit`), which checks and
    decodes one in a compiled call, without the GIL. Built from the service's descriptor, so
    that every method of the proto is served, and a new one too."""
    service = pb.DESCRIPTOR.services_by_name["Orderer"]
    handlers = {}
    for method in service.methods:
        request = getattr(pb, method.input_type.name)
        reply = getattr(pb, method.output_type.name)
        make = _HANDLERS[method.client_streaming, method.server_streaming]
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=None if method.name in RAW_REQUESTS else request.FromString,
            response_serializer=reply.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)


async def _answered(
    context: grpc.aio.ServicerContext, call: Awaitable[Any] | Callable[..., Any], *args: Any
) -> Any:
    """What a unary call of the service gives, or the call ended with the status of its error
    (``context.abort`` raises): the one translation of errors for the unary methods. ``call`` is
    an awaitable already made, or a plain function to call with ``args``."""
    try:
        if inspect.isawaitable(call):
            return await call
        return call(*args)
    except EvbError as error:
        code, details = _status(error)
        await context.abort(code, details)
