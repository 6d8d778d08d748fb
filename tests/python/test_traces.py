"""Traces over OTLP: the server started with OTEL_EXPORTER_OTLP_ENDPOINT
sends its spans to a real OTLP/gRPC receiver (the collector's own protos,
from PyPI's opentelemetry-proto), an incoming `traceparent` continues the
caller's trace, and the commit is a child span of the RPC with its batch
size."""

import os
import subprocess
import tempfile
import threading
import time
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from cairn.v1 import plan_pb2 as plan
from cairn.v1 import plan_pb2_grpc
from conftest import BINARY, _free_port

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self):
        self.spans = []
        self.lock = threading.Lock()

    def Export(self, request, context):
        with self.lock:
            for rs in request.resource_spans:
                service = {a.key: a.value.string_value for a in rs.resource.attributes}.get("service.name")
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        self.spans.append((service, span))
        return trace_service_pb2.ExportTraceServiceResponse()


def test_spans_reach_the_collector_and_continue_the_callers_trace():
    receiver = Receiver()
    collector = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, collector)
    otlp_port = collector.add_insecure_port("127.0.0.1:0")
    collector.start()
    port = _free_port()
    proc = subprocess.Popen(
        [BINARY, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", tempfile.mkdtemp(prefix="cairn-otlp-")],
        env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}"},
        stderr=subprocess.DEVNULL,
    )
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        plans = plan_pb2_grpc.PlanServiceStub(channel)
        items = [plan.PlanItem(step=f"s{i}", status=plan.STEP_STATUS_PENDING) for i in range(5)]
        plans.UpdatePlan(
            plan.UpdatePlanRequest(session_id="traced", plan=items),
            metadata=(("traceparent", f"00-{TRACE_ID}-{PARENT_ID}-01"),),
        )
        channel.close()
    finally:
        # SIGTERM: the server drains and flushes its batched spans.
        proc.terminate()
        proc.wait(timeout=30)
    deadline = time.time() + 20
    while time.time() < deadline:
        with receiver.lock:
            if any(s.name == "commit" for _, s in receiver.spans):
                break
        time.sleep(0.1)
    collector.stop(0)
    spans = [s for service, s in receiver.spans if service == "cairn"]
    ours = [s for s in spans if s.trace_id.hex() == TRACE_ID]
    assert ours, [s.name for s in spans]
    rpc = next(s for s in ours if s.name == "cairn.v1.PlanService/UpdatePlan")
    # The caller's span is the RPC span's parent.
    assert rpc.parent_span_id.hex() == PARENT_ID
    by_id = {s.span_id: s for s in ours}
    commit = next(s for s in ours if s.name == "commit")

    def ancestors(span):
        while span.parent_span_id in by_id:
            span = by_id[span.parent_span_id]
            yield span

    # The commit sits inside the RPC span, and says how many mutations the
    # durable commit carried.
    assert rpc.span_id in {a.span_id for a in ancestors(commit)}
    attributes = {a.key: a.value for a in commit.attributes}
    assert attributes["batch_size"].int_value >= 1
