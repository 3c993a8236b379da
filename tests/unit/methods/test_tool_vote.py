"""Self-consistency for agentic requests: a vote over the tool calls asked for, by name or by
name and arguments, in the API and through the service's ``sc:`` method."""

from __future__ import annotations

import json

import aiohttp
import pytest
from conftest import running_service

from rse_fast.llm.client import LLMClient
from rse_fast.methods import Problem, make_method
from rse_fast.methods.voting import tool_call_key
from rse_fast.testing import Reply, ScriptedServer

TOOLS = ({"type": "function", "function": {"name": "get_weather", "parameters": {}}},)
ASK = ({"role": "system", "content": "You are an agent."},
       {"role": "user", "content": "Weather in Paris?"})  # fmt: skip


def agent(body: dict, index: int) -> Reply:
    """Seeds 0 mod 5 ask for Lyon; the others for Paris, with arguments written in two ways."""
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert body["messages"][0]["content"] == "You are an agent."  # sent as written
    seed = int(body.get("seed") or 0)
    if seed % 5 == 0:
        return Reply(tool_calls=({"name": "get_weather", "arguments": '{"city": "Lyon"}'},))
    args = '{"unit": "c", "city": "Paris"}' if seed % 2 else '{"city":"Paris","unit":"c"}'
    return Reply(tool_calls=({"name": "get_weather", "arguments": args},))


def test_tool_call_keys():
    a = [{"function": {"name": "f", "arguments": '{"x": 1, "y": 2}'}}]
    b = [{"function": {"name": "f", "arguments": '{"y":2,"x":1}'}}]
    c = [{"function": {"name": "f", "arguments": '{"x": 3}'}}]
    assert tool_call_key(a, "arguments") == tool_call_key(b, "arguments")
    assert tool_call_key(a, "arguments") != tool_call_key(c, "arguments")
    assert tool_call_key(a, "name") == tool_call_key(c, "name")
    assert tool_call_key([], "name") == "(no tool call)"


@pytest.mark.parametrize("match", ["name", "arguments"])
async def test_self_consistency_votes_over_tool_calls(match):
    problem = Problem("agent", "Weather in Paris?", conversation=ASK, tools=TOOLS)
    async with ScriptedServer(default_reply=agent) as srv, LLMClient(srv.base_url, "m") as c:
        res = await make_method("sc", parallel=5, max_tokens=64, tool_vote=match).run(
            problem, 1500, c
        )
    assert len(res.pool) >= 5
    args = json.loads(res.final.tool_calls[0]["function"]["arguments"])
    assert res.final.tool_calls[0]["function"]["name"] == "get_weather"
    if match == "arguments":
        assert args["city"] == "Paris"  # the two spellings of Paris count as one vote
        assert res.meta["votes"] >= len(res.pool) * 0.6
    else:
        assert res.meta["votes"] == len(res.pool)  # every reply calls get_weather


async def test_service_sc_votes_over_tool_calls():
    async with ScriptedServer(default_reply=agent) as up, running_service(up) as (_, base):
        async with aiohttp.ClientSession() as s:
            body = {
                "model": "sc:m",
                "messages": list(ASK),
                "tools": list(TOOLS),
                "budget": 1500,
                "k": 5,
                "max_tokens": 64,
            }
            async with s.post(base + "/v1/chat/completions", json=body) as r:
                assert r.status == 200, await r.text()
                data = await r.json()
            async with s.post(base + "/v1/chat/completions", json={**body, "stream": True}) as r:
                events = [
                    json.loads(line[6:])
                    for line in (await r.text()).splitlines()
                    if line.startswith("data: {")
                ]
            bad = {**body, "tool_vote": "vibes"}
            async with s.post(base + "/v1/chat/completions", json=bad) as r:
                assert r.status == 400 and (await r.json())["error"]["param"] == "tool_vote"
            async with s.post(base + "/v1/chat/completions", json={**body, "model": "bon:m"}) as r:
                assert r.status == 400 and (await r.json())["error"]["param"] == "tools"
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"])["city"] == "Paris"
    deltas = [e["choices"][0]["delta"] for e in events if e.get("choices")]
    streamed = [d["tool_calls"] for d in deltas if d.get("tool_calls")]
    assert streamed and streamed[0][0]["index"] == 0
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
