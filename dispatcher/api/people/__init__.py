"""The people's pages: what approvers and admins open in a browser or in Slack.

Approval links (`routes_approve`, what they show in `approve_page`, edited
arguments in `decide_forms`); the approver
inbox (`routes_inbox` routes, `inbox` who sees what, `inbox_pages` rendering,
`inbox_signin` its sign-in); sign-in with the identity provider
(`routes_oidc`); Slack's Approve/Deny clicks (`routes_slack`); remembered
decisions, listed and revoked (`routes_remembered`).

Imports `parkgate.api.shared` and nothing of `agents` or `operators`
(.importlinter, "api-audiences").
"""
