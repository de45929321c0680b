"""Fault-injection harness: real subprocesses (PostgreSQL, Temporal dev server,
parkgate workers and API) on 127.0.0.1, free ports, bounded waits, no orphans."""
