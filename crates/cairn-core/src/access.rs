//! Who may do what (docs/rules.md, Principals and rights), as pure
//! functions: a principal, an action, the facts about the resource in, a
//! decision out.
//!
//! A principal has roles, the agents it acts as (`agent_ids`) and the
//! session subtrees it may touch (`session_roots`; empty means the whole
//! store, except for what agents may do, which always follows the sessions'
//! `agent_id`). Rights add up over roles. A refusal says why: the role is
//! missing (`ROLE_REQUIRED`), the resource is outside the scope
//! (`NOT_IN_SCOPE`), or an approver would approve its own submission
//! (`SELF_APPROVAL`).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::{Denial, Error, Result, excerpt};

/// What a principal may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything, principals included.
    Admin,
    /// Manages the sessions of its trees and writes their plans.
    Orchestrator,
    /// Works on the sessions of its agents and on their todos.
    Agent,
    /// Approves and rejects plans and modifications in its trees.
    Approver,
    /// Reads and watches its trees.
    Viewer,
}

impl Role {
    /// The role's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Orchestrator => "orchestrator",
            Role::Agent => "agent",
            Role::Approver => "approver",
            Role::Viewer => "viewer",
        }
    }

    /// The role a name (as [`Role::name`] spells it) names.
    pub fn parse(name: &str) -> Option<Role> {
        [
            Role::Admin,
            Role::Orchestrator,
            Role::Agent,
            Role::Approver,
            Role::Viewer,
        ]
        .into_iter()
        .find(|r| r.name() == name)
    }
}

/// A caller the server knows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Principal {
    pub principal_id: String,
    pub roles: BTreeSet<Role>,
    /// The agents it acts as.
    pub agent_ids: BTreeSet<String>,
    /// The session subtrees it may touch; empty: the whole store.
    pub session_roots: BTreeSet<String>,
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Authentication is off: every caller may do everything, and an
    /// approval records whatever approver the request names.
    Open,
    /// An authenticated principal.
    Principal(Principal),
}

/// A session as rights see it.
#[derive(Debug, Clone, Copy)]
pub struct SessionFacts<'a> {
    pub session_id: &'a str,
    pub agent_id: &'a str,
    /// Its ancestors, root first.
    pub ancestors: &'a [String],
}

/// What a caller wants to do to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read it, its plan, its history; watch it; wait on it.
    Read,
    /// Change its plan, plan mode included, approval excepted.
    WritePlan,
    /// Approve or reject a plan or a modification.
    Approve,
    /// Change its record, move it, delete it (and its subtree).
    Manage,
}

impl Action {
    fn verb(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::WritePlan => "change the plan of",
            Action::Approve => "approve or reject plans of",
            Action::Manage => "change or delete",
        }
    }
}

