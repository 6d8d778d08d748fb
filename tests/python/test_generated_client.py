"""Every RPC of cairn.v1, called through stubs generated from proto/."""

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from grpc_status import rpc_status

from cairn.v1 import plan_pb2 as plan
from cairn.v1 import plan_pb2_grpc
from cairn.v1 import session_pb2 as session
from cairn.v1 import session_pb2_grpc
from cairn.v1 import todo_pb2 as todo
from cairn.v1 import todo_pb2_grpc
from cairn.v1 import watch_pb2 as watch
from cairn.v1 import watch_pb2_grpc
from google.rpc import error_details_pb2


def reason(err):
    status = rpc_status.from_call(err)
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info.reason
    return None


def five_steps():
    S = plan.StepStatus
    return [
        plan.PlanItem(step="Design schema", status=S.STEP_STATUS_COMPLETED),
        plan.PlanItem(step="Sign-up API", status=S.STEP_STATUS_IN_PROGRESS),
        plan.PlanItem(step="Login API", status=S.STEP_STATUS_PENDING),
        plan.PlanItem(step="Hash passwords", status=S.STEP_STATUS_PENDING),
        plan.PlanItem(step="Unit tests", status=S.STEP_STATUS_PENDING),
    ]


def test_sessions(channel):
    stub = session_pb2_grpc.SessionServiceStub(channel)
    created = stub.CreateSession(
        session.CreateSessionRequest(session=session.Session(session_id="py-orch", agent_id="orch", title="Orchestrator"))
    )
    assert created.session.session_id == "py-orch"
    stub.CreateSession(session.CreateSessionRequest(session=session.Session(session_id="py-sub", parent_session_id="py-orch")))
    assert stub.GetSession(session.GetSessionRequest(session_id="py-sub")).session.parent_session_id == "py-orch"
    listed = stub.ListSessions(session.ListSessionsRequest(parent_session_id="py-orch", page_size=10))
    assert [s.session_id for s in listed.sessions] == ["py-sub"]
    moved = stub.UpdateSession(session.UpdateSessionRequest(session_id="py-sub", title="Sub-agent"))
    assert moved.session.title == "Sub-agent"
    with pytest.raises(grpc.RpcError) as e:
        stub.DeleteSession(session.DeleteSessionRequest(session_id="py-orch"))
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason(e.value) == "SESSION_HAS_CHILDREN"
    deleted = stub.DeleteSession(session.DeleteSessionRequest(session_id="py-orch", cascade=True))
    assert list(deleted.deleted_session_ids) == ["py-orch", "py-sub"]


def test_update_plan_and_hint(channel):
    stub = plan_pb2_grpc.PlanServiceStub(channel)
    resp = stub.UpdatePlan(plan.UpdatePlanRequest(session_id="py-plan", explanation="auth", plan=five_steps()))
    assert (resp.message, resp.stored, resp.hint) == ("Plan updated", True, "")
    got = stub.GetPlan(plan.GetPlanRequest(session_id="py-plan"))
    assert [i.step for i in got.plan.items] == [i.step for i in five_steps()]
    short = stub.UpdatePlan(plan.UpdatePlanRequest(session_id="py-plan", plan=five_steps()[:2]))
    assert not short.stored
    assert short.hint == (
        '<system_hint tool="update_plan" reason="simple_task">Task "Design schema" is simple (2 steps)'
        " - execute directly without update_plan.</system_hint>"
    )
    two = five_steps()
    two[2].status = plan.StepStatus.STEP_STATUS_IN_PROGRESS
    with pytest.raises(grpc.RpcError) as e:
        stub.UpdatePlan(plan.UpdatePlanRequest(session_id="py-plan", plan=two))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == "At most one step can be in_progress at a time"
    assert reason(e.value) == "MULTIPLE_IN_PROGRESS"


