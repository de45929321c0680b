"""What callers of DurableDispatcher catch when Temporal or the call cannot answer."""

from __future__ import annotations

from temporalio.client import RPCTimeoutOrCancelledError, WorkflowQueryFailedError
from temporalio.service import RPCError


class UnknownCallError(KeyError):
    """No call workflow with this id (or no approval request with this id)."""


#: Temporal could not answer a query or update: unreachable, no worker in time,
#: or the workflow could not answer yet. The call itself is intact.
TEMPORAL_NO_ANSWER = (RPCError, RPCTimeoutOrCancelledError, WorkflowQueryFailedError)
