/**
 * A TypeScript client for Cairn: the generated cairn.v1 services (from
 * `proto/`, by `buf generate` with protoc-gen-es) used through Connect-ES,
 * plus a watch that resumes by itself.
 *
 * Pick a transport for where the code runs:
 * - Node, Connect protocol (JSON or binary over HTTP/1.1 or 2):
 *   `createConnectTransport` from `@connectrpc/connect-node`;
 * - Node, gRPC: `createGrpcTransport` from `@connectrpc/connect-node`;
 * - a browser (or any `fetch`), gRPC-Web or Connect:
 *   `createGrpcWebTransport` / `createConnectTransport` from
 *   `@connectrpc/connect-web`.
 */
import { create } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createClient,
  type Client,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";
import { AuthService } from "./gen/cairn/v1/auth_pb.js";
import { PlanService } from "./gen/cairn/v1/plan_pb.js";
import { SessionService } from "./gen/cairn/v1/session_pb.js";
import { TodoService } from "./gen/cairn/v1/todo_pb.js";
import {
  WatchRequestSchema,
  WatchService,
  type WatchRequest,
  type WatchResponse,
} from "./gen/cairn/v1/watch_pb.js";

export * from "./gen/cairn/v1/plan_pb.js";
export * from "./gen/cairn/v1/session_pb.js";
export * from "./gen/cairn/v1/todo_pb.js";
export * from "./gen/cairn/v1/watch_pb.js";
export * from "./gen/cairn/v1/auth_pb.js";
export { ErrorInfoSchema, BadRequestSchema } from "./gen/google/rpc/error_details_pb.js";

/** Every service of cairn.v1 on one transport. */
export interface Cairn {
  sessions: Client<typeof SessionService>;
  plans: Client<typeof PlanService>;
  todos: Client<typeof TodoService>;
  watches: Client<typeof WatchService>;
  auth: Client<typeof AuthService>;
}

export function cairn(transport: Transport): Cairn {
  return {
    sessions: createClient(SessionService, transport),
    plans: createClient(PlanService, transport),
    todos: createClient(TodoService, transport),
    watches: createClient(WatchService, transport),
    auth: createClient(AuthService, transport),
  };
}

/** Presents a principal's bearer token on every call (`--auth token`). */
export function bearer(token: string): Interceptor {
  return (next) => async (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
}

/** Codes after which watching again can succeed (the server went away). */
const RETRYABLE = new Set([Code.Unavailable, Code.Internal, Code.Unknown]);

/**
 * Follows a watch target, resuming after disconnects and server restarts
 * from the revision after the last one delivered whole: events of a
 * revision cut off by a drop are delivered again from its start, so a
 * caller acting on whole revisions sees each exactly once. Errors a retry
 * cannot fix (a compacted revision, bad arguments) are thrown.
 */
export async function* watchWithResume(
  client: Client<typeof WatchService>,
  request: Partial<WatchRequest>,
  options: { signal?: AbortSignal; maxRetryMs?: number } = {},
): AsyncGenerator<WatchResponse> {
  let next = request.startRevision;
  let lastMessage = Date.now();
  let pause = 50;
  for (;;) {
    const req = create(WatchRequestSchema, { ...request, startRevision: next });
    let pending: WatchResponse[] = [];
    try {
      for await (const res of client.watch(req, { signal: options.signal })) {
        lastMessage = Date.now();
        pause = 50;
        if (res.kind.case === "event") {
          pending.push(res);
          const e = res.kind.value;
          if (e.indexInRevision + 1 === e.eventsInRevision) {
            yield* pending;
            pending = [];
            next = e.revision + 1n;
          }
        } else {
          if (res.kind.case === "synced" || res.kind.case === "progress") {
            next = res.kind.value.revision + 1n;
          }
          yield res;
        }
      }
      return;
    } catch (err) {
      const e = ConnectError.from(err);
      if (options.signal?.aborted) return;
      if (!RETRYABLE.has(e.code) || Date.now() - lastMessage > (options.maxRetryMs ?? 60_000)) {
        throw e;
      }
      await new Promise((r) => setTimeout(r, pause));
      pause = Math.min(pause * 2, 2000);
    }
  }
}
