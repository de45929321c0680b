"""The Temporal dev server as a killable subprocess whose state lives in a file,
so a restart keeps every parked workflow: the runtime's one DevServer
(`DevServer(workdir, log_dir=...)`, `restart(kill=...)`)."""

from parkgate.runtime.devserver import DevServer

__all__ = ["DevServer"]
