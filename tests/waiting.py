"""Polling for end-to-end tests on real processes: wait for a condition with a deadline generous
enough for a slow machine, and fail naming what was awaited."""

import asyncio
import time


async def until_async(predicate, what: str, timeout: float = 60.0, period: float = 0.1):
    """Await `predicate()` (a coroutine function) until it returns something true; return it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        result = await predicate()
        if result:
            return result
        await asyncio.sleep(period)
    raise AssertionError(f"timed out waiting for {what}")


async def until_checked(check, what: str, timeout: float = 60.0, period: float = 0.1):
    """Call `check()` (a plain function) on the running loop's clock, virtual time in the
    whole-stack simulator, until it returns something true; return it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if result := check():
            return result
        await asyncio.sleep(period)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def until(check, what: str, timeout: float = 60.0, period: float = 0.2):
    """Call `check()` until it returns something true; return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(period)
    raise AssertionError(f"timed out waiting for {what}")
