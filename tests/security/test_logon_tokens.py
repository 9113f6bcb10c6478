"""The admin query panel's single-use logon tokens (pure state, manual clock)."""

from __future__ import annotations

from ampsclient_server_stub.security.logon_tokens import MAX_TOKENS, TOKEN_PREFIX, LogonTokens


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_token_logs_its_user_on_once() -> None:
    tokens = LogonTokens(clock=Clock())
    token = tokens.issue("ops")
    assert token.startswith(TOKEN_PREFIX) and len(token) > len(TOKEN_PREFIX) + 40
    assert not tokens.redeem("other", token)  # another user: refused, and not used up
    assert tokens.redeem("ops", token)
    assert not tokens.redeem("ops", token)  # once
    assert (tokens.issued, tokens.redeemed, len(tokens)) == (1, 1, 0)


def test_a_token_expires() -> None:
    clock = Clock()
    tokens = LogonTokens(ttl=60, clock=clock)
    early, late = tokens.issue("ops"), None
    clock.now += 30
    late = tokens.issue("ops")
    clock.now += 30  # the first is 60 s old
    assert not tokens.redeem("ops", early)
    assert tokens.redeem("ops", late)


def test_only_prefixed_passwords_are_looked_up_and_the_store_is_bounded() -> None:
    tokens = LogonTokens(clock=Clock())
    first = tokens.issue("ops")
    assert not tokens.redeem("ops", first[len(TOKEN_PREFIX) :])
    assert not tokens.redeem("ops", "")
    for _ in range(MAX_TOKENS):
        tokens.issue("ops")
    assert len(tokens) == MAX_TOKENS
    assert not tokens.redeem("ops", first)  # the oldest went first
