"""The identity provider, as parkgate talks to it: discovery, JWKS, the
authorization code flow with PKCE, and token validation.

Authlib builds the authorization request (PKCE S256, state, nonce) and redeems
the code; Authlib's JOSE library (joserfc) verifies signatures against the
provider's published keys. Nothing here hand-writes JOSE. An ID token is
accepted only when its issuer is the configured one, its audience names our
client, its nonce is the one this browser's login started with, and exp/iat
hold within the configured clock skew. Bearer access tokens (JWT) pass the
same checks against `oidc_audience` instead of a nonce.

httpx, Authlib and joserfc (~20 MB of imports with their dependencies) are
imported when a sign-in or a token is first handled, never by an API without
OIDC configured (docs/PERFORMANCE.md, "Scale on one machine").
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from parkgate.settings import Settings

if TYPE_CHECKING:
    import httpx
    from authlib.integrations.httpx_client import AsyncOAuth2Client
    from fastapi import Request
    from joserfc.errors import JoseError
    from joserfc.jwk import KeySet

#: Signature algorithms accepted on provider tokens (never "none" or HMAC:
#: an HMAC key would be the client secret, which is not how providers sign).
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
              "ES512", "EdDSA")
#: Discovery and keys are re-read at most this often (and on an unknown key id).
_CACHE_SECONDS = 300.0
_MIN_REFETCH_SECONDS = 10.0


class OidcError(Exception):
    """A refused sign-in or token: `message` is safe to show the person."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Login:
    """A started sign-in: where to send the browser, and what to check on return."""

    url: str
    state: str
    nonce: str
    code_verifier: str


