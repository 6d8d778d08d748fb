"use strict";
// State mirrors the watch stream: every change event carries the whole new object.
const sessions = new Map(), plans = new Map(), todos = new Map();
let revision = 0;

const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};

// The HTML list of docs/rules.md (Rendering): one CSS class per status.
function taskList(items, textOf) {
  if (!items.length) return el("p", "todo-empty", "No tasks");
  const ul = el("ul", "todo-list");
  for (const item of items) {
    const cls = { completed: "todo-done", in_progress: "todo-active", pending: "todo-pending", cancelled: "todo-done todo-cancelled" }[item.status] || "todo-pending";
    const icon = { completed: ["todo-check", "✓"], in_progress: ["todo-arrow", "▶"], pending: ["todo-circle", "○"], cancelled: ["todo-cross", "✗"] }[item.status] || ["todo-circle", "○"];
    const li = el("li", "todo-item " + cls);
    li.append(el("span", icon[0], icon[1]), el("span", "todo-text", textOf(item)));
    if (item.priority) li.append(el("span", "priority", item.priority));
    ul.append(li);
  }
  return ul;
}

// State-changing calls carry the token the server put in the page, which a
// page of another site cannot read.
const csrf = document.querySelector('meta[name="csrf-token"]').content;

async function decide(id, verb) {
  const body = verb === "reject" ? { reason: prompt("Why reject this plan?") || "" } : { approver: "dashboard" };
  const r = await fetch(`/api/sessions/${encodeURIComponent(id)}/${verb}`, {
    method: "POST", headers: { "content-type": "application/json", "x-csrf-token": csrf }, body: JSON.stringify(body),
  });
  if (!r.ok) alert((await r.json()).error);
}

function ago(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  return s < 60 ? `${s}s` : s < 3600 ? `${Math.floor(s / 60)}m` : s < 86400 ? `${Math.floor(s / 3600)}h` : `${Math.floor(s / 86400)}d`;
}

function sessionCard(id, byParent) {
  const s = sessions.get(id), p = plans.get(id);
  const card = el("div", "session");
  card.dataset.session = id;
  const head = el("div", "session-head");
  head.append(el("span", "session-id", id));
  if (s.agent_id) head.append(el("span", "agent", s.agent_id));
  if (p && p.source === "observed") head.append(el("span", "badge observed", "observed"));
  const mode = p ? p.mode : "normal";
  if (mode !== "normal") head.append(el("span", "badge " + mode, mode.replace("_", " ")));
  const lease = s.lease;
  if (lease) {
    // The agent's liveness, and how long since its last sign of life.
    const seen = lease.last_seen_time ? ago(Date.now() - Date.parse(lease.last_seen_time)) : "";
    head.append(el("span", "badge liveness liveness-" + lease.state, lease.state.toUpperCase() + (seen ? ` · seen ${seen} ago` : "")));
    if (lease.state === "lost") card.classList.add("lost");
  }
  const items = p ? p.plan : [];
  const done = items.filter(i => i.status === "completed").length;
  head.append(el("span", "progress", items.length ? `${done}/${items.length}` : ""));
  card.append(head);
  if (p && p.explanation) card.append(el("p", "explanation", p.explanation));
  card.append(taskList(items, i => i.step));
  const pending = p && p.status && p.status.pending_plan;
  if (mode === "awaiting_approval" && pending) {
    const box = el("div", "approval");
    box.append(el("div", "summary", `Plan ${pending.plan_id}: ${pending.plan.summary}`));
    const ol = el("ol");
    for (const st of pending.plan.steps) ol.append(el("li", "", st.description));
    box.append(ol);
    const yes = el("button", "approve", "Approve"), no = el("button", "reject", "Reject");
    yes.onclick = () => decide(id, "approve");
    no.onclick = () => decide(id, "reject");
    box.append(yes, document.createTextNode(" "), no);
    card.append(box);
  }
  const kids = (byParent.get(id) || []).sort();
  if (kids.length) {
    const wrap = el("div", "children");
    for (const k of kids) wrap.append(sessionCard(k, byParent));
    card.append(wrap);
  }
  return card;
}

function render() {
  document.getElementById("revision").textContent = `revision ${revision}`;
  const byParent = new Map(), roots = [];
  for (const [id, s] of sessions) {
    const parent = s.parent_session_id;
    if (parent && sessions.has(parent)) {
      if (!byParent.has(parent)) byParent.set(parent, []);
      byParent.get(parent).push(id);
    } else roots.push(id);
  }
  const list = document.getElementById("sessions");
  list.replaceChildren(...(roots.length ? roots.sort().map(r => sessionCard(r, byParent)) : [el("p", "none", "No sessions yet.")]));
  const agents = document.getElementById("todos");
  const cards = [...todos.keys()].sort().map(a => {
    const card = el("div", "agent-card");
    card.dataset.agent = a;
    card.append(el("div", "session-id", a), taskList(todos.get(a).todos, t => t.content));
    return card;
  });
  agents.replaceChildren(...(cards.length ? cards : [el("p", "none", "No todo lists yet.")]));
}

// One event as docs/dashboard.md describes it (the shape every surface
// shows, built from the API's messages).
function apply(e) {
  switch (e.type) {
    case "session_created": case "session_updated": sessions.set(e.session.session_id, e.session); break;
    case "session_deleted": sessions.delete(e.session_id); plans.delete(e.session_id); break;
    case "plan_updated": plans.set(e.plan.session_id, e.plan); break;
    case "todos_updated": case "todos_cleared": todos.set(e.agent_id, e.todos); break;
  }
  revision = Math.max(revision, e.revision);
}

let synced = false;
function connect() {
  const source = new EventSource("/events");
  const live = document.getElementById("live");
  source.addEventListener("change", m => { apply(JSON.parse(m.data)); if (synced) render(); });
  source.addEventListener("synced", m => {
    synced = true; revision = Math.max(revision, Number(m.data)); render();
    live.textContent = "live"; live.classList.add("on");
  });
  source.addEventListener("progress", m => { revision = Math.max(revision, Number(m.data)); render(); });
  source.onerror = () => {
    // Start over from a fresh snapshot: simple and always consistent.
    live.textContent = "reconnecting…"; live.classList.remove("on");
    source.close(); synced = false;
    sessions.clear(); plans.clear(); todos.clear();
    setTimeout(connect, 1000);
  };
}
connect();
