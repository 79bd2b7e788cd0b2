"""Who may act: nobody without CONSOLE_TOKEN; else whoever signs in with it (docs/console.md). The
session cookie is ``<id>.<issued>.<HMAC>`` under a key of the token and a secret drawn at start, so
a restart or another token ends every session; each form's ``csrf`` is HMAC(key, "csrf:" + id).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

COOKIE = "setqueue_console"
SESSION_SECONDS = 12 * 3600


class Refused(PermissionError): ...


@dataclass(frozen=True)
class Session:
    id: str
    issued: int


class Guard:
    def __init__(self, token: str) -> None:
        self.token = token
        secret = secrets.token_bytes(32)
        self._key = hashlib.sha256(b"setqueue-console\0" + secret + token.encode()).digest()

    @property
    def read_only(self) -> bool:
        return not self.token

    def _sign(self, message: str) -> str:
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def check_token(self, given: str) -> bool:
        return bool(self.token) and hmac.compare_digest(given.encode(), self.token.encode())

    def new_session(self) -> str:
        sid, issued = secrets.token_urlsafe(18), int(time.time())
        return f"{sid}.{issued}.{self._sign(f'{sid}.{issued}')}"

    def session(self, cookie: str | None) -> Session | None:
        if self.read_only or not cookie or cookie.count(".") != 2:
            return None
        sid, issued, signature = cookie.split(".")
        if not issued.isdigit() or not hmac.compare_digest(signature, self._sign(f"{sid}.{issued}")):
            return None
        if time.time() - int(issued) > SESSION_SECONDS:
            return None
        return Session(sid, int(issued))

    def csrf(self, session: Session | None) -> str:
        return "" if session is None else self._sign(f"csrf:{session.id}")

    def authorize(self, session: Session | None, csrf: str | None) -> None:
        if self.read_only:
            raise Refused("this console is read-only: start it with CONSOLE_TOKEN set to enable actions")
        if session is None:
            raise Refused("sign in with the console token first")
        if not csrf or not hmac.compare_digest(csrf, self.csrf(session)):
            raise Refused("the form's CSRF token is missing or stale: reload the page and try again")
