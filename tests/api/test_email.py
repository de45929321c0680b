"""E-mail to named approvers, against a real SMTP server (aiosmtpd) on a free port:
one mail each with their own working link, the diff as text, SMTP AUTH with the
configured password, and a refused recipient retried without re-sending the others."""

from __future__ import annotations

import asyncio
import contextlib
import email
import re
from collections.abc import Iterator
from email.message import EmailMessage
from email.policy import default as default_policy
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from temporalio.client import Client

from parkgate.sandbox.toolenv import tool_environment
from parkgate.store.repository import Repository
from tests.api.rig import api_rig, cancelled_activities, free_socket
from tests.api.test_named_approvers import post_link

#: aiosmtpd warns about AUTH without TLS (the plain tests; TLS is tested below).
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH:UserWarning")

POLICY = {"rules": [{"tool": "write_file", "mode": "prompt",
                     "approvers": ["alice", "bob"], "quorum": 2}]}
PEOPLE: dict[str, Any] = {
    "approvers": {"alice": {"email": "alice@example.com"},
                  "bob": {"email": "bob@example.com"}},
}


class Inbox:
    """aiosmtpd handler: keeps every accepted message; can refuse a recipient once."""

    def __init__(self, refuse_once: str | None = None) -> None:
        self.messages: list[EmailMessage] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self.refuse_once = refuse_once
        self.refused = 0

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                          rcpt_options: list[str]) -> str:
        if address == self.refuse_once:
            self.refuse_once = None
            self.refused += 1
            return "451 4.3.0 try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        msg = email.message_from_bytes(envelope.content, policy=default_policy)
        assert isinstance(msg, EmailMessage)
        self.messages.append(msg)
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        return "250 Message accepted"


class Authenticator:
    """Accepts one login; records what was tried."""

    def __init__(self, user: str, password: str) -> None:
        self.user, self.password = user.encode(), password.encode()
        self.tries: list[bytes] = []

    def __call__(self, server: Any, session: Any, envelope: Any, mechanism: str,
                 auth_data: Any) -> AuthResult:
        assert isinstance(auth_data, LoginPassword)
        self.tries.append(auth_data.login)
        ok = (auth_data.login, auth_data.password) == (self.user, self.password)
        return AuthResult(success=ok, handled=False)


@contextlib.contextmanager
def smtp_server(inbox: Inbox, auth: Authenticator) -> Iterator[int]:
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    controller = Controller(inbox, hostname="127.0.0.1", port=port, authenticator=auth,
                            auth_require_tls=False, auth_required=True)
    controller.start()
    try:
        yield port
    finally:
        controller.stop()


def smtp_settings(port: int) -> dict[str, Any]:
    return {"smtp_host": "127.0.0.1", "smtp_port": port, "smtp_security": "none",
            "smtp_username": "parkgate", "smtp_password": "s3cret-smtp",
            "smtp_from": "parkgate@example.org"}


async def wait_for(predicate: Any, timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


def link_in(msg: EmailMessage, base_url: str) -> str:
    text = msg.get_content()
    match = re.search(re.escape(base_url) + r"/approve/\S+", text)
    assert match, text
    return match.group(0)


async def test_each_named_approver_gets_a_mail_with_a_working_link(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    inbox, auth = Inbox(), Authenticator("parkgate", "s3cret-smtp")
    with smtp_server(inbox, auth) as port:
        async with api_rig(dev_temporal, sqlite_repo, tmp_path, policy=POLICY,
                           **PEOPLE, **smtp_settings(port)) as api:
            sid = await api.register()
            await api.submit(sid, "write_file", {"path": "m.txt", "content": "hello mail\n"},
                             call_id="toolu_mail")
            await wait_for(lambda: len(inbox.messages) >= 2)
            await asyncio.sleep(0.3)  # nothing more arrives
            assert len(inbox.messages) == 2
            by_to = {str(m["To"]): m for m in inbox.messages}
            assert sorted(by_to) == ["alice@example.com", "bob@example.com"]
            assert sorted(rcpts[0] for _, rcpts in inbox.envelopes) == sorted(by_to)
            assert auth.tries and set(auth.tries) == {b"parkgate"}
            links = {}
            for address, msg in by_to.items():
                name = address.split("@")[0]
                assert msg["From"] == "parkgate@example.org"
                assert "write_file" in msg["Subject"] and sid in msg["Subject"]
                text = msg.get_content()
                assert f"Hello {name}," in text
                assert "+hello mail" in text  # the diff, as text
                assert "2 approvals needed" in text
                links[name] = link_in(msg, api.base_url)
            assert links["alice"] != links["bob"]

            # Each link decides as its own approver: two approvals run the call.
            first = await post_link(api, links["alice"])
            assert first.status_code == 202 and "1 of 2" in first.text, first.text
            assert not (api.workspace / "m.txt").exists()
            second = await post_link(api, links["bob"])
            assert second.status_code == 200, second.text
            done = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_mail",
                                       params={"wait": 20})).json()
            assert done["status"] == "succeeded", done
            assert (api.workspace / "m.txt").read_text() == "hello mail\n"
            approval = await api.repo.get_approval(done["request_id"])
            assert approval is not None and approval.votes == ["alice", "bob"]