impl Principal {
    /// Whether it has `role`.
    pub fn has(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    /// Whether it may do everything.
    pub fn is_admin(&self) -> bool {
        self.has(Role::Admin)
    }

    /// Whether a session lies in its trees.
    pub fn in_roots(&self, s: &SessionFacts<'_>) -> bool {
        self.session_roots.is_empty()
            || self.session_roots.contains(s.session_id)
            || s.ancestors.iter().any(|a| self.session_roots.contains(a))
    }

    /// Whether a session belongs to one of its agents.
    pub fn owns(&self, s: &SessionFacts<'_>) -> bool {
        !s.agent_id.is_empty() && self.agent_ids.contains(s.agent_id)
    }

    /// Whether it may read everything: the whole store is its scope.
    pub fn reads_everything(&self) -> bool {
        self.is_admin()
            || (self.session_roots.is_empty()
                && [Role::Viewer, Role::Approver, Role::Orchestrator]
                    .iter()
                    .any(|r| self.has(*r)))
    }

    fn label(&self) -> String {
        excerpt(&self.principal_id)
    }
}

fn denied(reason: Denial, message: String) -> Error {
    Error::PermissionDenied { reason, message }
}

fn role_required(p: &Principal, what: &str, roles: &[Role]) -> Error {
    let names: Vec<&str> = roles.iter().map(|r| r.name()).collect();
    denied(
        Denial::RoleRequired,
        format!(
            "principal {} may not {what}: that needs the {} role",
            p.label(),
            names.join(" or ")
        ),
    )
}

fn not_in_scope(p: &Principal, what: &str, session: &str) -> Error {
    denied(
        Denial::NotInScope,
        format!(
            "principal {} may not {what} session {}: it is outside its scope",
            p.label(),
            excerpt(session)
        ),
    )
}

/// Whether `caller` may do `action` to session `s`.
pub fn check_session(caller: &Caller, action: Action, s: &SessionFacts<'_>) -> Result<()> {
    let Caller::Principal(p) = caller else {
        return Ok(());
    };
    if p.is_admin() {
        return Ok(());
    }
    let (roles, allowed): (&[Role], bool) = match action {
        Action::Read => (
            &[
                Role::Viewer,
                Role::Approver,
                Role::Orchestrator,
                Role::Agent,
            ],
            ((p.has(Role::Viewer) || p.has(Role::Approver) || p.has(Role::Orchestrator))
                && p.in_roots(s))
                || (p.has(Role::Agent) && p.owns(s) && p.in_roots(s)),
        ),
        Action::WritePlan => (
            &[Role::Orchestrator, Role::Agent],
            (p.has(Role::Orchestrator) && p.in_roots(s))
                || (p.has(Role::Agent) && p.owns(s) && p.in_roots(s)),
        ),
        Action::Approve => (&[Role::Approver], p.has(Role::Approver) && p.in_roots(s)),
        Action::Manage => (
            &[Role::Orchestrator],
            p.has(Role::Orchestrator) && p.in_roots(s),
        ),
    };
    if allowed {
        return Ok(());
    }
    if roles.iter().any(|r| p.has(*r)) {
        Err(not_in_scope(p, action.verb(), s.session_id))
    } else {
        Err(role_required(
            p,
            &format!("{} sessions", action.verb()),
            roles,
        ))
    }
}

/// Whether `caller` may create a session for `agent_id` under `parent`
/// (`None`: a root session).
pub fn check_create(
    caller: &Caller,
    session_id: &str,
    agent_id: &str,
    parent: Option<&SessionFacts<'_>>,
) -> Result<()> {
    let Caller::Principal(p) = caller else {
        return Ok(());
    };
    if p.is_admin() {
        return Ok(());
    }
    let chain: Vec<String> = parent
        .map(|s| {
            let mut chain = s.ancestors.to_vec();
            chain.push(s.session_id.to_owned());
            chain
        })
        .unwrap_or_default();
    let new = SessionFacts {
        session_id,
        agent_id,
        ancestors: &chain,
    };
    // Under a parent, the right comes from the parent, never from the new
    // id: a principal whose root does not exist yet must not plant it in
    // somebody else's tree.
    let orchestrates = p.has(Role::Orchestrator)
        && match parent {
            Some(parent) => p.in_roots(parent),
            None => p.in_roots(&new),
        };
    // An agent creates sessions for itself, under a session it may use:
    // one of its trees (when it has some), or a session of its own.
    let for_itself = p.has(Role::Agent)
        && p.owns(&new)
        && match parent {
            Some(parent) => {
                (!p.session_roots.is_empty() && p.in_roots(parent))
                    || (p.owns(parent) && p.in_roots(parent))
            }
            None => p.session_roots.is_empty(),
        };
    if orchestrates || for_itself {
        return Ok(());
    }
    if p.has(Role::Orchestrator) || p.has(Role::Agent) {
        let what = if parent.is_some() {
            "create sessions under"
        } else {
            "create a root session such as"
        };
        Err(not_in_scope(
            p,
            what,
            parent.map_or(session_id, |s| s.session_id),
        ))
    } else {
        Err(role_required(
            p,
            "create sessions",
            &[Role::Orchestrator, Role::Agent],
        ))
    }
}

/// Whether `caller` may move session `s` under `new_parent` (`None`: make
/// it a root): it must manage the session where it is and where it goes.
pub fn check_move(
    caller: &Caller,
    s: &SessionFacts<'_>,
    new_parent: Option<&SessionFacts<'_>>,
) -> Result<()> {
    check_session(caller, Action::Manage, s)?;
    let Caller::Principal(p) = caller else {
        return Ok(());
    };
    if p.is_admin() {
        return Ok(());
    }
    let landing = match new_parent {
        Some(parent) => p.in_roots(parent),
        None => p.session_roots.is_empty(),
    };
    if landing {
        Ok(())
    } else {
        Err(not_in_scope(
            p,
            "move sessions out of its trees, such as",
            s.session_id,
        ))
    }
}

/// What a caller wants to do to an agent's todo list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TodoAction {
    /// Read or watch it.
    Read,
    /// Replace it.
    Write,
}

