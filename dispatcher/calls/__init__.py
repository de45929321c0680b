"""A call's record: the state, rows and events the durable path hands the store.

`records` (a call's columns and the store's contract), `rows` (a call's row
from what the durable path knows), `events` (the tool.* catalog and the one
event model), `wire` (the API's response models, which the agent client reads
too). Pure; over `parkgate.approvals` (decisions in a record).
"""
