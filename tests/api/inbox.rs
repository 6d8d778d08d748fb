//! The inbox: what awaits each approver, across every tree, oldest first,
//! paged; scoped by the approver's session roots, never its own
//! submissions, and kept by the same revisions that start and end a wait.

use cairn_api as pb;
use cairn_api::auth_service_client::AuthServiceClient;
use cairn_api::plan_service_client::PlanServiceClient;
use cairn_api::session_service_client::SessionServiceClient;
use cairn_api::watch_response::Kind;
use cairn_api::watch_service_client::WatchServiceClient;
use cairn_server::auth::AuthMode;
use cairn_testkit::{Authed, Bearer, TestServer, five_steps, two_steps, update};
use tonic::Code;
use tonic::transport::Channel;

const ADMIN: &str = "inbox-admin-token-0123456789abcdef";

struct Who {
    sessions: SessionServiceClient<Authed>,
    plans: PlanServiceClient<Authed>,
    watch: WatchServiceClient<Authed>,
}

fn who(channel: &Channel, token: &str) -> Who {
    let b = || Bearer::new(Some(token));
    Who {
        sessions: SessionServiceClient::with_interceptor(channel.clone(), b()),
        plans: PlanServiceClient::with_interceptor(channel.clone(), b()),
        watch: WatchServiceClient::with_interceptor(channel.clone(), b()),
    }
}

type Stream = tonic::Streaming<pb::WatchResponse>;