/// Whether `caller` may do `action` to `agent_id`'s todos.
pub fn check_todos(caller: &Caller, agent_id: &str, action: TodoAction) -> Result<()> {
    let Caller::Principal(p) = caller else {
        return Ok(());
    };
    if p.is_admin() {
        return Ok(());
    }
    let acts_as = p.agent_ids.contains(agent_id);
    let allowed = match action {
        TodoAction::Write => acts_as && (p.has(Role::Agent) || p.has(Role::Orchestrator)),
        TodoAction::Read => acts_as || p.reads_everything(),
    };
    if allowed {
        Ok(())
    } else if acts_as {
        Err(role_required(
            p,
            "write todos",
            &[Role::Agent, Role::Orchestrator],
        ))
    } else {
        Err(denied(
            Denial::NotInScope,
            format!(
                "principal {} does not act as agent {}",
                p.label(),
                excerpt(agent_id)
            ),
        ))
    }
}

/// Whether `caller` may watch (or wait on) the tree under `root`: all of
/// it, including sessions created there later, must lie in its scope, which
/// only its trees guarantee (an agent's right follows each session's agent,
/// so it watches its own sessions, not trees).
pub fn check_tree(caller: &Caller, root: &SessionFacts<'_>) -> Result<()> {
    let Caller::Principal(p) = caller else {
        return Ok(());
    };
    if p.is_admin()
        || ((p.has(Role::Viewer) || p.has(Role::Approver) || p.has(Role::Orchestrator))
            && p.in_roots(root))
    {
        return Ok(());
    }
    if p.has(Role::Agent)
        || p.has(Role::Viewer)
        || p.has(Role::Approver)
        || p.has(Role::Orchestrator)
    {
        Err(not_in_scope(p, "watch the tree of", root.session_id))
    } else {
        Err(role_required(
            p,
            "watch trees",
            &[Role::Viewer, Role::Approver, Role::Orchestrator],
        ))
    }
}

/// Whether `caller` may read or watch everything at once.
pub fn check_everything(caller: &Caller) -> Result<()> {
    match caller {
        Caller::Open => Ok(()),
        Caller::Principal(p) if p.reads_everything() => Ok(()),
        Caller::Principal(p) => Err(denied(
            Denial::NotInScope,
            format!(
                "principal {} may not read or watch the whole store: its scope is limited; name a session, a tree or one of its agents",
                p.label()
            ),
        )),
    }
}

/// The id of the bootstrap admin of `--admin-token-file`.
pub const BOOTSTRAP_ADMIN: &str = "admin";

/// Most agent ids, and most session roots, one principal may hold.
pub const MAX_SCOPE_ENTRIES: usize = 256;

/// What a new principal must be: a valid id that is not the bootstrap
/// admin's, and bounded scopes (every call of the principal checks them,
/// so nobody can make each call slow).
pub fn check_new_principal(principal: &Principal, limits: &crate::Limits) -> Result<()> {
    limits.check_resource_id("principal.principal_id", &principal.principal_id)?;
    if principal.principal_id == BOOTSTRAP_ADMIN {
        return Err(Error::invalid(
            "principal.principal_id",
            "`admin` is the bootstrap admin of --admin-token-file",
        ));
    }
    for (field, what, n) in [
        (
            "principal.agent_ids",
            "agent ids per principal",
            principal.agent_ids.len(),
        ),
        (
            "principal.session_roots",
            "session roots per principal",
            principal.session_roots.len(),
        ),
    ] {
        crate::Limits::check_count(field, what, MAX_SCOPE_ENTRIES, n)?;
    }
    for (i, a) in principal.agent_ids.iter().enumerate() {
        limits.check_resource_id(&format!("principal.agent_ids[{i}]"), a)?;
    }
    for (i, r) in principal.session_roots.iter().enumerate() {
        limits.check_resource_id(&format!("principal.session_roots[{i}]"), r)?;
    }
    if principal.has(Role::Agent) && principal.agent_ids.is_empty() {
        return Err(Error::invalid(
            "principal.agent_ids",
            "an agent acts as at least one agent id",
        ));
    }
    Ok(())
}

/// Whether `caller` is an admin (principals, the whole store).
pub fn check_admin(caller: &Caller) -> Result<()> {
    match caller {
        Caller::Open => Ok(()),
        Caller::Principal(p) if p.is_admin() => Ok(()),
        Caller::Principal(p) => Err(role_required(p, "manage principals", &[Role::Admin])),
    }
}

/// The id an approval records: the authenticated principal's, whatever the
/// request says; with authentication off, the request's.
pub fn approver_id(caller: &Caller, requested: String) -> String {
    match caller {
        Caller::Open => requested,
        Caller::Principal(p) => p.principal_id.clone(),
    }
}