def test_plan_mode(channel):
    stub = plan_pb2_grpc.PlanServiceStub(channel)
    sid = "py-mode"
    st = stub.EnterPlanMode(plan.EnterPlanModeRequest(session_id=sid, goal="Add auth")).status
    assert st.mode == plan.PlanMode.PLAN_MODE_PLANNING
    blocked = stub.CheckAction(plan.CheckActionRequest(session_id=sid, tool="write_file"))
    assert not blocked.allowed and blocked.reason
    steps = [
        plan.ImplementationStep(id=1, description="Token type", verification="cargo test"),
        plan.ImplementationStep(id=2, description="Middleware", depends_on=[1]),
    ]
    impl = plan.ImplementationPlan(
        summary="JWT auth", approach="middleware", steps=steps, estimated_complexity=plan.Complexity.COMPLEXITY_SMALL
    )
    st = stub.ExitPlanMode(plan.ExitPlanModeRequest(session_id=sid, plan=impl)).status
    assert st.mode == plan.PlanMode.PLAN_MODE_AWAITING_APPROVAL
    assert st.pending.plan_id.startswith("plan_")
    assert stub.GetPlanStatus(plan.GetPlanStatusRequest(session_id=sid)).status.mode == st.mode
    st = stub.ApprovePlan(plan.ApprovePlanRequest(session_id=sid, approver="py")).status
    assert st.active.current_step_id == 1
    with pytest.raises(grpc.RpcError) as e:
        stub.CompleteStep(plan.CompleteStepRequest(session_id=sid, step_id=2, verification_result="ok"))
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert e.value.details() == "Step 2 depends on incomplete steps: 1"
    stub.CompleteStep(plan.CompleteStepRequest(session_id=sid, step_id=1, verification_result="ok"))
    mod = stub.ModifyPlan(
        plan.ModifyPlanRequest(session_id=sid, step_id=2, reason="simpler", new_description="Tower layer")
    ).modification
    stub.ApproveModification(plan.ApproveModificationRequest(session_id=sid, modification_id=mod.modification_id))
    mod2 = stub.ModifyPlan(plan.ModifyPlanRequest(session_id=sid, step_id=2, reason="r", new_description="d")).modification
    stub.RejectModification(plan.RejectModificationRequest(session_id=sid, modification_id=mod2.modification_id))
    stub.CompleteStep(plan.CompleteStepRequest(session_id=sid, step_id=2, verification_result="ok"))
    done = stub.CompletePlan(plan.CompletePlanRequest(session_id=sid, summary="done"))
    assert done.entry.outcome == plan.PlanOutcome.PLAN_OUTCOME_COMPLETED
    history = stub.ListPlanHistory(plan.ListPlanHistoryRequest(session_id=sid)).entries
    assert [h.plan_id for h in history] == [done.entry.plan_id]
    stub.EnterPlanMode(plan.EnterPlanModeRequest(session_id=sid, goal="again"))
    stub.ExitPlanMode(plan.ExitPlanModeRequest(session_id=sid, plan=impl))
    st = stub.RejectPlan(plan.RejectPlanRequest(session_id=sid, reason="no")).status
    assert st.mode == plan.PlanMode.PLAN_MODE_NORMAL


def test_todos(channel):
    stub = todo_pb2_grpc.TodoServiceStub(channel)
    T = todo.TodoStatus
    assert len(stub.ReadTodos(todo.ReadTodosRequest(agent_id="py-agent")).list.todos) == 0
    stub.WriteTodos(
        todo.WriteTodosRequest(
            agent_id="py-agent",
            todos=[todo.TodoItem(id="a", content="A", status=T.TODO_STATUS_IN_PROGRESS, priority=todo.Priority.PRIORITY_HIGH)],
        )
    )
    merged = stub.WriteTodos(
        todo.WriteTodosRequest(agent_id="py-agent", todos=[todo.TodoItem(id="b", content="B", status=T.TODO_STATUS_PENDING)])
    ).list
    assert [(t.id, t.status) for t in merged.todos] == [("a", T.TODO_STATUS_COMPLETED), ("b", T.TODO_STATUS_PENDING)]


def test_watch_and_wait(channel):
    sessions = session_pb2_grpc.SessionServiceStub(channel)
    plans = plan_pb2_grpc.PlanServiceStub(channel)
    stub = watch_pb2_grpc.WatchServiceStub(channel)
    sessions.CreateSession(session.CreateSessionRequest(session=session.Session(session_id="py-root")))
    sessions.CreateSession(session.CreateSessionRequest(session=session.Session(session_id="py-kid", parent_session_id="py-root")))
    stream = stub.Watch(watch.WatchRequest(session_tree="py-root", send_initial_state=True))
    first = [next(stream), next(stream), next(stream)]
    assert [m.WhichOneof("kind") for m in first] == ["event", "event", "synced"]
    assert [m.event.session_id for m in first[:2]] == ["py-root", "py-kid"]
    done = [plan.PlanItem(step=i.step, status=plan.StepStatus.STEP_STATUS_COMPLETED) for i in five_steps()]
    written = plans.UpdatePlan(plan.UpdatePlanRequest(session_id="py-kid", plan=done))
    change = next(stream)
    assert change.event.type == watch.EVENT_TYPE_PLAN_UPDATED
    assert change.event.revision == written.revision
    assert list(change.event.ancestor_session_ids) == ["py-root"]
    stream.cancel()
    resp = stub.Wait(watch.WaitRequest(session_tree="py-root", timeout={"seconds": 5}))
    assert resp.satisfied
    with pytest.raises(grpc.RpcError) as e:
        list(stub.Watch(watch.WatchRequest(all=True, start_revision=1, send_initial_state=True)))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_health_and_v1alpha_reflection(channel):
    health = health_pb2_grpc.HealthStub(channel)
    for service in ["", "cairn.v1.PlanService", "cairn.v1.WatchService"]:
        resp = health.Check(health_pb2.HealthCheckRequest(service=service))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    db = ProtoReflectionDescriptorDatabase(channel)
    services = set(db.get_services())
    assert {"cairn.v1.SessionService", "cairn.v1.PlanService", "cairn.v1.TodoService", "cairn.v1.WatchService"} <= services
    desc = db.FindFileContainingSymbol("cairn.v1.PlanService")
    assert desc.package == "cairn.v1"
