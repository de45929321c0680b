"""What the API's three audiences share, below all of them.

The call service (`service`: start, read, long-poll, decide, cancel), the
request and response models (`schemas`), dependencies (`deps`), the one error
shape (`errors`), how a decision is answered (`decisions`) and its remember
checked (`remember_checks`), re-derived approval links (`approval_links`:
calls and decisions name them, so they sit below both), body and rate limits
(`limits`, `ratelimit`), the metrics registry (`metrics`); the sign-in pieces
every signed-in page uses (`csrf`, `key_sessions`, `oidc_sessions`,
`oidc_provider`, `oidc_bearer`, `signin`), the pages' helpers and assets
(`views`, `templates/`, `static/`), what the approval, inbox and audit pages
show of a call's budgets (`budget_view`) and of its whole output (`full_output`).

Imports nothing of `parkgate.api.agents`, `.people` or `.operators`
(.importlinter, "api-layers").
"""
