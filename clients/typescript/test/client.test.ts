// The client against the real `cairn` binary (CAIRN_BIN, or the workspace's
// debug build): a unary call, an error with its ErrorInfo reason and a
// Watch that resumes, over Connect, gRPC and gRPC-Web.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, describe, test } from "node:test";

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { createGrpcWebTransport } from "@connectrpc/connect-web";

import {
  ErrorInfoSchema,
  StepStatus,
  UpdatePlanRequestSchema,
  cairn,
  watchWithResume,
} from "../src/index.js";

const BIN = process.env.CAIRN_BIN ?? resolve(import.meta.dirname, "../../../target/debug/cairn");

function freePort(): Promise<number> {
  return new Promise((ok) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
  });
}

class Server {
  proc?: ChildProcess;
  constructor(
    readonly port: number,
    readonly data: string,
  ) {}
  get url() {
    return `http://127.0.0.1:${this.port}`;
  }
  async start() {
    this.proc = spawn(BIN, ["serve", "--listen", `127.0.0.1:${this.port}`, "--data-dir", this.data], {
      stdio: ["ignore", "ignore", "ignore"],
    });
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        const r = await fetch(`${this.url}/cairn.v1.PlanService/GetPlan`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: '{"sessionId":"ready"}',
        });
        if (r.status === 404) return;
      } catch {
        // not listening yet
      }
      assert.ok(Date.now() < deadline, "cairn serve did not start");
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  async stop() {
    const p = this.proc;
    if (!p || p.exitCode !== null) return;
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGTERM");
    await exited;
  }
}

function steps(n: number, current = 0) {
  return Array.from({ length: n }, (_, i) => ({
    step: `step ${i + 1}`,
    status: i < current ? StepStatus.COMPLETED : i === current ? StepStatus.IN_PROGRESS : StepStatus.PENDING,
  }));
}

let server: Server;
before(async () => {
  server = new Server(await freePort(), mkdtempSync(join(tmpdir(), "cairn-ts-")));
  await server.start();
});
after(async () => {
  await server.stop();
});

const transports: [string, () => Transport][] = [
  ["Connect (JSON)", () => createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" })],
  ["Connect (binary, HTTP/2)", () => createConnectTransport({ baseUrl: server.url, httpVersion: "2", useBinaryFormat: true })],
  ["gRPC", () => createGrpcTransport({ baseUrl: server.url })],
  ["gRPC-Web", () => createGrpcWebTransport({ baseUrl: server.url })],
];

for (const [name, transport] of transports) {
  describe(name, () => {
    const session = `ts-${name.replace(/[^a-z]/gi, "").toLowerCase()}`;

    test("a unary call", async () => {
      const api = cairn(transport());
      const reply = await api.plans.updatePlan(
        create(UpdatePlanRequestSchema, { sessionId: session, explanation: "from TypeScript", plan: steps(5) }),
      );
      assert.equal(reply.message, "Plan updated");
      assert.ok(reply.stored);
      const got = await api.plans.getPlan({ sessionId: session });
      assert.equal(got.plan?.items.length, 5);
      assert.equal(got.plan?.items[0].status, StepStatus.IN_PROGRESS);
    });

    test("an error with its ErrorInfo reason", async () => {
      const api = cairn(transport());
      const bad = steps(5);
      bad[1].status = StepStatus.IN_PROGRESS;
      await assert.rejects(api.plans.updatePlan({ sessionId: session, plan: bad }), (err) => {
        const e = ConnectError.from(err);
        assert.equal(e.code, Code.InvalidArgument);
        assert.equal(e.rawMessage, "At most one step can be in_progress at a time");
        const [info] = e.findDetails(ErrorInfoSchema);
        assert.equal(info?.reason, "MULTIPLE_IN_PROGRESS");
        assert.equal(info?.domain, "cairn.dev");
        return true;
      });
    });
  });
}

test("a Watch that resumes across a server restart, over Connect and over gRPC", async () => {
  for (const make of [
    () => createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }),
    () => createGrpcTransport({ baseUrl: server.url }),
  ]) {
    const api = cairn(make());
    const first = await api.plans.updatePlan({ sessionId: "followed", plan: steps(4) });
    const start = first.revision;
    const abort = new AbortController();
    const seen: bigint[] = [];
    const watching = (async () => {
      for await (const res of watchWithResume(api.watches, {
        target: { case: "sessionId", value: "followed" },
        startRevision: start,
      }, { signal: abort.signal, maxRetryMs: 30_000 })) {
        // A revision may carry several events (the first write also
        // creates the session): count whole revisions.
        if (res.kind.case === "event" && res.kind.value.indexInRevision + 1 === res.kind.value.eventsInRevision) {
          seen.push(res.kind.value.revision);
          if (seen.length === 3) {
            abort.abort();
            return;
          }
        }
      }
    })();
    // One change before the restart, one after: the watch sees all three
    // revisions (the first write's, and both), each once.
    const second = await api.plans.updatePlan({ sessionId: "followed", plan: steps(4, 1) });
    while (seen.length < 2) await new Promise((r) => setTimeout(r, 20));
    await server.stop();
    await server.start();
    const third = await cairn(make()).plans.updatePlan({ sessionId: "followed", plan: steps(4, 2) });
    await watching;
    assert.deepEqual(seen, [start, second.revision, third.revision]);
  }
});
