"""Free TCP ports on 127.0.0.1 and bounded waits for listeners (the runtime's toolkit)."""

from parkgate.runtime.ports import (
    free_port,
    port_open,
    wait_port,
    wait_port_async,
    wait_port_closed,
)

__all__ = ["free_port", "port_open", "wait_port", "wait_port_async", "wait_port_closed"]
