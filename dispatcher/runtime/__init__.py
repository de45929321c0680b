"""The runtime layer: processes and stacks (dev server, worker recipe, embedded serve)."""
