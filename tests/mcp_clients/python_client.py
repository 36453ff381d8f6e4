"""`brainloop mcp` driven by the official MCP Python SDK (`mcp` from PyPI), run by
tests/mcp_clients.rs against a running worker (issue 55).

The SDK has no Tasks client, so this builds one on its extension mechanism, as a host would:
`Tasks`, a `ClientExtension` for `io.modelcontextprotocol/tasks` whose `ResultClaim` takes
`resultType: "task"` and polls `tasks/get` through the session until the task ends. The SDK
advertises the extension and negotiates 2026-07-28 (`server/discover`, no `initialize`).

Scenarios: tools/list (annotations, the read tool's outputSchema), a read that needs no task,
a command that becomes a task and completes, a write that waits for the operator (the
validation named) and completes after `brainloop approve`, tasks/cancel of a queued and of a
waiting job, another client's task ids refused. Any failure raises (exit 1); the last line is
`ALL OK`.

Environment: BRAINLOOP_BIN, BRAINLOOP_DATA_DIR, BRAINLOOP_CONFIG (the worker's), and the
workspace as argv[1].
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, TypeAdapter

TASKS = "io.modelcontextprotocol/tasks"
BIN = os.environ["BRAINLOOP_BIN"]
DATA = os.environ["BRAINLOOP_DATA_DIR"]
WORKSPACE = Path(sys.argv[1])
ANY = TypeAdapter(dict[str, Any])


def step(what: str) -> None:
    print(f"ok: {what}", flush=True)


# --- The Tasks extension (the SDK's extension API, the extension's 2026-07-28 wire) ---------


class TaskIdParams(types.RequestParams):
    task_id: str


class GetTask(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class CancelTask(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


class CreatedTask(types.Result):
    """`CreateTaskResult`: the seed state of a task, flat at the top level."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    ttl_ms: int | None = None


async def get_task(session: Any, task_id: str) -> dict[str, Any]:
    return await session.send_request(GetTask(params=TaskIdParams(task_id=task_id)), ANY)


async def cancel_task(session: Any, task_id: str) -> dict[str, Any]:
    return await session.send_request(CancelTask(params=TaskIdParams(task_id=task_id)), ANY)


Hook = Callable[[Any, dict[str, Any]], Awaitable[None]]


class Tasks(ClientExtension):
    """Resolves a task into the tool result: polls `tasks/get` at the task's `pollIntervalMs`,
    telling `hook` each state (what a host shows its user), until completed or cancelled."""

    identifier = TASKS

    def __init__(self) -> None:
        self.hook: Hook | None = None
        self.created: list[CreatedTask] = []

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve)]

    async def resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(created)
        interval = (created.poll_interval_ms or 1000) / 1000
        with anyio.fail_after(60):
            while True:
                task = await get_task(ctx.session, created.task_id)
                if self.hook is not None:
                    await self.hook(ctx.session, task)
                status = task["status"]
                if status == "completed":
                    return types.CallToolResult.model_validate(task["result"])
                if status in ("failed", "cancelled"):
                    text = task.get("statusMessage") or status
                    return types.CallToolResult(
                        content=[types.TextContent(type="text", text=f"{status}: {text}")],
                        is_error=True,
                    )
                assert status == "working", task  # brainloop never asks for input
                await anyio.sleep(interval)


# --- The scenario ------------------------------------------------------------------------------


def server(client: str) -> StdioServerParameters:
    env = dict(os.environ, BRAINLOOP_TEST_ACTIONS="1", BRAINLOOP_LOG="warn")
    return StdioServerParameters(command=BIN, args=["mcp", "--client", client, "--data-dir", DATA], env=env)


def args(action: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"action": action, "params": params}


def approve(vid: str) -> None:
    out = subprocess.run([BIN, "approve", vid], env=dict(os.environ), capture_output=True, text=True)
    assert out.returncode == 0, (out.stdout, out.stderr)


def validation_of(task: dict[str, Any]) -> str | None:
    m = re.search(r"brainloop approve ([^\s`]+)", task.get("statusMessage") or "")
    return m.group(1) if m else None


