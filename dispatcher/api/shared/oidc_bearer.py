"""Provider-issued JWTs as API credentials, so the CLI and scripts can act as a person.

An access token (or any JWT the provider signs for `oidc_audience`, default
the client id) is accepted in place of an API key when it verifies against the
provider's JWKS with the configured issuer and audience and is unexpired
(within the clock skew). The person's groups grant human roles only (approver,
auditor, admin: never agent), exactly as on the pages; a token names one
person, so its groups are re-read with every new token.
"""

from __future__ import annotations

from fastapi import Request

from parkgate.api.shared import oidc_sessions
from parkgate.api.shared.errors import ApiError
from parkgate.api.shared.oidc_provider import OidcError, provider
from parkgate.approvals.access import Principal
from parkgate.settings import Settings


async def bearer_principal(request: Request, token: str) -> Principal:
    """The person a bearer JWT names, or 401 saying why the token is refused."""
    settings: Settings = request.app.state.settings
    audience = settings.oidc_audience or settings.oidc_client_id
    try:
        claims = await provider(request).verify(token, audience=audience, nonce=None)
    except OidcError as exc:
        raise ApiError(401, "unauthorized", f"bearer token refused: {exc.message}") from None
    return oidc_sessions.principal_for(settings, oidc_sessions.session_data(settings, claims))
