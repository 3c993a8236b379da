"""Every family of the catalog through the service, reflexion on a code problem whose stated
examples run in the sandbox (bubblewrap)."""

from __future__ import annotations

import json

import aiohttp
import pytest
from conftest import running_service

from rse_fast.testing import ScriptedServer

from fakes.scripted_model import PROBLEM, reply

MSG = [{"role": "user", "content": PROBLEM}]


STUB = 'def add(a, b):\n    """Add two numbers.\n    >>> add(2, 3)\n    5\n    """\n'


def code_or_math(body: dict, index: int) -> str:
    if "def add" in json.dumps(body["messages"]):
        return "```python\ndef add(a, b):\n    return a + b\n```"
    return reply(body, index)


@pytest.fixture
def sandbox_available() -> None:
    """Reflexion's code problem runs in the sandbox, which needs bubblewrap; a machine without
    it skips, CI fails (it installs it)."""
    import os

    from rse_fast.eval import sandbox

    if not sandbox.bwrap_works(sandbox.interpreter()):
        if os.environ.get("CI") == "true":
            pytest.fail("bubblewrap cannot run here; .ci/run installs it")
        pytest.skip("bubblewrap (bwrap) is not available: apt-get install bubblewrap")


@pytest.mark.integration
async def test_every_family_of_the_catalog_answers_through_the_service(sandbox_available):
    """Every family the catalog names answers its ``<family>:<model>``; reflexion, which
    retries on the examples a code problem states, takes one (``entry_point``) and says so
    when a request sends none."""
    from rse_fast.methods.catalog import METHODS

    async with ScriptedServer(default_reply=code_or_math) as up:
        async with running_service(up) as (_, root), aiohttp.ClientSession() as s:
            url = root + "/v1"
            models = await (await s.get(url + "/models")).json()
            for family in METHODS:
                body = {"model": f"{family}:scripted", "messages": MSG, "budget": 4000,
                        "max_tokens": 64, "k": 2}  # fmt: skip
                if family == "reflexion":
                    async with s.post(url + "/chat/completions", json=body) as r:
                        refused = await r.json()
                    assert r.status == 400 and "entry_point" in refused["error"]["message"]
                    body["messages"] = [{"role": "user", "content": STUB}]
                    body["entry_point"] = "add"
                sent = len(up.requests)
                async with s.post(url + "/chat/completions", json=body) as r:
                    data = await r.json()
                assert r.status == 200, (family, data)
                assert data["model"] == f"{family}:scripted" and data["choices"][0]["message"]
                # the method ran here: the upstream never saw the prefixed name
                assert {b["model"] for b in up.requests[sent:]} == {"scripted"}, family
            assert "return a + b" in data["choices"][0]["message"]["content"]  # reflexion's
    ids = {m["id"] for m in models["data"]}
    assert {f"{family}:scripted" for family in METHODS} <= ids
