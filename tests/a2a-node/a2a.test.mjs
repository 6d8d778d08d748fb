// Cairn as an A2A server, through the official JavaScript SDK
// (@a2a-js/sdk 1.3.0, pinned in package.json, installed by .ci/run): the
// SDK resolves the agent card, lists and gets tasks, subscribes to a
// sub-agent's task while the sub-agent works through its plan over Cairn's
// own gRPC API, answers the approval as another principal, and resumes the
// stream with Cairn's extension after going away. Over JSON-RPC (the web
// listener) and gRPC (the gRPC port), each with the SDK's own transport.
//
// CAIRN_BIN names the binary under test.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { GetTaskRequest, ListTasksRequest, SendMessageRequest, SubscribeToTaskRequest } from "@a2a-js/sdk";
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from "@a2a-js/sdk/client";
import { GrpcTransportFactory } from "@a2a-js/sdk/client/grpc";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const BIN = process.env.CAIRN_BIN ?? "../../target/debug/cairn";
const ADMIN = "node-a2a-admin-token-0123456789abcdef";

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** A server with token auth and a web listener; stopped by the caller. */
async function serve() {
  const [grpcPort, web] = [await freePort(), await freePort()];
  const data = mkdtempSync(join(tmpdir(), "cairn-a2a-node-"));
  writeFileSync(join(data, "admin-token"), `${ADMIN}\n`, { mode: 0o600 });
  const proc = spawn(
    BIN,
    ["serve", "--listen", `127.0.0.1:${grpcPort}`, "--web-listen", `127.0.0.1:${web}`,
      "--data-dir", join(data, "db"), "--auth", "token", "--admin-token-file", join(data, "admin-token")],
    { stdio: ["ignore", "ignore", "inherit"] },
  );
  const webUrl = `http://127.0.0.1:${web}`;
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${webUrl}/.well-known/agent-card.json`)).ok) break;
    } catch {
      // not listening yet
    }
    if (i > 300) throw new Error("cairn serve did not start");
    await new Promise((r) => setTimeout(r, 100));
  }
  return { proc, webUrl, grpc: `127.0.0.1:${grpcPort}` };
}

/** Cairn's own gRPC API, as a sub-agent and an admin call it. */
const cairnApi = grpc.loadPackageDefinition(
  protoLoader.loadSync(["cairn/v1/plan.proto", "cairn/v1/session.proto", "cairn/v1/auth.proto"], {
    includeDirs: [new URL("../../proto", import.meta.url).pathname],
    enums: String,
  }),
).cairn.v1;

/** One call of Cairn's own API over gRPC, as a token. */
async function cairn(server, token, method, body) {
  const [service, rpc] = method.split("/");
  const client = new cairnApi[service](server.grpc, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  metadata.set("authorization", `Bearer ${token}`);
  try {
    return await new Promise((resolve, reject) =>
      client[rpc](body, metadata, (err, res) => (err ? reject(new Error(`${method}: ${err.message}`)) : resolve(res))),
    );
  } finally {
    client.close();
  }
}

/** An SDK client of `binding` presenting `token` on every call (a
 *  service parameter: an HTTP header, or gRPC metadata). */
async function client(server, token, binding) {
  const bearer = {
    async before(args) {
      args.options = {
        ...args.options,
        serviceParameters: { ...args.options?.serviceParameters, authorization: `Bearer ${token}` },
      };
    },
    async after() {},
  };
  const options = ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory(), new GrpcTransportFactory()],
    preferredTransports: [binding],
    clientConfig: { interceptors: [bearer] },
  });
  return new ClientFactory(options).createFromUrl(server.webUrl);
}

/** What a stream event tells, and its resume token. */
function told(event) {
  const { $case, value } = event.payload;
  const name = (s) => ({ 1: "submitted", 2: "working", 3: "completed", 4: "failed", 6: "input-required" })[s];
  if ($case === "task") return [`task ${name(value.status.state)}`, value.metadata.cairn_resume];
  if ($case === "statusUpdate") return [name(value.status.state), value.metadata.cairn_resume];
  if ($case === "artifactUpdate") {
    const text = value.artifact.parts.find((p) => p.content?.$case === "text").content.value;
    return [`plan ${text.trimEnd()}`, value.metadata.cairn_resume];
  }
  throw new Error(`unexpected event ${JSON.stringify(event)}`);
}

for (const binding of ["JSONRPC", "GRPC"]) {
  test(`over ${binding}: the SDK follows a sub-agent's task, answers its approval and resumes`, async () => {
    const server = await serve();
    try {
      const principal = async (id, role) =>
        (await cairn(server, ADMIN, "AuthService/CreatePrincipal", {
          principal: { principalId: id, roles: [role], agentIds: ["coder"] },
        })).token;
      const coder = await principal("coder", "ROLE_AGENT");
      const boss = await principal("boss", "ROLE_APPROVER");
      await cairn(server, ADMIN, "SessionService/CreateSession", {
        session: { sessionId: "lead", agentId: "lead" },
      });
      await cairn(server, ADMIN, "SessionService/CreateSession", {
        session: { sessionId: "sub", agentId: "coder", parentSessionId: "lead" },
      });

      const watcher = await client(server, ADMIN, binding);
      assert.equal(watcher.transport.protocolName ?? binding, binding);
      const card = await watcher.getAgentCard();
      assert.equal(card.name, "Cairn");
      assert.deepEqual(card.capabilities.extensions.map((e) => e.uri), ["urn:cairn:a2a:resume:v1"]);

      // Listed and got: a task in its tree's context.
      const listed = await watcher.listTasks(ListTasksRequest.fromJSON({ pageSize: 10 }));
      assert.deepEqual(listed.tasks.map((t) => t.id), ["lead", "sub"]);
      const got = await watcher.getTask(GetTaskRequest.fromJSON({ id: "sub" }));
      assert.equal(got.contextId, "lead");
      assert.equal(got.status.state, 1);

      const seen = [];
      const tokens = [];
      const stream = watcher.resubscribeTask(SubscribeToTaskRequest.fromJSON({ id: "sub" }));
      const until = async (what) => {
        for (;;) {
          const { value, done } = await stream.next();
          assert.ok(!done, `the stream ended before ${what}: ${JSON.stringify(seen)}`);
          const [said, token] = told(value);
          seen.push(said);
          tokens.push(token);
          if (said === what) return;
        }
      };
      await until("task submitted");
      await cairn(server, coder, "PlanService/UpdatePlan", {
        sessionId: "sub",
        plan: ["Read", "Fix", "Test", "Ship"].map((step) => ({ step, status: "STEP_STATUS_PENDING" })),
      });
      await until("working");
      await cairn(server, coder, "PlanService/EnterPlanMode", { sessionId: "sub", goal: "ship" });
      await cairn(server, coder, "PlanService/ExitPlanMode", {
        sessionId: "sub",
        plan: {
          summary: "ship it",
          steps: [{ id: 1, description: "build" }, { id: 2, description: "deploy", dependsOn: [1] }],
        },
      });
      await until("input-required");

      // The sub-agent may not answer its own plan; the approver does.
      const self = await client(server, coder, binding);
      const answer = (text) =>
        SendMessageRequest.fromJSON({
          message: { messageId: `m-${text}`, taskId: "sub", role: "ROLE_USER", parts: [{ text }] },
        });
      await assert.rejects(self.sendMessage(answer("approve")));
      const approver = await client(server, boss, binding);
      const reply = await approver.sendMessage(answer("approve"));
      assert.equal(reply.status.state, 2, JSON.stringify(reply));
      await until("working");

      // Gone; the agent finishes; back with the last token.
      await stream.return();
      for (const stepId of [1, 2]) {
        await cairn(server, coder, "PlanService/CompleteStep", { sessionId: "sub", stepId, verificationResult: "ok" });
      }
      const resumed = watcher.resubscribeTask(
        SubscribeToTaskRequest.fromJSON({ id: "sub" }),
        { serviceParameters: { "cairn-resume": tokens.at(-1), "A2A-Extensions": "urn:cairn:a2a:resume:v1" } },
      );
      for await (const event of resumed) seen.push(told(event)[0]);
      assert.deepEqual(seen, [
        "task submitted",
        "plan [ ] Read\n[ ] Fix\n[ ] Test\n[ ] Ship",
        "working",
        "input-required",
        "plan [>] build\n[ ] deploy",
        "working",
        "task working",
        "plan [x] build\n[>] deploy",
        "plan [x] build\n[x] deploy",
        "completed",
      ]);
    } finally {
      server.proc.kill("SIGTERM");
    }
  });
}