/// The id a submission (a plan, a modification) records, so that the same
/// principal cannot approve it; empty with authentication off.
pub fn submitter_id(caller: &Caller) -> String {
    match caller {
        Caller::Open => String::new(),
        Caller::Principal(p) => p.principal_id.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(roles: &[Role], agents: &[&str], roots: &[&str]) -> Caller {
        Caller::Principal(Principal {
            principal_id: "p".into(),
            roles: roles.iter().copied().collect(),
            agent_ids: agents.iter().map(|s| (*s).to_owned()).collect(),
            session_roots: roots.iter().map(|s| (*s).to_owned()).collect(),
        })
    }

    fn reason(r: Result<()>) -> Option<Denial> {
        match r {
            Ok(()) => None,
            Err(Error::PermissionDenied { reason, .. }) => Some(reason),
            Err(e) => panic!("unexpected {e:?}"),
        }
    }

    #[test]
    fn scopes_and_roles() {
        let chain = vec!["orch".to_owned()];
        let inside = SessionFacts {
            session_id: "orch:coder",
            agent_id: "coder",
            ancestors: &chain,
        };
        let outside = SessionFacts {
            session_id: "other",
            agent_id: "coder",
            ancestors: &[],
        };
        let viewer = principal(&[Role::Viewer], &[], &["orch"]);
        assert_eq!(reason(check_session(&viewer, Action::Read, &inside)), None);
        assert_eq!(
            reason(check_session(&viewer, Action::Read, &outside)),
            Some(Denial::NotInScope)
        );
        assert_eq!(
            reason(check_session(&viewer, Action::WritePlan, &inside)),
            Some(Denial::RoleRequired)
        );
        let agent = principal(&[Role::Agent], &["coder"], &[]);
        assert_eq!(
            reason(check_session(&agent, Action::WritePlan, &outside)),
            None
        );
        assert_eq!(
            reason(check_session(&agent, Action::Approve, &inside)),
            Some(Denial::RoleRequired)
        );
        assert_eq!(
            reason(check_session(&agent, Action::Manage, &inside)),
            Some(Denial::RoleRequired)
        );
        let stranger = principal(&[Role::Agent], &["tester"], &[]);
        assert_eq!(
            reason(check_session(&stranger, Action::Read, &inside)),
            Some(Denial::NotInScope)
        );
        assert_eq!(
            reason(check_session(&Caller::Open, Action::Manage, &outside)),
            None
        );
    }

    #[test]
    fn creating_and_moving() {
        let orch_facts = SessionFacts {
            session_id: "orch",
            agent_id: "main",
            ancestors: &[],
        };
        let orchestrator = principal(&[Role::Orchestrator], &[], &["orch"]);
        assert_eq!(
            reason(check_create(
                &orchestrator,
                "orch:a",
                "a",
                Some(&orch_facts)
            )),
            None
        );
        // Roots limit it: no new root sessions.
        assert_eq!(
            reason(check_create(&orchestrator, "x", "a", None)),
            Some(Denial::NotInScope)
        );
        // An agent under the orchestrator's session, for itself only.
        let agent = principal(&[Role::Agent], &["coder"], &["orch"]);
        assert_eq!(
            reason(check_create(
                &agent,
                "orch:coder",
                "coder",
                Some(&orch_facts)
            )),
            None
        );
        assert_eq!(
            reason(check_create(&agent, "orch:t", "tester", Some(&orch_facts))),
            Some(Denial::NotInScope)
        );
        let chain = vec!["orch".to_owned()];
        let child = SessionFacts {
            session_id: "orch:a",
            agent_id: "a",
            ancestors: &chain,
        };
        assert_eq!(
            reason(check_move(&orchestrator, &child, None)),
            Some(Denial::NotInScope)
        );
        assert_eq!(
            reason(check_move(&orchestrator, &child, Some(&orch_facts))),
            None
        );
    }

    #[test]
    fn todos_and_everything() {
        let agent = principal(&[Role::Agent], &["coder"], &[]);
        assert_eq!(
            reason(check_todos(&agent, "coder", TodoAction::Write)),
            None
        );
        assert_eq!(
            reason(check_todos(&agent, "tester", TodoAction::Read)),
            Some(Denial::NotInScope)
        );
        let viewer = principal(&[Role::Viewer], &[], &[]);
        assert_eq!(
            reason(check_todos(&viewer, "coder", TodoAction::Read)),
            None
        );
        assert_eq!(
            reason(check_todos(&viewer, "coder", TodoAction::Write)),
            Some(Denial::NotInScope)
        );
        assert_eq!(reason(check_everything(&viewer)), None);
        let rooted = principal(&[Role::Viewer], &[], &["orch"]);
        assert_eq!(reason(check_everything(&rooted)), Some(Denial::NotInScope));
        assert_eq!(reason(check_everything(&agent)), Some(Denial::NotInScope));
        assert_eq!(reason(check_admin(&viewer)), Some(Denial::RoleRequired));
    }
}
