// The TypeScript MCP SDK's client as a benchmark driver: creates one at a time and 16 in
// flight, then `tasks/get` latencies, against one stdio server, in one generation.
//
// 2025-11-25: the SDK's Client after its own `initialize` (declaring tasks), each create
// a `tools/call` with the SDK's `task` option, each read the SDK's `tasks/get`.
// 2026-07-28 (which this SDK version does not speak): the same Client's request layer and
// stdio transport without the `initialize` handshake, each request carrying the tasks
// extension's `_meta` envelope, answers checked against the SDK's loose result schema.
//
// Usage: node ts_client.cjs, settings in the environment: TS_HOST_DIR (where the SDK is
// installed), SERVER_COMMAND (JSON array), SERVER_ENV (JSON object), GENERATION,
// SEQUENTIAL, CONCURRENT, IN_FLIGHT, GETS, WARMUP. Prints one JSON object: creates/s one
// at a time and the server's CPU per create with its run; creates/s IN_FLIGHT at a time
// and the server's CPU per task (the create, its run and one `tasks/get`, IN_FLIGHT at a
// time; read from /proc: Linux only); every one-at-a-time `tasks/get` latency in ms.
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { createRequire } = require("node:module");

const sdk = createRequire(path.join(process.env.TS_HOST_DIR, "package.json"));
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = sdk("@modelcontextprotocol/sdk/client/stdio.js");
const { Protocol } = sdk("@modelcontextprotocol/sdk/shared/protocol.js");
const types = sdk("@modelcontextprotocol/sdk/types.js");

const MODERN = "2026-07-28";
const TERMINAL = new Set(["completed", "failed", "cancelled"]);
const ENVELOPE = {
  "io.modelcontextprotocol/protocolVersion": MODERN,
  "io.modelcontextprotocol/clientInfo": { name: "taskloom-bench-ts", version: "0" },
  "io.modelcontextprotocol/clientCapabilities": {
    extensions: { "io.modelcontextprotocol/tasks": {} },
  },
};
const LIMIT = { timeout: 60_000 };
const TICKS_PER_S = 100; // USER_HZ on Linux
const IDLE_MS = 100;

function number(name) {
  return Number(process.env[name]);
}

async function connect(modern) {
  const [command, ...args] = JSON.parse(process.env.SERVER_COMMAND);
  const transport = new StdioClientTransport({
    command,
    args,
    env: { ...process.env, ...JSON.parse(process.env.SERVER_ENV) },
    stderr: "inherit",
  });
  const client = new Client(
    { name: "taskloom-bench-ts", version: "0" },
    { capabilities: modern ? {} : { tasks: { list: {}, cancel: {} } } },
  );
  if (modern) {
    await Protocol.prototype.connect.call(client, transport); // no initialize on 2026-07-28
    const params = { _meta: ENVELOPE };
    await client.request({ method: "server/discover", params }, types.ResultSchema, LIMIT);
  } else {
    await client.connect(transport, LIMIT);
  }
  return { client, pid: transport.pid };
}

function operations(client, modern) {
  const call = { name: "noop", arguments: {} };
  if (modern) {
    const request = (method, params) =>
      client.request({ method, params: { ...params, _meta: ENVELOPE } }, types.ResultSchema, LIMIT);
    return {
      create: async () => (await request("tools/call", call)).taskId,
      get: (taskId) => request("tasks/get", { taskId }),
    };
  }
  return {
    create: async () => {
      const options = { ...LIMIT, task: {} };
      const created = await client.request(
        { method: "tools/call", params: call },
        types.CreateTaskResultSchema,
        options,
      );
      return created.task.taskId;
    },
    get: (taskId) => client.request({ method: "tasks/get", params: { taskId } }, types.GetTaskResultSchema, LIMIT),
  };
}

async function creations(create, count, inFlight, ids) {
  const perCaller = Math.max(Math.floor(count / inFlight), 1);
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      for (let i = 0; i < perCaller; i += 1) ids.push(await create());
    }),
  );
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return (perCaller * inFlight) / seconds;
}

function serverCpuMs(pid) {
  // user + system time of the server process (all its threads), from /proc, in ms
  const fields = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_S;
}

async function idle(pid) {
  // the server has gone quiet: no CPU tick over IDLE_MS, twice in a row (its runs ended)
  let last = serverCpuMs(pid);
  for (let quiet = 0, waited = 0; quiet < 2; waited += IDLE_MS) {
    if (waited > 60_000) throw new Error("the server did not go idle within 60 s");
    await new Promise((resolve) => setTimeout(resolve, IDLE_MS));
    const now = serverCpuMs(pid);
    quiet = now - last <= 1000 / TICKS_PER_S ? quiet + 1 : 0;
    last = now;
  }
}

async function inFlight(count, width, each) {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < count) await each(next++);
    }),
  );
}

async function main() {
  const modern = process.env.GENERATION === MODERN;
  const { client, pid } = await connect(modern);
  const { create, get } = operations(client, modern);
  const width = number("IN_FLIGHT");
  const warm = [];
  await creations(create, number("WARMUP"), 1, warm);
  await idle(pid);

  // one at a time: the create's rate, and the server's CPU per create with its run
  const sequentialIds = [];
  let cpu = serverCpuMs(pid);
  const sequential = await creations(create, number("SEQUENTIAL"), 1, sequentialIds);
  await idle(pid);
  const sequentialCpuMs = (serverCpuMs(pid) - cpu) / sequentialIds.length;

  // in flight: the create's rate; then the server's CPU per task (create, run, one get)
  const ids = [];
  cpu = serverCpuMs(pid);
  const concurrent = await creations(create, number("CONCURRENT"), width, ids);
  await idle(pid);
  let unended = 0;
  await inFlight(ids.length, width, async (i) => {
    if (!TERMINAL.has((await get(ids[i])).status)) unended += 1;
  });
  const taskCpuMs = (serverCpuMs(pid) - cpu) / ids.length;

  // one read at a time, over ended tasks
  const gets = [];
  for (let i = 0; i < number("GETS"); i += 1) {
    const started = process.hrtime.bigint();
    await get(ids[i % ids.length]);
    gets.push(Number(process.hrtime.bigint() - started) / 1e6);
  }
  await client.close();
  const report = { sequential, sequentialCpuMs, concurrent, taskCpuMs, unended, gets };
  console.log(JSON.stringify(report));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