async def main() -> None:
    tasks = Tasks()
    info = types.Implementation(name="python-sdk-test", version="1")
    async with Client(server("agent"), extensions=[tasks], client_info=info) as c:
        assert c.protocol_version in MODERN_PROTOCOL_VERSIONS, c.protocol_version
        step(f"negotiated {c.protocol_version}")

        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert list(tools) == ["brainloop", "brainloop_read"], list(tools)
        w, r = tools["brainloop"].annotations, tools["brainloop_read"].annotations
        assert (w.read_only_hint, w.destructive_hint, w.open_world_hint) == (False, True, True), w
        assert (r.read_only_hint, r.destructive_hint, r.idempotent_hint, r.open_world_hint) == (True, False, True, False), r
        assert tools["brainloop_read"].output_schema is not None
        assert tools["brainloop_read"].output_schema["required"] == ["status", "result", "error"]
        step("tools/list: annotations and the read tool's outputSchema")

        # A read answered by the front-end: a plain result, no task (and it fits the outputSchema,
        # which the SDK checks).
        direct = await c.session.call_tool("brainloop_read", args("list_actions", {}), allow_claimed=True)
        assert isinstance(direct, types.CallToolResult), direct
        assert not direct.is_error and direct.structured_content["status"] == "succeeded", direct
        res = await c.call_tool("brainloop_read", args("get_schema", {"action_name": "execute_bash"}))
        assert not res.is_error, res
        assert tasks.created == [], tasks.created
        step("a read needs no task")

        # A command: a task, polled to its end by the extension.
        res = await c.call_tool("brainloop", args("execute_bash", {"command": "echo hi"}))
        assert not res.is_error, res
        assert res.structured_content["result"]["stdout"] == "hi\n", res
        t = tasks.created[-1]
        assert re.fullmatch(r"bl-[1-9][0-9]*-[0-9a-f]{16}", t.task_id), t
        assert t.poll_interval_ms == 250, t
        done = t.task_id
        step(f"a command became task {done} and completed")

        # A write waits for the operator: the task names the validation; approved outside MCP.
        seen: list[dict[str, Any]] = []

        async def operator(_session: Any, task: dict[str, Any]) -> None:
            seen.append(task)
            vid = validation_of(task)
            if vid and len([s for s in seen if validation_of(s)]) == 1:
                assert task["status"] == "working", task
                await anyio.to_thread.run_sync(approve, vid)

        tasks.hook = operator
        res = await c.call_tool("brainloop", args("execute_bash", {"command": "touch approved.txt"}))
        tasks.hook = None
        assert not res.is_error and res.structured_content["status"] == "succeeded", res
        assert any(validation_of(s) for s in seen), seen
        assert (WORKSPACE / "approved.txt").exists()
        step("a write waited for the operator and completed after brainloop approve")

        # tasks/cancel of a queued job: a sleep holds the only slot, the next job stays queued.
        sleeper = await c.session.call_tool("brainloop", args("sleep", {"ms": 30000}), allow_claimed=True)
        assert isinstance(sleeper, CreatedTask), sleeper
        with anyio.fail_after(60):
            while "running" not in ((await get_task(c.session, sleeper.task_id)).get("statusMessage") or ""):
                await anyio.sleep(0.05)

        async def withdraw(when: Callable[[dict[str, Any]], bool]) -> Hook:
            sent: list[str] = []

            async def hook(session: Any, task: dict[str, Any]) -> None:
                if not sent and when(task):
                    sent.append(task["taskId"])
                    await cancel_task(session, task["taskId"])

            return hook

        tasks.hook = await withdraw(lambda t: "queued" in (t.get("statusMessage") or ""))
        res = await c.call_tool("brainloop", args("execute_bash", {"command": "touch queued.txt"}))
        assert res.is_error and "cancelled" in res.content[0].text and "client:agent" in res.content[0].text, res
        await cancel_task(c.session, sleeper.task_id)
        with anyio.fail_after(60):
            while (await get_task(c.session, sleeper.task_id))["status"] != "cancelled":
                await anyio.sleep(0.05)
        step("tasks/cancel of a queued and of a running job")

        # tasks/cancel of a job waiting for the operator.
        tasks.hook = await withdraw(lambda t: validation_of(t) is not None)
        res = await c.call_tool("brainloop", args("execute_bash", {"command": "touch waiting.txt"}))
        tasks.hook = None
        assert res.is_error and "cancelled" in res.content[0].text, res
        step("tasks/cancel of a job waiting for the operator")

        # Another client: the agent's task ids are unknown to it, like made-up ones.
        async with Client(server("other"), extensions=[Tasks()]) as o:
            errors = []
            for call in (
                lambda: get_task(o.session, done),
                lambda: get_task(o.session, re.sub(r"-[0-9a-f]{16}$", "-0000000000000000", done)),
                lambda: get_task(o.session, "x"),
                lambda: cancel_task(o.session, done),
            ):
                try:
                    got = await call()
                except MCPError as e:
                    errors.append(str(e))
                else:
                    raise AssertionError(f"another client's task answered: {got}")
            assert all("unknown task" in e for e in errors) and len(set(errors)) == 1, errors
        assert (await get_task(c.session, done))["status"] == "completed"
        step("another client's task ids refused, as made-up ones")
    print("ALL OK", flush=True)


anyio.run(main)
