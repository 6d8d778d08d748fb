"use strict";
// The inbox: what awaits this principal's approval, oldest first, read from
// /api/inbox again whenever the watch stream says something changed.
// Server text only ever goes in through textContent.
const csrf = document.querySelector('meta[name="csrf-token"]').content;

const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};

function ago(seconds) {
  const s = Math.max(0, seconds);
  return s < 60 ? `${s}s` : s < 3600 ? `${Math.floor(s / 60)}m` : s < 86400 ? `${Math.floor(s / 3600)}h` : `${Math.floor(s / 86400)}d`;
}

async function decide(item, verb) {
  const body = verb === "reject" ? { reason: prompt("Why reject this?") || "" } : { approver: "dashboard" };
  const base = `/api/sessions/${encodeURIComponent(item.session_id)}`;
  const path = item.kind === "modification"
    ? `${base}/modifications/${item.modification.modification_id}/${verb}`
    : `${base}/${verb}`;
  const r = await fetch(path, {
    method: "POST", headers: { "content-type": "application/json", "x-csrf-token": csrf }, body: JSON.stringify(body),
  });
  if (!r.ok) alert((await r.json()).error);
  refresh();
}

function render(items, revision) {
  document.title = items.length ? `Cairn inbox (${items.length})` : "Cairn inbox";
  document.getElementById("revision").textContent = `revision ${revision}`;
  const box = document.getElementById("inbox");
  box.replaceChildren();
  if (!items.length) {
    box.append(el("p", "none", "Nothing awaits your approval."));
    return;
  }
  for (const item of items) {
    const card = el("div", "session inbox-item");
    card.dataset.session = item.session_id;
    card.dataset.kind = item.kind;
    const head = el("div", "session-head");
    head.append(el("span", "session-id", item.session_id));
    if (item.agent_id) head.append(el("span", "agent", item.agent_id));
    head.append(el("span", "badge awaiting_approval", item.kind), el("span", "meta", `waiting ${ago(item.waiting_seconds)}`));
    card.append(head);
    if (item.goal) card.append(el("p", "goal", item.goal));
    const asks = item.kind === "modification"
      ? `Step ${item.modification.step_id}: ${item.modification.new_description} (${item.modification.reason})`
      : `${item.plan_id}: ${item.summary}`;
    card.append(el("p", "asks", asks));
    if (item.deadline) card.append(el("p", "meta deadline", `deadline: ${item.deadline.text}`));
    const approve = el("button", "approve", "Approve"), reject = el("button", "reject", "Reject");
    approve.onclick = () => decide(item, "approve");
    reject.onclick = () => decide(item, "reject");
    card.append(approve, reject);
    box.append(card);
  }
}

let inFlight = false, again = false;
async function refresh() {
  if (inFlight) { again = true; return; }
  inFlight = true;
  try {
    const r = await fetch("/api/inbox");
    if (r.ok) {
      const body = await r.json();
      render(body.items, body.revision);
    }
  } finally {
    inFlight = false;
    if (again) { again = false; refresh(); }
  }
}

const live = document.getElementById("live");
const source = new EventSource("/events");
source.addEventListener("synced", () => { live.textContent = "live"; live.classList.add("on"); refresh(); });
source.addEventListener("change", () => refresh());
source.onerror = () => { live.textContent = "reconnecting…"; live.classList.remove("on"); };
refresh();
