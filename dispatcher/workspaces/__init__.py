"""A session's workspace: its files, which project owns its ground, which workers have it.

`files` (WorkspaceFileAPI: every file access confined to the root), `diffing`
(projected workspace impact and diffs an approver sees), `ground` (which
project may register a workspace path), `worker_groups` (the workers, and task
queues, that have a session's workspace). Pure over `parkgate.errors`/`models`.
"""