/// An inbox watch: with `start`, replayed from that revision; without,
/// its initial state first.
async fn watch_inbox(w: &mut Who, start: Option<u64>) -> Stream {
    w.watch
        .watch(pb::WatchRequest {
            target: Some(pb::watch_request::Target::Inbox(true)),
            start_revision: start,
            send_initial_state: start.is_none(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

/// An inbox event as (added, session, kind).
type Seen = (bool, String, pb::InboxItemKind);

/// The inbox events of `stream` up to `synced` (`None`), or the next `n`.
async fn inbox_events(stream: &mut Stream, n: Option<usize>) -> (Vec<Seen>, u64) {
    let mut out = Vec::new();
    // Heartbeats keep coming: the patience bounds the whole wait.
    let patience = std::time::Instant::now() + cairn_testkit::stream::PATIENCE;
    loop {
        assert!(
            std::time::Instant::now() < patience,
            "inbox events not seen within the patience: {out:?}"
        );
        match cairn_testkit::stream::next(stream).await {
            Kind::Event(e) => {
                let Some(pb::event::Object::InboxItem(i)) = &e.object else {
                    panic!("an inbox watch got {e:?}");
                };
                let added = match e.r#type() {
                    pb::EventType::InboxItemAdded => true,
                    pb::EventType::InboxItemRemoved => false,
                    other => panic!("an inbox watch got {other:?}"),
                };
                out.push((added, i.session_id.clone(), i.kind()));
                if n == Some(out.len()) {
                    return (out, e.revision);
                }
            }
            Kind::Synced(r) if n.is_none() => return (out, r.revision),
            _ => {}
        }
    }
}

fn seen(list: &[(bool, &str, pb::InboxItemKind)]) -> Vec<Seen> {
    list.iter()
        .map(|(a, s, k)| (*a, (*s).to_owned(), *k))
        .collect()
}

/// `session` under `root`, its plan submitted for approval by `by`.
async fn awaiting(by: &mut Who, root: &str, session: &str) {
    by.sessions
        .create_session(pb::CreateSessionRequest {
            session: Some(pb::Session {
                session_id: session.into(),
                parent_session_id: root.into(),
                agent_id: "coder".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    by.plans
        .update_plan(update(session, five_steps()))
        .await
        .unwrap();
    by.plans
        .enter_plan_mode(pb::EnterPlanModeRequest {
            session_id: session.into(),
            goal: format!("goal of {session}"),
            ..Default::default()
        })
        .await
        .unwrap();
    by.plans
        .exit_plan_mode(pb::ExitPlanModeRequest {
            deadline: None,
            session_id: session.into(),
            plan: Some(two_steps("Add the login API")),
            expected_revision: None,
        })
        .await
        .unwrap();
}

/// The whole inbox of a caller, walking pages of `page_size`: (session,
/// kind) in the order given.
async fn inbox(w: &mut Who, page_size: i32) -> Vec<(String, pb::InboxItemKind)> {
    let mut out = Vec::new();
    let mut token = String::new();
    let mut last = None;
    loop {
        let page = w
            .plans
            .list_inbox(pb::ListInboxRequest {
                page_size,
                page_token: token,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.items.len() <= usize::try_from(page_size.max(1)).unwrap());
        for i in page.items {
            let since = cairn_api::shapes::micros(i.waiting_since.as_ref());
            assert!(last.is_none_or(|l| l <= since), "oldest first");
            last = Some(since);
            let kind = i.kind();
            out.push((i.session_id, kind));
        }
        if page.next_page_token.is_empty() {
            return out;
        }
        token = page.next_page_token;
    }
}

fn items(list: &[(&str, pb::InboxItemKind)]) -> Vec<(String, pb::InboxItemKind)> {
    list.iter().map(|(s, k)| ((*s).to_owned(), *k)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_approver_sees_what_it_may_approve_oldest_first() {
    use pb::InboxItemKind::{Modification, Plan};
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), ADMIN).unwrap();
    let path = file.path().to_owned();
    let server = TestServer::start_config(move |c| {
        c.auth = AuthMode::Token;
        c.admin_token_file = Some(path);
    })
    .await;
    let channel = server.channel().await;
    let mut auth = AuthServiceClient::with_interceptor(channel.clone(), Bearer::new(Some(ADMIN)));
    let mut tokens = std::collections::HashMap::new();
    for (id, roles, roots) in [
        (
            "setup",
            vec![pb::Role::Orchestrator, pb::Role::Agent],
            vec![],
        ),
        ("north", vec![pb::Role::Approver], vec!["a", "b"]),
        ("south", vec![pb::Role::Approver], vec!["c"]),
        (
            "both",
            vec![pb::Role::Orchestrator, pb::Role::Approver],
            vec!["a"],
        ),
        ("viewer", vec![pb::Role::Viewer], vec![]),
    ] {
        let r = auth
            .create_principal(pb::CreatePrincipalRequest {
                principal: Some(pb::Principal {
                    principal_id: id.into(),
                    roles: roles.into_iter().map(Into::into).collect(),
                    agent_ids: if id == "setup" {
                        vec!["coder".into(), "main".into()]
                    } else {
                        Vec::new()
                    },
                    session_roots: roots.into_iter().map(String::from).collect(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner();
        tokens.insert(id, r.token);
    }
    let mut setup = who(&channel, &tokens["setup"]);
    for root in ["a", "b", "c"] {
        setup
            .sessions
            .create_session(pb::CreateSessionRequest {
                session: Some(pb::Session {
                    session_id: root.into(),
                    agent_id: "main".into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap();
    }
    let mut north = who(&channel, &tokens["north"]);
    let mut south = who(&channel, &tokens["south"]);
    let mut both = who(&channel, &tokens["both"]);
    let mut viewer = who(&channel, &tokens["viewer"]);
    let mut admin = who(&channel, ADMIN);
    assert!(inbox(&mut north, 10).await.is_empty());

    awaiting(&mut setup, "a", "a:1").await;
    awaiting(&mut setup, "b", "b:1").await;
    awaiting(&mut setup, "c", "c:1").await;
    // An active plan in a with a modification asked.
    awaiting(&mut setup, "a", "a:2").await;
    admin
        .plans
        .approve_plan(pb::ApprovePlanRequest {
            session_id: "a:2".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    setup
        .plans
        .modify_plan(pb::ModifyPlanRequest {
            session_id: "a:2".into(),
            step_id: 2,
            reason: "the handler needs a rate limit".into(),
            new_description: "Handler with a rate limit".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    // Submitted by an approver of a: not in its own inbox.
    awaiting(&mut both, "a", "a:3").await;

    let want_north = items(&[
        ("a:1", Plan),
        ("b:1", Plan),
        ("a:2", Modification),
        ("a:3", Plan),
    ]);
    assert_eq!(inbox(&mut north, 50).await, want_north);
    assert_eq!(inbox(&mut north, 1).await, want_north, "paged one by one");
    assert_eq!(inbox(&mut south, 50).await, items(&[("c:1", Plan)]));
    assert_eq!(
        inbox(&mut both, 50).await,
        items(&[("a:1", Plan), ("a:2", Modification)])
    );
    assert!(inbox(&mut viewer, 50).await.is_empty());
    // The same sets, watched: the initial state of each inbox.
    let mut north_live = watch_inbox(&mut north, None).await;
    let (snapshot, synced) = inbox_events(&mut north_live, None).await;
    let added = |l: &[(String, pb::InboxItemKind)]| {
        let mut v: Vec<Seen> = l.iter().map(|(s, k)| (true, s.clone(), *k)).collect();
        v.sort();
        v
    };
    let mut got = snapshot.clone();
    got.sort();
    assert_eq!(got, added(&want_north));
    let mut south_live = watch_inbox(&mut south, None).await;
    assert_eq!(
        inbox_events(&mut south_live, None).await.0,
        seen(&[(true, "c:1", Plan)])
    );
    // What it submitted itself is not in its watched inbox either.
    let mut own = watch_inbox(&mut both, None).await;
    let mut got = inbox_events(&mut own, None).await.0;
    got.sort();
    assert_eq!(
        got,
        seen(&[(true, "a:1", Plan), (true, "a:2", Modification)])
    );
    let mut viewer_live = watch_inbox(&mut viewer, None).await;
    assert!(inbox_events(&mut viewer_live, None).await.0.is_empty());
    assert_eq!(inbox(&mut admin, 50).await.len(), 5);
    // What an item carries.
    let page = north
        .plans
        .list_inbox(pb::ListInboxRequest::default())
        .await
        .unwrap()
        .into_inner();
    let first = &page.items[0];
    assert_eq!(
        (
            first.goal.as_str(),
            first.summary.as_str(),
            first.submitted_by.as_str(),
            first.parent_session_id.as_str()
        ),
        ("goal of a:1", "Add the login API", "setup", "a")
    );
    assert!(first.plan_id.starts_with("plan_"));
    let m = page.items[2].modification.as_ref().unwrap();
    assert_eq!(m.reason, "the handler needs a rate limit");

    // Bad paging is refused and names its field.
    for (page_size, page_token, field) in [
        (-1, "", "page_size"),
        (0, "x", "page_token"),
        (0, "12/a:1/mod-", "page_token"),
        (0, "12//plan", "page_token"),
    ] {
        let e = north
            .plans
            .list_inbox(pb::ListInboxRequest {
                page_size,
                page_token: page_token.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{page_token}");
        assert!(e.message().contains(field), "{}", e.message());
    }

    // Decided, deleted: gone, in the same revision.
    north
        .plans
        .approve_plan(pb::ApprovePlanRequest {
            session_id: "a:1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    north
        .plans
        .reject_modification(pb::RejectModificationRequest {
            session_id: "a:2".into(),
            modification_id: m.modification_id,
            ..Default::default()
        })
        .await
        .unwrap();
    setup
        .sessions
        .delete_session(pb::DeleteSessionRequest {
            session_id: "b:1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(inbox(&mut north, 50).await, items(&[("a:3", Plan)]));
    // Watched: each change once, in order, to the approvers it concerns.
    awaiting(&mut setup, "c", "c:2").await;
    awaiting(&mut setup, "b", "b:2").await;
    let want_live = seen(&[
        (false, "a:1", Plan),
        (false, "a:2", Modification),
        (false, "b:1", Plan),
        (true, "b:2", Plan),
    ]);
    let (live, _) = inbox_events(&mut north_live, Some(4)).await;
    assert_eq!(live, want_live);
    let (south_saw, _) = inbox_events(&mut south_live, Some(1)).await;
    assert_eq!(south_saw, seen(&[(true, "c:2", Plan)]));
    // Resumed from the log after the snapshot: the same, again.
    let mut resumed = watch_inbox(&mut north, Some(synced + 1)).await;
    assert_eq!(inbox_events(&mut resumed, Some(4)).await.0, want_live);
    // An admin decides on anything but its own submissions, listed or
    // watched.
    awaiting(&mut admin, "c", "c:own").await;
    assert!(
        inbox(&mut admin, 50)
            .await
            .iter()
            .all(|(s, _)| s != "c:own")
    );
    let mut admin_live = watch_inbox(&mut admin, None).await;
    let (snapshot, _) = inbox_events(&mut admin_live, None).await;
    assert!(!snapshot.is_empty() && snapshot.iter().all(|(_, s, _)| s != "c:own"));
    // The index holds what waits and nothing decided or deleted: read
    // from the store itself once the server is down.
    let mut server = server;
    server.stop().await;
    let store = server.open_store().await;
    let index = store.read(|v| v.awaiting_after(None, 100)).await.unwrap();
    let index: Vec<_> = index
        .iter()
        .map(|k| (k.session_id.as_str(), k.item))
        .collect();
    assert_eq!(
        index,
        [
            ("c:1", cairn_core::inbox::Awaited::Plan),
            ("a:3", cairn_core::inbox::Awaited::Plan),
            ("c:2", cairn_core::inbox::Awaited::Plan),
            ("b:2", cairn_core::inbox::Awaited::Plan),
            ("c:own", cairn_core::inbox::Awaited::Plan)
        ]
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_subtree_s_waiting_items_leave_one_inbox_and_join_another() {
    use pb::InboxItemKind::Plan;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), ADMIN).unwrap();
    let path = file.path().to_owned();
    let server = TestServer::start_config(move |c| {
        c.auth = AuthMode::Token;
        c.admin_token_file = Some(path);
    })
    .await;
    let channel = server.channel().await;
    let mut auth = AuthServiceClient::with_interceptor(channel.clone(), Bearer::new(Some(ADMIN)));
    let mut tokens = std::collections::HashMap::new();
    for (id, roles, roots) in [
        (
            "setup",
            vec![pb::Role::Orchestrator, pb::Role::Agent],
            vec![],
        ),
        ("north", vec![pb::Role::Approver], vec!["a"]),
        ("south", vec![pb::Role::Approver], vec!["c"]),
    ] {
        let r = auth
            .create_principal(pb::CreatePrincipalRequest {
                principal: Some(pb::Principal {
                    principal_id: id.into(),
                    roles: roles.into_iter().map(Into::into).collect(),
                    agent_ids: if id == "setup" {
                        vec!["coder".into(), "main".into()]
                    } else {
                        Vec::new()
                    },
                    session_roots: roots.into_iter().map(String::from).collect(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner();
        tokens.insert(id, r.token);
    }
    let mut setup = who(&channel, &tokens["setup"]);
    for root in ["a", "c"] {
        setup
            .sessions
            .create_session(pb::CreateSessionRequest {
                session: Some(pb::Session {
                    session_id: root.into(),
                    agent_id: "main".into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap();
    }
    awaiting(&mut setup, "a", "a:1").await;
    awaiting(&mut setup, "a:1", "a:1:x").await;
    let mut north = who(&channel, &tokens["north"]);
    let mut south = who(&channel, &tokens["south"]);
    let mut north_watch = watch_inbox(&mut north, None).await;
    let mut south_watch = watch_inbox(&mut south, None).await;
    let (first, _) = inbox_events(&mut north_watch, None).await;
    assert_eq!(first, seen(&[(true, "a:1", Plan), (true, "a:1:x", Plan)]));
    assert_eq!(inbox_events(&mut south_watch, None).await.0, Vec::new());

    // The admin moves a:1 (and a:1:x below it) from tree a to tree c.
    let mut admin = who(&channel, ADMIN);
    admin
        .sessions
        .update_session(pb::UpdateSessionRequest {
            session_id: "a:1".into(),
            parent_session_id: Some("c".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let (gone, _) = inbox_events(&mut north_watch, Some(2)).await;
    assert_eq!(gone, seen(&[(false, "a:1", Plan), (false, "a:1:x", Plan)]));
    let (joined, _) = inbox_events(&mut south_watch, Some(2)).await;
    assert_eq!(joined, seen(&[(true, "a:1", Plan), (true, "a:1:x", Plan)]));
    assert!(inbox(&mut north, 10).await.is_empty());
    assert_eq!(
        inbox(&mut south, 10).await,
        items(&[("a:1", Plan), ("a:1:x", Plan)])
    );
}
