"""Client library of the orderer service: data sources in, ordered output out, control calls.

Why a library and not just the generated stubs: a data source must not lose or duplicate
fragments when the orderer restarts, and must not send one message per fragment; a reader must
resume where it stopped; and no entry point may wait forever for an orderer that is not there.
One job a module:

- :mod:`~orderer.client.sources`: :class:`AsyncSourceClient` (asyncio) batches, numbers and
  keeps fragments until the server acknowledges them, resending after a reconnect;
  :mod:`~orderer.client.blocking`: :class:`SourceClient`, the same for readout loops;
  :mod:`~orderer.client.batching`: what goes into one message;
- :mod:`~orderer.client.readers`: :func:`subscribe` (asyncio) and :class:`OrderedStreamReader`
  (blocking) iterate the ordered output from an offset and resume after reconnects;
- :mod:`~orderer.client.control`: :func:`get_stats`, :func:`configure`, :func:`end_run`,
  :func:`begin_run`, :func:`commit`, :func:`get_committed`, :func:`delete_consumer`,
  :func:`set_source_state`, :func:`get_slice_index` and their ``*_async`` twins, answering
  with typed values (:class:`~orderer.stats.Stats` and its parts,
  :class:`~orderer.config.OrdererConfig`);
- :mod:`~orderer.client.connect`: channel options, the first connection bounded by
  ``connect_timeout`` (seconds, :data:`DEFAULT_CONNECT_TIMEOUT`; None waits as the call's other
  limits allow), gRPC statuses as :mod:`orderer.errors`: ``ServiceUnavailable`` naming the
  address and the cause in plain words, ``AuthenticationError`` for a refused bearer token;
- :mod:`~orderer.client.reconnect`: the one backoff (exponential, with jitter) that a source or
  reader which lost an established connection waits before it tries again, up to
  ``reconnect_timeout``;
- :mod:`~orderer.client.twins`: one parameter list for a call offered blocking and asyncio.

The client imports what both ends of the wire share (:mod:`orderer.wire`), never the service or
the command line.
"""

from orderer.client.blocking import SourceClient
from orderer.client.connect import channel_options
from orderer.client.control import (
    Committed,
    SourceMark,
    begin_run,
    begin_run_async,
    commit,
    commit_async,
    configure,
    configure_async,
    delete_consumer,
    delete_consumer_async,
    end_run,
    end_run_async,
    get_committed,
    get_committed_async,
    get_slice_index,
    get_slice_index_async,
    get_stats,
    get_stats_async,
    set_source_state,
    set_source_state_async,
)
from orderer.client.readers import OrderedStreamReader, subscribe
from orderer.client.sources import AsyncSourceClient, parse_targets
from orderer.wire.options import DEFAULT_CONNECT_TIMEOUT
from orderer.wire.security import ChannelSecurity

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "AsyncSourceClient",
    "ChannelSecurity",
    "Committed",
    "OrderedStreamReader",
    "SourceClient",
    "SourceMark",
    "begin_run",
    "begin_run_async",
    "channel_options",
    "commit",
    "commit_async",
    "configure",
    "configure_async",
    "delete_consumer",
    "delete_consumer_async",
    "end_run",
    "end_run_async",
    "get_committed",
    "get_committed_async",
    "get_slice_index",
    "get_slice_index_async",
    "get_stats",
    "get_stats_async",
    "parse_targets",
    "set_source_state",
    "set_source_state_async",
    "subscribe",
]
