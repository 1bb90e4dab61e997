"""A refused request (:class:`Refusal`): what the middleware answers, and what
``redis_ratelimit.starlette``'s exceptions carry. Its own module so that both import it and
neither imports the other back (``redis_ratelimit.middleware`` re-exports it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from ._core import Decision

__all__ = ["Refusal"]


@dataclass(frozen=True)
class Refusal:
    """A refused request: ``status`` 429 (limited; ``decision`` says until when) or 503 (Redis
    failed and the rule fails closed; ``decision`` is ``None``), the response ``headers``, the
    ``rule``'s name, and whether the denial cache answered (``cached``)."""

    status: int
    headers: Mapping[str, str]
    rule: str
    decision: Optional[Decision] = None
    cached: bool = False

    @property
    def reason(self) -> str:
        return "Too Many Requests" if self.status == 429 else "Service Unavailable"

    @property
    def body(self) -> bytes:
        """The default body, ``text/plain``."""
        return f"{self.reason}\n".encode()
