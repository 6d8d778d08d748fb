//! The session tree over gRPC.

use cairn_api as pb;
use tonic::Code;
use tonic_types::StatusExt;

use cairn_testkit::{TestServer, assert_status, bad_field, five_steps, session, update};

#[tokio::test]
async fn create_get_and_generated_ids() {
    let server = TestServer::start().await;
    let mut sessions = server.sessions().await;
    let resp = sessions
        .create_session(session("orch", ""))
        .await
        .unwrap()
        .into_inner();
    let s = resp.session.unwrap();
    assert_eq!(s.session_id, "orch");
    assert_eq!(s.agent_id, "agent-orch");
    assert_eq!(s.revision, resp.revision);
    assert!(s.create_time.is_some());
    let got = sessions
        .get_session(pb::GetSessionRequest {
            session_id: "orch".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(got, s);

    let err = sessions
        .create_session(session("orch", ""))
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::AlreadyExists,
        "Session orch already exists",
        "SESSION_EXISTS",
    );

    let generated = sessions
        .create_session(pb::CreateSessionRequest { session: None })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert!(
        generated.session_id.starts_with("ses_"),
        "{}",
        generated.session_id
    );

    let err = sessions
        .create_session(session("sub", "ghost"))
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::NotFound,
        "Parent session ghost not found",
        "PARENT_NOT_FOUND",
    );
    let err = sessions
        .create_session(session("a/b", ""))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&err), "session.session_id");
    let err = sessions
        .get_session(pb::GetSessionRequest {
            session_id: "ghost".into(),
        })
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::NotFound,
        "Session ghost not found",
        "SESSION_NOT_FOUND",
    );
}