@dataclass
class _Cache:
    metadata: dict[str, Any] | None = None
    metadata_at: float = 0.0
    keys: KeySet | None = None
    keys_at: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class OidcProvider:
    """One configured provider (settings.oidc_*), with cached discovery and keys."""

    def __init__(self, settings: Settings, *, http: httpx.AsyncClient | None = None) -> None:
        self.settings = settings
        self._http = http
        self._cache = _Cache()

    # ------------------------------------------------------------ discovery
    def _client(self) -> httpx.AsyncClient:
        import httpx

        return self._http or httpx.AsyncClient(timeout=10.0)

    async def _get_json(self, url: str) -> dict[str, Any]:
        import httpx

        client = self._client()
        try:
            response = await client.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise OidcError(f"the identity provider did not answer ({type(exc).__name__})") \
                from None
        finally:
            if self._http is None:
                await client.aclose()
        if response.status_code != 200:
            raise OidcError(f"the identity provider answered {response.status_code} for {url}")
        try:
            data = response.json()
        except ValueError:
            raise OidcError(f"the identity provider sent no JSON at {url}") from None
        if not isinstance(data, dict):
            raise OidcError(f"the identity provider sent no JSON object at {url}")
        return data

    async def metadata(self) -> dict[str, Any]:
        """The discovery document; its issuer must be exactly the configured one."""
        cache = self._cache
        now = time.monotonic()
        if cache.metadata is not None and now - cache.metadata_at < _CACHE_SECONDS:
            return cache.metadata
        async with cache.lock:
            if cache.metadata is not None and time.monotonic() - cache.metadata_at < \
                    _CACHE_SECONDS:
                return cache.metadata
            url = self.settings.oidc_issuer.rstrip("/") + "/.well-known/openid-configuration"
            data = await self._get_json(url)
            if data.get("issuer") != self.settings.oidc_issuer:
                raise OidcError(
                    f"the discovery document names issuer {data.get('issuer')!r}, "
                    f"not the configured {self.settings.oidc_issuer!r}")
            for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                if not isinstance(data.get(key), str):
                    raise OidcError(f"the discovery document has no {key}")
            cache.metadata, cache.metadata_at = data, time.monotonic()
            return data

    async def _keys(self, *, refresh: bool = False) -> KeySet:
        from joserfc.errors import JoseError
        from joserfc.jwk import KeySet

        cache = self._cache
        now = time.monotonic()
        fresh = cache.keys is not None and now - cache.keys_at < _CACHE_SECONDS
        if fresh and not refresh:
            assert cache.keys is not None
            return cache.keys
        if refresh and cache.keys is not None and now - cache.keys_at < _MIN_REFETCH_SECONDS:
            return cache.keys  # a flood of unknown key ids does not hammer the provider
        meta = await self.metadata()
        data = await self._get_json(str(meta["jwks_uri"]))
        try:
            keys = KeySet.import_key_set(data)  # type: ignore[arg-type]
        except (JoseError, ValueError, TypeError, KeyError):
            raise OidcError("the provider's JWKS could not be read") from None
        cache.keys, cache.keys_at = keys, time.monotonic()
        return keys

    # ------------------------------------------------------------ the flow
    def _oauth(self) -> AsyncOAuth2Client:
        from authlib.integrations.httpx_client import AsyncOAuth2Client

        s = self.settings
        return AsyncOAuth2Client(
            client_id=s.oidc_client_id, client_secret=s.oidc_client_secret,
            scope=" ".join(s.oidc_scopes), redirect_uri=s.oidc_redirect_uri,
            code_challenge_method="S256",
            token_endpoint_auth_method="client_secret_basic" if s.oidc_client_secret
            else "none",
            timeout=10.0,
        )

    async def start(self) -> Login:
        """A new authorization request (fresh state, nonce and PKCE verifier)."""
        from authlib.common.security import generate_token

        meta = await self.metadata()
        state, nonce, verifier = generate_token(32), generate_token(32), generate_token(64)
        async with self._oauth() as client:
            url, _ = client.create_authorization_url(
                str(meta["authorization_endpoint"]), state=state, code_verifier=verifier,
                nonce=nonce,
            )
        return Login(url=url, state=state, nonce=nonce, code_verifier=verifier)

    async def redeem(self, code: str, code_verifier: str) -> dict[str, Any]:
        """Exchange the code (with the PKCE verifier) for the token response."""
        meta = await self.metadata()
        async with self._oauth() as client:
            try:
                token = await client.fetch_token(
                    str(meta["token_endpoint"]), grant_type="authorization_code", code=code,
                    code_verifier=code_verifier,
                )
            except Exception as exc:  # Authlib raises OAuthError, httpx errors, ValueError
                detail = getattr(exc, "description", None) or getattr(exc, "error", None) \
                    or type(exc).__name__
                raise OidcError(f"the provider refused the sign-in code ({detail})") from None
        return dict(token)

    # ----------------------------------------------------------- validation
    async def verify(self, token: str, *, audience: str, nonce: str | None) -> dict[str, Any]:
        """The claims of a provider-signed JWT, or OidcError saying why not."""
        from joserfc import jwt
        from joserfc.errors import ExpiredTokenError, JoseError

        issuer = _unverified_issuer(token)
        if issuer != self.settings.oidc_issuer:
            # Said before checking the signature, so the answer names the problem;
            # nothing from an unverified token is used beyond this comparison.
            raise OidcError(f"the token was issued by {issuer!r}, not the configured issuer")
        keys = await self._keys()
        try:
            decoded = jwt.decode(token, keys, algorithms=list(ALGORITHMS))
        except JoseError as exc:
            if "kid" not in str(exc).lower() and not _unknown_key(exc):
                raise OidcError(_why(exc)) from None
            # Keys rotate: re-read the JWKS once and try again.
            keys = await self._keys(refresh=True)
            try:
                decoded = jwt.decode(token, keys, algorithms=list(ALGORITHMS))
            except JoseError as again:
                raise OidcError(_why(again)) from None
        except ValueError:
            raise OidcError("the token is not a well-formed JWT") from None
        claims = dict(decoded.claims)
        skew = self.settings.oidc_clock_skew_seconds
        options: dict[str, Any] = {
            "iss": {"essential": True, "value": self.settings.oidc_issuer},
            "aud": {"essential": True, "value": audience},
            "sub": {"essential": True},
            "exp": {"essential": True},
        }
        if nonce is not None:
            options["nonce"] = {"essential": True, "value": nonce}
        try:
            jwt.JWTClaimsRegistry(leeway=skew, **options).validate(claims)
        except ExpiredTokenError:
            raise OidcError("the token has expired") from None
        except JoseError as exc:
            raise OidcError(_why(exc)) from None
        iat = claims.get("iat")
        if isinstance(iat, int | float) and iat > time.time() + skew:
            raise OidcError("the token was issued in the future (check the clocks)")
        aud = claims.get("aud")
        azp = claims.get("azp")
        if nonce is not None and isinstance(aud, list) and len(aud) > 1 and \
                azp != self.settings.oidc_client_id:
            raise OidcError("the ID token names several audiences but not us as its azp")
        return claims


def _unverified_issuer(token: str) -> str | None:
    from joserfc.errors import JoseError
    from joserfc.jws import extract_compact

    try:
        payload = json.loads(extract_compact(token.encode()).payload)
    except (JoseError, ValueError, TypeError, UnicodeError):
        raise OidcError("the token is not a well-formed JWT") from None
    iss = payload.get("iss") if isinstance(payload, dict) else None
    return iss if isinstance(iss, str) else None


def _unknown_key(exc: JoseError) -> bool:
    return type(exc).__name__ in ("MissingKeyError", "InvalidKeyIdError")


def _why(exc: JoseError) -> str:
    name = type(exc).__name__
    claim = getattr(exc, "claim", None)
    if name == "BadSignatureError":
        return "the token's signature does not verify with the provider's keys"
    if claim == "iss":
        return "the token was issued by another issuer"
    if claim == "aud":
        return "the token is meant for another audience"
    if claim == "nonce":
        return "the token's nonce does not match this sign-in"
    if claim:
        return f"the token's {claim} claim is missing or invalid"
    return f"the token is not valid ({name})"


def provider(request: Request) -> OidcProvider:
    """The app's provider client (built on first use)."""
    found: OidcProvider | None = getattr(request.app.state, "oidc", None)
    if found is None:
        found = OidcProvider(request.app.state.settings)
        request.app.state.oidc = found
    return found
