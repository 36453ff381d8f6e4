// `brainloop mcp` driven by the official TypeScript client `@modelcontextprotocol/client` 2.x
// (protocol 2026-07-28) with `@modelcontextprotocol/ext-tasks` 0.2.x for tasks, run by
// tests/mcp_tasks.rs against a running worker (issue 55): a command that becomes a task and
// completes, a write that waits for the operator (the validation named in the task's status)
// and completes after `brainloop approve`, tasks/cancel of a queued and of a running job. Any
// failure throws (exit 1); the last line is `ALL OK`. ext-tasks needs a raw
// request path for 2026-07-28 task traffic (the SDK's codecs refuse `resultType: "task"`): here
// a transport wrapper that routes the answers of its own requests back to it.
//
// Environment: BRAINLOOP_BIN, BRAINLOOP_DATA_DIR, BRAINLOOP_CONFIG; the workspace as argv[2].

import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { createTaskSessionFromClient, resultFromTaskOutcome } from "@modelcontextprotocol/ext-tasks/client";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import assert from "node:assert/strict";

const BIN = process.env.BRAINLOOP_BIN;
const DATA = process.env.BRAINLOOP_DATA_DIR;
const WORKSPACE = process.argv[2];
const TASKS = "io.modelcontextprotocol/tasks";
const step = (what) => console.log(`ok: ${what}`);

/** The SDK's stdio transport, plus a raw request path sharing it. */
class Tap {
  constructor(inner) {
    this.inner = inner;
    this.pending = new Map();
    this.next = 0;
    inner.onmessage = (m, extra) => {
      const p = m && typeof m.id === "string" ? this.pending.get(m.id) : undefined;
      if (p) {
        this.pending.delete(m.id);
        p({ ...m, id: p.id });
      } else this.onmessage?.(m, extra);
    };
    inner.onclose = () => this.onclose?.();
    inner.onerror = (e) => this.onerror?.(e);
  }
  start() { return this.inner.start(); }
  send(m, o) { return this.inner.send(m, o); }
  close() { return this.inner.close(); }
  setProtocolVersion(v) { this.inner.setProtocolVersion?.(v); }
  dispatch = (request) =>
    new Promise((resolve, reject) => {
      const id = `raw-${this.next++}`;
      const done = (m) => resolve(m);
      done.id = request.id;
      this.pending.set(id, done);
      this.inner.send({ jsonrpc: "2.0", ...request, id }).catch(reject);
    });
}

const clientInfo = { name: "ts-tasks-test", version: "1" };
const clientCapabilities = { extensions: { [TASKS]: {} } };
const tap = new Tap(
  new StdioClientTransport({
    command: BIN,
    args: ["mcp", "--client", "agent", "--data-dir", DATA],
    env: { ...process.env, BRAINLOOP_LOG: "warn" },
    stderr: "inherit",
  }),
);
const client = new Client(clientInfo, {
  capabilities: clientCapabilities,
  versionNegotiation: { mode: { pin: "2026-07-28" } },
});
await client.connect(tap);
const protocolVersion = client.getNegotiatedProtocolVersion();
assert.equal(client.getProtocolEra(), "modern");
step(`negotiated ${protocolVersion}`);

const session = createTaskSessionFromClient(client, {
  endpointId: "brainloop-test",
  rawDispatch: tap.dispatch,
  v2RequestFraming: { protocolVersion, clientInfo, clientCapabilities },
});
const call = (action, params) => session.callTool("brainloop", { action, params });

// A command: a task that completes with the job's result.
let ex = await call("execute_bash", { command: "echo task" });
assert.equal(ex.kind, "task");
assert.match(ex.handle.taskId, /^bl-[1-9][0-9]*-[0-9a-f]{16}$/);
let { outcome } = await ex.settle();
let res = resultFromTaskOutcome(outcome);
assert.equal(res.isError, false, JSON.stringify(res));
assert.equal(res.structuredContent.result.stdout, "task\n");
step(`a command became task ${ex.handle.taskId} and completed`);

// A write waits for the operator: approved outside MCP when the task names the validation.
ex = await call("execute_bash", { command: "touch ts-task.txt" });
let approved = false;
({ outcome } = await ex.settle({
  onEvent: (e) => {
    const m = e.type === "task" ? /brainloop approve ([^\s`]+)/.exec(e.task.statusMessage ?? "") : null;
    if (m && !approved) {
      assert.equal(e.task.status, "working");
      approved = true;
      execFileSync(BIN, ["approve", m[1]], { env: process.env });
    }
  },
}));
res = resultFromTaskOutcome(outcome);
assert.ok(approved);
assert.equal(res.structuredContent.status, "succeeded", JSON.stringify(res));
assert.ok(existsSync(join(WORKSPACE, "ts-task.txt")));
step("a write waited for the operator and completed after brainloop approve");

// tasks/cancel of a queued job: a sleep holds the only slot.
const sleeper = await call("sleep", { ms: 30000 });
const ctl = session.task(sleeper.handle.taskId);
for (let t0 = Date.now(); !((await ctl.snapshot()).statusMessage ?? "").includes("running"); ) {
  assert.ok(Date.now() - t0 < 60000);
  await new Promise((f) => setTimeout(f, 50));
}
ex = await call("execute_bash", { command: "touch ts-queued.txt" });
assert.ok(session.capabilities.cancellation, JSON.stringify(session.capabilities));
await ex.cancel();
({ outcome } = await ex.settle());
assert.equal(outcome.status, "cancelled", JSON.stringify(outcome));
await ctl.cancel();
const last = await ctl.result();
assert.equal(last.status, "cancelled", JSON.stringify(last));
assert.match(last.task.statusMessage, /client:agent/);
step("tasks/cancel of a queued and of a running job");

await session.close();
await client.close();
console.log("ALL OK");