async def test_refused_recipient_is_retried_without_resending_the_others(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    inbox, auth = Inbox(refuse_once="bob@example.com"), Authenticator("parkgate", "s3cret-smtp")
    with smtp_server(inbox, auth) as port:
        async with api_rig(dev_temporal, sqlite_repo, tmp_path, policy=POLICY,
                           **PEOPLE, **smtp_settings(port)) as api:
            sid = await api.register()
            await api.submit(sid, "write_file", {"path": "r.txt", "content": "r"},
                             call_id="toolu_retry")
            # bob's mail waits for Temporal's retry; the call stays parked meanwhile.
            await wait_for(lambda: len(inbox.messages) >= 2)
            view = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_retry")).json()
            assert view["status"] == "parked", view
            await asyncio.sleep(0.3)
            assert inbox.refused == 1
            assert sorted(str(m["To"]) for m in inbox.messages) == [
                "alice@example.com", "bob@example.com"]


async def test_wrong_smtp_password_never_blocks_the_call_and_the_retry_ends_with_it(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    inbox, auth = Inbox(), Authenticator("parkgate", "another-password")
    with smtp_server(inbox, auth) as port:
        async with api_rig(dev_temporal, sqlite_repo, tmp_path,
                           policy={"rules": [{"tool": "write_file", "mode": "prompt",
                                              "approvers": ["alice"]}]},
                           **PEOPLE, **smtp_settings(port)) as api:
            sid = await api.register()
            await api.submit(sid, "write_file", {"path": "w.txt", "content": "w"},
                             call_id="toolu_pw")
            await wait_for(lambda: len(auth.tries) >= 1)
            parked = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_pw")).json()
            assert parked["status"] == "parked", parked
            assert inbox.messages == []
            links = (await api.repo.get_approval(parked["request_id"]))
            assert links is not None
            from parkgate.api.shared.approval_links import personal_link

            link = personal_link(api.rig.settings, api.rig.settings.signing_secret(), links,
                                 "alice")
            assert (await post_link(api, link)).status_code == 200
            done = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_pw",
                                       params={"wait": 20})).json()
            assert done["status"] == "succeeded", done
            # The notice still being retried was cancelled when the call ended.
            assert "parkgate.notify" in await cancelled_activities(api.rig.client, sid,
                                                                   "toolu_pw")


def test_smtp_password_never_reaches_a_tool(tmp_path: Path) -> None:
    from parkgate.settings import Settings

    settings = Settings(data_dir=tmp_path, **smtp_settings(2525))
    env = settings.to_env()
    assert env["PARKGATE_SMTP_PASSWORD"] == "s3cret-smtp"
    assert "s3cret-smtp" not in repr(settings)
    tool_env = tool_environment(str(tmp_path), passthrough=["PARKGATE_SMTP_PASSWORD"],
                                source={**env, "PATH": "/usr/bin"})
    assert "s3cret-smtp" not in tool_env.values()


# ------------------------------------------------------------------ TLS
def make_cert(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (it is its own CA bundle)."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "parkgate test smtp")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "smtp.pem", tmp_path / "smtp.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return cert_path, key_path


class TlsInbox(Inbox):
    """Also records whether each message arrived over TLS."""

    def __init__(self) -> None:
        super().__init__()
        self.over_tls: list[bool] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.over_tls.append(server.transport.get_extra_info("ssl_object") is not None)
        return await super().handle_DATA(server, session, envelope)


@contextlib.contextmanager
def tls_smtp_server(inbox: Inbox, cert: Path, key: Path, *, implicit: bool,
                    starttls: bool = True) -> Iterator[int]:
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert), str(key))
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    auth = Authenticator("parkgate", "s3cret-smtp")
    kwargs: dict[str, Any] = (
        {"ssl_context": context} if implicit
        else {"tls_context": context, "require_starttls": True} if starttls else {})
    controller = Controller(inbox, hostname="127.0.0.1", port=port, authenticator=auth,
                            # (aiosmtpd only counts STARTTLS as TLS for this check)
                            auth_require_tls=starttls and not implicit,
                            **kwargs)
    controller.start()
    try:
        yield port
    finally:
        controller.stop()


def tls_message() -> EmailMessage:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "parkgate@example.org", "a@example.org", "tls"
    msg.set_content("over tls")
    return msg


async def test_starttls_and_implicit_tls_verify_the_server(tmp_path: Path) -> None:
    from parkgate.channels import mail
    from parkgate.settings import Settings

    cert, key = make_cert(tmp_path)
    for security, implicit in (("starttls", False), ("ssl", True)):
        inbox = TlsInbox()
        with tls_smtp_server(inbox, cert, key, implicit=implicit) as port:
            settings = Settings(data_dir=tmp_path, **{
                **smtp_settings(port), "smtp_security": security, "smtp_ca_path": cert})
            await mail.send(settings, tls_message())
            assert [m["Subject"] for m in inbox.messages] == ["tls"] and inbox.over_tls == [True]
            # Without the CA the server's certificate is not trusted: nothing is sent.
            untrusted = settings.model_copy(update={"smtp_ca_path": None})
            try:
                await mail.send(untrusted, tls_message())
                raise AssertionError("an untrusted certificate was accepted")
            except mail.MailError as exc:
                assert "CERTIFICATE_VERIFY_FAILED" in str(exc) or "certificate" in str(exc)
            assert len(inbox.messages) == 1


async def test_starttls_is_required_when_configured(tmp_path: Path) -> None:
    """A server that does not offer STARTTLS gets no login and no mail."""
    from parkgate.channels import mail
    from parkgate.settings import Settings

    cert, key = make_cert(tmp_path)
    inbox = TlsInbox()
    with tls_smtp_server(inbox, cert, key, implicit=False, starttls=False) as port:
        settings = Settings(data_dir=tmp_path, **{**smtp_settings(port),
                                                  "smtp_security": "starttls",
                                                  "smtp_ca_path": cert})
        try:
            await mail.send(settings, tls_message())
            raise AssertionError("sent without TLS")
        except mail.MailError as exc:
            assert "STARTTLS" in str(exc) or "starttls" in str(exc).lower(), exc
        assert inbox.messages == []