#[tokio::test]
async fn listing_pages_and_filters() {
    let server = TestServer::start().await;
    let mut sessions = server.sessions().await;
    sessions.create_session(session("root", "")).await.unwrap();
    for i in 0..7 {
        sessions
            .create_session(session(&format!("child-{i}"), "root"))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = sessions
            .list_sessions(pb::ListSessionsRequest {
                page_size: 3,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.sessions.len() <= 3);
        seen.extend(page.sessions.into_iter().map(|s| s.session_id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let mut expected: Vec<String> = (0..7).map(|i| format!("child-{i}")).collect();
    expected.push("root".into());
    assert_eq!(seen, expected);

    let children = sessions
        .list_sessions(pb::ListSessionsRequest {
            parent_session_id: "root".into(),
            page_size: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(children.sessions.len(), 7);
    let by_agent = sessions
        .list_sessions(pb::ListSessionsRequest {
            agent_id: "agent-child-3".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_agent.sessions.len(), 1);
    assert_eq!(by_agent.sessions[0].session_id, "child-3");
}

#[tokio::test]
async fn deleting_needs_cascade_for_children() {
    let server = TestServer::start().await;
    let mut sessions = server.sessions().await;
    let mut plans = server.plans().await;
    sessions.create_session(session("root", "")).await.unwrap();
    sessions
        .create_session(session("mid", "root"))
        .await
        .unwrap();
    sessions
        .create_session(session("leaf", "mid"))
        .await
        .unwrap();
    sessions.create_session(session("other", "")).await.unwrap();
    plans
        .update_plan(update("leaf", five_steps()))
        .await
        .unwrap();

    let err = sessions
        .delete_session(pb::DeleteSessionRequest {
            session_id: "root".into(),
            cascade: false,
            expected_revision: None,
        })
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "Session root has 1 child session(s); set cascade to delete them too",
        "SESSION_HAS_CHILDREN",
    );
    let err = sessions
        .delete_session(pb::DeleteSessionRequest {
            session_id: "root".into(),
            cascade: true,
            expected_revision: Some(999),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);

    let resp = sessions
        .delete_session(pb::DeleteSessionRequest {
            session_id: "root".into(),
            cascade: true,
            expected_revision: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.deleted_session_ids, vec!["root", "mid", "leaf"]);
    for id in ["root", "mid", "leaf"] {
        let err = sessions
            .get_session(pb::GetSessionRequest {
                session_id: id.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::NotFound);
    }
    let err = plans
        .get_plan(pb::GetPlanRequest {
            session_id: "leaf".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "the plan went with its session");
    assert!(
        sessions
            .get_session(pb::GetSessionRequest {
                session_id: "other".into()
            })
            .await
            .is_ok()
    );
    // A leaf needs no cascade.
    sessions
        .delete_session(pb::DeleteSessionRequest {
            session_id: "other".into(),
            cascade: false,
            expected_revision: None,
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn moving_sessions_in_the_tree() {
    let server = TestServer::start().await;
    let mut sessions = server.sessions().await;
    sessions.create_session(session("a", "")).await.unwrap();
    sessions.create_session(session("b", "a")).await.unwrap();
    sessions.create_session(session("c", "b")).await.unwrap();
    sessions.create_session(session("d", "")).await.unwrap();

    let err = sessions
        .update_session(pb::UpdateSessionRequest {
            session_id: "a".into(),
            parent_session_id: Some("c".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::InvalidArgument,
        "Session a cannot move under c: that would make a cycle",
        "PARENT_CYCLE",
    );
    let moved = sessions
        .update_session(pb::UpdateSessionRequest {
            session_id: "c".into(),
            parent_session_id: Some("d".into()),
            title: Some("moved".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let c = moved.session.unwrap();
    assert_eq!(
        (c.parent_session_id.as_str(), c.title.as_str()),
        ("d", "moved")
    );
    assert_eq!(c.revision, moved.revision);
    let kids = |parent: &str| pb::ListSessionsRequest {
        parent_session_id: parent.into(),
        ..Default::default()
    };
    assert!(
        sessions
            .list_sessions(kids("b"))
            .await
            .unwrap()
            .into_inner()
            .sessions
            .is_empty()
    );
    assert_eq!(
        sessions
            .list_sessions(kids("d"))
            .await
            .unwrap()
            .into_inner()
            .sessions
            .len(),
        1
    );

    let stale = sessions
        .update_session(pb::UpdateSessionRequest {
            session_id: "c".into(),
            title: Some("x".into()),
            expected_revision: Some(c.revision - 1),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Code::Aborted);
    let root = sessions
        .update_session(pb::UpdateSessionRequest {
            session_id: "c".into(),
            parent_session_id: Some(String::new()),
            expected_revision: Some(c.revision),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(root.parent_session_id, "");
}

#[tokio::test]
async fn trees_stop_at_the_depth_limit() {
    let server = TestServer::start_with(|p| p.limits.max_tree_depth = 4).await;
    let mut sessions = server.sessions().await;
    // A chain of four: a > b > c > d.
    sessions.create_session(session("a", "")).await.unwrap();
    sessions.create_session(session("b", "a")).await.unwrap();
    sessions.create_session(session("c", "b")).await.unwrap();
    sessions.create_session(session("d", "c")).await.unwrap();
    let err = sessions
        .create_session(session("e", "d"))
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::ResourceExhausted,
        "session.parent_session_id: session tree depth exceeds the limit of 4 (got 5)",
        "LIMIT_EXCEEDED",
    );
    // Moving a two-level subtree (x > y) under c would make y five deep;
    // under b it is four.
    sessions.create_session(session("x", "")).await.unwrap();
    sessions.create_session(session("y", "x")).await.unwrap();
    let move_under = |parent: &str| pb::UpdateSessionRequest {
        session_id: "x".into(),
        parent_session_id: Some(parent.into()),
        ..Default::default()
    };
    let err = sessions.update_session(move_under("c")).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert_eq!(
        err.get_details_error_info().unwrap().reason,
        "LIMIT_EXCEEDED"
    );
    sessions.update_session(move_under("b")).await.unwrap();
}
