//! The server as a whole: health, reflection, restarts, concurrency.

use std::collections::BTreeSet;

use cairn_api as pb;
use tonic::Code;

use cairn_testkit::{TestServer, five_steps, rev, session, todo, update};

#[tokio::test]
async fn health_reports_every_service() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let server = TestServer::start().await;
    let mut health = HealthClient::new(server.channel().await);
    for service in [
        "",
        "cairn.v1.SessionService",
        "cairn.v1.PlanService",
        "cairn.v1.TodoService",
        "cairn.v1.WatchService",
    ] {
        let resp = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(resp.status(), ServingStatus::Serving, "{service}");
    }
    let err = health
        .check(HealthCheckRequest {
            service: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

#[tokio::test]
async fn reflection_speaks_v1_and_v1alpha() {
    let server = TestServer::start().await;
    let expected: BTreeSet<String> = [
        "cairn.v1.PlanService",
        "cairn.v1.SessionService",
        "cairn.v1.TodoService",
        "cairn.v1.WatchService",
        "grpc.health.v1.Health",
        "lf.a2a.v1.A2AService",
    ]
    .into_iter()
    .map(String::from)
    .collect();

    {
        use tonic_reflection::pb::v1::ServerReflectionRequest;
        use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
        let mut client = ServerReflectionClient::new(server.channel().await);
        let req = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = client
            .server_reflection_info(tokio_stream::iter(vec![req]))
            .await
            .unwrap()
            .into_inner();
        let msg = stream.message().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = msg.message_response else {
            panic!("unexpected {msg:?}");
        };
        let names: BTreeSet<String> = list.service.into_iter().map(|s| s.name).collect();
        assert!(expected.is_subset(&names), "{names:?}");

        let req = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol(
                "cairn.v1.PlanService".into(),
            )),
        };
        let mut stream = client
            .server_reflection_info(tokio_stream::iter(vec![req]))
            .await
            .unwrap()
            .into_inner();
        let msg = stream.message().await.unwrap().unwrap();
        assert!(matches!(
            msg.message_response,
            Some(MessageResponse::FileDescriptorResponse(ref f)) if !f.file_descriptor_proto.is_empty()
        ));
    }
    {
        use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
        let mut client = ServerReflectionClient::new(server.channel().await);
        let req = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = client
            .server_reflection_info(tokio_stream::iter(vec![req]))
            .await
            .unwrap()
            .into_inner();
        let msg = stream.message().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = msg.message_response else {
            panic!("unexpected {msg:?}");
        };
        let names: BTreeSet<String> = list.service.into_iter().map(|s| s.name).collect();
        assert!(expected.is_subset(&names), "{names:?}");
    }
}

