// A plain host on the TypeScript MCP SDK's client, as MCP Inspector, Cursor and Claude
// Desktop are: it declares no task support, lists the tools (so the SDK caches their
// output schemas and checks every result against them), and gives up on any request
// after the SDK's default 60 s unless TIMEOUT_MS says otherwise.
//
// It calls TOOL with ARGUMENTS once, then follows the job through the calls the answers
// recommend, and nothing else: it reads "call task_result with task_id "..." and wait_s
// N" from the deferred answer and "call task_result again (with wait_s N to wait)" from
// each follow-up. Extra checks on request (SCENARIO): "twice" calls the tool a second
// time with the same arguments; "key" calls it with an idempotency key, then with the
// same key and other arguments; "wait" asks task_result for a 10,000 s wait.
//
// Usage: node host.cjs (settings in the environment: TS_HOST_DIR, SERVER_COMMAND as a
// JSON array, SERVER_ENV as a JSON object, TOOL, ARGUMENTS as JSON, TIMEOUT_MS,
// SCENARIO). Prints one JSON object: every call with its duration, the final result.
"use strict";

const path = require("node:path");
const { createRequire } = require("node:module");

const sdk = createRequire(path.join(process.env.TS_HOST_DIR, "package.json"));
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = sdk("@modelcontextprotocol/sdk/client/stdio.js");

const KEY = "taskloom/idempotencyKey";
const FIRST = /call task_result with task_id "([^"]+)" and wait_s ([0-9.]+)/;
const AGAIN = /call task_result again \(with wait_s ([0-9.]+) to wait\)/;

function text(result) {
  return result.content.filter((block) => block.type === "text").map((b) => b.text).join("\n");
}

async function main() {
  const [command, ...args] = JSON.parse(process.env.SERVER_COMMAND);
  const transport = new StdioClientTransport({
    command,
    args,
    env: JSON.parse(process.env.SERVER_ENV),
    stderr: "inherit",
  });
  const client = new Client({ name: "ts-plain-host", version: "0" }, { capabilities: {} });
  const options = process.env.TIMEOUT_MS ? { timeout: Number(process.env.TIMEOUT_MS) } : {};
  const calls = [];
  const report = { calls, protocolVersion: null };

  async function call(name, args, meta) {
    const started = Date.now();
    const entry = { name, arguments: args };
    calls.push(entry);
    try {
      const params = meta ? { name, arguments: args, _meta: meta } : { name, arguments: args };
      const result = await client.callTool(params, undefined, options);
      entry.isError = result.isError === true;
      entry.text = text(result);
      entry.meta = result._meta ?? null;
      entry.structuredContent = result.structuredContent ?? null;
      return result;
    } catch (error) {
      entry.exception = `${error.name}: ${error.message}` + (error.code ? ` (${error.code})` : "");
      throw error;
    } finally {
      entry.seconds = (Date.now() - started) / 1000;
    }
  }

  try {
    await client.connect(transport); // start-up is not what the timeout is about
    report.protocolVersion = transport._protocolVersion ?? null;
    const tools = await client.listTools();
    report.outputSchemas = tools.tools.filter((t) => t.outputSchema).map((t) => t.name);
    const tool = process.env.TOOL;
    const toolArguments = JSON.parse(process.env.ARGUMENTS);
    const scenario = process.env.SCENARIO || "";
    const meta = scenario === "key" ? { [KEY]: "ts-job-1" } : undefined;
    let answer = await call(tool, toolArguments, meta);
    if (scenario === "twice") {
      report.twice = await call(tool, toolArguments).then(() => calls[calls.length - 1]);
    }
    if (scenario === "key") {
      await call(tool, toolArguments, meta);
      await call(tool, { ...toolArguments, start: toolArguments.start + 4 }, meta);
    }
    let next = FIRST.exec(text(answer));
    if (next === null) {
      report.final = calls[0];
      return;
    }
    const taskId = next[1];
    let waitS = Number(next[2]);
    if (scenario === "wait") {
      await call("task_result", { task_id: taskId, wait_s: 10000 });
    }
    for (;;) {
      answer = await call("task_result", { task_id: taskId, wait_s: waitS });
      const again = AGAIN.exec(text(answer));
      if (again === null) break;
      waitS = Number(again[1]);
    }
    report.final = calls[calls.length - 1];
  } catch (error) {
    report.error = `${error.name}: ${error.message}`;
  } finally {
    const closing = Date.now();
    await client.close();
    report.closeSeconds = (Date.now() - closing) / 1000;
    process.stdout.write(JSON.stringify(report) + "\n");
  }
}

main();
