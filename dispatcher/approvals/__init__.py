"""A human's say on a parked call: decisions, who may decide, and proof of it.

`decisions` (the decision and why one is refused), `quorum` (M of N named
approvers), `access` and `identity` (roles, principals, how a decider was
identified), `proof` (HMAC proof that the API sent a message to a workflow),
`links` (signed approval links). Pure; over `parkgate.rules` (a decision's
`remember` part).
"""
