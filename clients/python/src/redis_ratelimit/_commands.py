"""Every command this package sends to the server, built in one place, with how to read its reply.

The sync and asyncio clients and the ``limits`` storages only run these :class:`Call`\\ s
(``engine.execute(call.args)`` then ``call.read(reply)``). Commands are written in the module's
words; ``_engine`` sends them as they are to the module, or as the Functions library's ``FCALL``
or ``EVALSHA`` (same replies) where the server has no module. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, List, Optional, Sequence, Tuple, TypeVar

from ._core import (
    Concurrency,
    Decision,
    Limit,
    Number,
    Policy,
    PolicyOptions,
    all_args,
    concurrency_args,
    options,
    parse,
    policy_from_words,
    policy_set_args,
    single_args,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One command: its arguments (``args[0]`` is the command's name) and ``read``, which turns
    the reply into the value the caller returns."""

    args: List[str]
    read: Callable[[Any], T]


def _str(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _label(limit: Limit, name: Optional[str]) -> str:
    if name:
        return name
    return limit.name if isinstance(limit, Policy) else limit.keyword.lower()


def check(
    key: str,
    limit: Limit,
    *,
    tokens: int = 1,
    refund: Optional[int] = None,
    peek: bool = False,
    force: bool = False,
    block: Optional[Number] = None,
    name: Optional[str] = None,
) -> Call[Decision]:
    """The command of ``limit``'s algorithm on ``key`` (``RL.LIMIT`` for a :class:`Policy`)."""
    args = single_args(key, limit, options(tokens, refund, peek, block, force))
    label, window_s = _label(limit, name), limit.window_s
    return Call(args, lambda reply: parse(reply, label, window_s))


def all_of(
    pairs: Sequence[Tuple[str, Limit]],
    *,
    tokens: int = 1,
    refund: Optional[int] = None,
    peek: bool = False,
    force: bool = False,
    block: Optional[Number] = None,
    name: Optional[str] = None,
) -> Call[Decision]:
    """``RL.ALL``: the decision carries the binding limit's label and window; ``force``: ``FORCE``
    after each limit (a concurrency limit takes none)."""
    args = all_args(pairs, options(tokens, refund, peek, block), force=force)

    def read(reply: Any) -> Decision:
        bound = pairs[parse(reply, "", None).binding or 0][1]
        return parse(reply, _label(bound, name), bound.window_s)

    return Call(args, read)


def concurrency(
    op: str,
    key: str,
    limit: Concurrency,
    lease_id: str,
    *,
    tokens: int = 1,
    peek: bool = False,
    block: Optional[Number] = None,
    name: Optional[str] = None,
) -> Call[Decision]:
    """``RL.CONCURRENCY key limit lease op id``: ``op`` is ``ACQUIRE`` (with ``TOKENS``,
    ``PEEK``, ``BLOCK``), ``RENEW`` or ``RELEASE`` (``PEEK`` only)."""
    if op != "ACQUIRE" and (tokens != 1 or block is not None):
        raise ValueError(f"{op} takes neither tokens nor block (ACQUIRE does)")
    args = concurrency_args(key, limit, op, lease_id, options(tokens, None, peek, block))
    label = name or "concurrency"
    return Call(args, lambda reply: parse(reply, label, None))


def policy_set(
    name: str,
    limit: Limit,
    *,
    shadow: bool = False,
    soft: Optional[int] = None,
    block: Optional[Number] = None,
) -> Call[None]:
    return Call(policy_set_args(name, limit, shadow, soft, block), lambda reply: None)


def policy_get(name: str) -> Call[Optional[Tuple[Limit, PolicyOptions]]]:
    return Call(
        ["RL.POLICY", "GET", name], lambda words: policy_from_words(words) if words else None
    )


def policy_del(name: str) -> Call[bool]:
    return Call(["RL.POLICY", "DEL", name], bool)


def policy_list() -> Call[List[str]]:
    return Call(["RL.POLICY", "LIST"], lambda names: [_str(x) for x in names])


def policy_dump() -> Call[str]:
    return Call(["RL.POLICY", "DUMP"], _str)


def policy_load(text: str, *, replace: bool = False) -> Call[int]:
    return Call(["RL.POLICY", "LOAD"] + (["REPLACE"] if replace else []) + [text], int)


def policy_resetstats() -> Call[None]:
    return Call(["RL.POLICY", "RESETSTATS"], lambda reply: None)
