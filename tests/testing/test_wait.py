"""The tests' polling helpers: ``wait_for`` and its coroutine form ``wait_for_async``."""

from __future__ import annotations

import asyncio

import pytest

from ampsclient_server_stub.testing import wait_for, wait_for_async


async def test_wait_for_async_lets_the_loop_run_until_the_condition_holds() -> None:
    done: list[int] = []
    loop = asyncio.get_running_loop()
    loop.call_soon(done.append, 1)  # runs only if the helper yields to the loop
    await wait_for_async(lambda: done == [1], what="the callback")
    assert done == [1]


async def test_wait_for_async_names_what_it_waited_for_when_the_deadline_passes() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0\.05 s waiting for the marker"):
        await wait_for_async(lambda: False, 0.05, "the marker")


def test_wait_for_names_what_it_waited_for_when_the_deadline_passes() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0\.05 s waiting for the marker"):
        wait_for(lambda: False, 0.05, "the marker")