#[tokio::test]
async fn everything_survives_a_restart() {
    let server = TestServer::start().await;
    let (plan_before, status_before, todos_before, revision) = {
        let mut sessions = server.sessions().await;
        let mut plans = server.plans().await;
        let mut todos = server.todos().await;
        sessions.create_session(session("orch", "")).await.unwrap();
        sessions
            .create_session(session("sub", "orch"))
            .await
            .unwrap();
        plans
            .update_plan(update("sub", five_steps()))
            .await
            .unwrap();
        plans
            .enter_plan_mode(pb::EnterPlanModeRequest {
                session_id: "orch".into(),
                goal: "Ship it".into(),
                scope: String::new(),
                expected_revision: None,
            })
            .await
            .unwrap();
        let written = todos
            .write_todos(pb::WriteTodosRequest {
                agent_id: "agent-sub".into(),
                todos: vec![todo("t1", pb::TodoStatus::InProgress)],
                expected_revision: None,
            })
            .await
            .unwrap()
            .into_inner();
        let plan = plans
            .get_plan(pb::GetPlanRequest {
                session_id: "sub".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .plan
            .unwrap();
        let status = plans
            .get_plan_status(pb::GetPlanStatusRequest {
                session_id: "orch".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status
            .unwrap();
        (plan, status, written.list.unwrap(), written.revision)
    };

    let server = server.restart().await;
    let mut sessions = server.sessions().await;
    let mut plans = server.plans().await;
    let mut todos = server.todos().await;
    let sub = sessions
        .get_session(pb::GetSessionRequest {
            session_id: "sub".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(sub.parent_session_id, "orch");
    let plan_after = plans
        .get_plan(pb::GetPlanRequest {
            session_id: "sub".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(plan_after.plan.unwrap(), plan_before);
    assert_eq!(plan_after.revision, revision);
    let status_after = plans
        .get_plan_status(pb::GetPlanStatusRequest {
            session_id: "orch".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(status_after, status_before);
    let todos_after = todos
        .read_todos(pb::ReadTodosRequest {
            agent_id: "agent-sub".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .list
        .unwrap();
    assert_eq!(todos_after, todos_before);
    // Revisions continue where they stopped.
    let next = plans
        .update_plan(update("sub", five_steps()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.revision, revision + 1);
}

#[tokio::test]
async fn of_concurrent_writers_with_the_same_expected_revision_exactly_one_wins() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let base = plans
        .update_plan(update("shared", five_steps()))
        .await
        .unwrap()
        .into_inner()
        .revision;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let mut client = server.plans().await;
        tasks.push(tokio::spawn(async move {
            let mut items = five_steps();
            items[4].step = format!("writer {i}");
            let mut req = update("shared", items);
            req.expected_revision = Some(base);
            client.update_plan(req).await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => wins += 1,
            Err(e) => assert_eq!(e.code(), Code::Aborted, "{e:?}"),
        }
    }
    assert_eq!(wins, 1);

    let mut todos = server.todos().await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let mut client = todos.clone();
        tasks.push(tokio::spawn(async move {
            client
                .write_todos(pb::WriteTodosRequest {
                    agent_id: "shared-agent".into(),
                    todos: vec![todo(&format!("t{i}"), pb::TodoStatus::Pending)],
                    expected_revision: Some(0),
                })
                .await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        if t.await.unwrap().is_ok() {
            wins += 1;
        }
    }
    assert_eq!(wins, 1);
    let list = todos
        .read_todos(pb::ReadTodosRequest {
            agent_id: "shared-agent".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .list
        .unwrap();
    assert_eq!(list.todos.len(), 1);
}

#[tokio::test]
async fn concurrent_writes_get_distinct_gap_free_revisions() {
    let server = TestServer::start().await;
    let channel = server.channel().await;
    let mut tasks = Vec::new();
    for i in 0..200 {
        let mut client = pb::plan_service_client::PlanServiceClient::new(channel.clone());
        tasks.push(tokio::spawn(async move {
            // Every other write is invalid: failures must not disturb
            // their neighbours in the same commit batch.
            let mut items = five_steps();
            if i % 2 == 1 {
                items[0].status = pb::StepStatus::InProgress.into();
            }
            client.update_plan(update(&format!("s{i}"), items)).await
        }));
    }
    let mut revisions = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Ok(r) => {
                assert_eq!(i % 2, 0);
                revisions.push(r.into_inner().revision);
            }
            Err(e) => {
                assert_eq!(i % 2, 1);
                assert_eq!(e.code(), Code::InvalidArgument);
            }
        }
    }
    revisions.sort_unstable();
    if !cairn_testkit::on_etcd() {
        assert_eq!(revisions, (rev(1)..=rev(100)).collect::<Vec<u64>>());
        return;
    }
    // On etcd, independent writes committed together share a revision;
    // still no gap: the log holds exactly the acknowledged revisions.
    assert_eq!(revisions.len(), 100);
    revisions.dedup();
    let mut watch = pb::watch_service_client::WatchServiceClient::new(channel);
    let mut stream = cairn_testkit::stream::watch(
        &mut watch,
        pb::watch_request::Target::All(true),
        Some(rev(1)),
        false,
    )
    .await;
    let last = *revisions.last().unwrap();
    let logged = cairn_testkit::stream::revisions_through(&mut stream, last).await;
    assert_eq!(logged, revisions);
}

#[tokio::test]
async fn grpc_web_answers_on_the_grpc_port() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start().await;
    // A browser's gRPC-Web call over HTTP/1.1: one length-prefixed frame
    // holding an empty HealthCheckRequest.
    let body = [0u8, 0, 0, 0, 0];
    let request = format!(
        "POST /grpc.health.v1.Health/Check HTTP/1.1\r\nHost: {}\r\ncontent-type: application/grpc-web+proto\r\nx-grpc-web: 1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        server.addr,
        body.len()
    );
    let mut conn = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    conn.write_all(&body).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        conn.read_to_end(&mut response),
    )
    .await
    .unwrap()
    .unwrap();
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.to_lowercase()
            .contains("content-type: application/grpc-web+proto"),
        "{text}"
    );
    // The trailers frame carries the status; SERVING is field 1 = 1.
    assert!(text.contains("grpc-status:0"), "{text}");
    assert!(
        response.windows(2).any(|w| w == [0x08, 0x01]),
        "SERVING in the message frame"
    );
}
