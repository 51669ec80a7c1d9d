// The agentbus web client: sign in, sessions, a live transcript, files.
import { ApiError, SessionStream, call, forgetToken, saveToken, savedToken } from "./api.js";
import { Transcript, el } from "./render.js";
import { Files } from "./files.js";

const $ = (id) => document.getElementById(id);
const state = { sid: null, stream: null, session: null, running: new Set(), queued: [], listTimer: null };

function toast(text, bad = false) {
  const t = $("toast");
  t.textContent = text;
  t.className = `toast${bad ? " bad" : ""}`;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 3500);
}

async function guarded(work) {
  try {
    return await work();
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) { signOut("Your token was refused."); return undefined; }
    toast(err.message || String(err), true);
    return undefined;
  }
}

function show(view) {
  for (const id of ["signin", "list", "session"]) $(id).hidden = id !== view;
  $("signout").hidden = view === "signin";
  $("back").hidden = view !== "session";
  $("conn").hidden = view !== "session";
  document.body.dataset.view = view;
}

function signOut(message) {
  forgetToken();
  leaveSession();
  show("signin");
  $("title").textContent = "agentbus";
  const e = $("signin-error");
  e.hidden = !message;
  e.textContent = message || "";
}

// --- session list ------------------------------------------------------------
function badges(s) {
  const out = [el("span", { class: `badge status-${s.status}`, text: s.status.replace("_", " ") })];
  if (s.queued) out.push(el("span", { class: "badge queued", text: `${s.queued} queued` }));
  out.push(el("span", { class: `badge sandbox sb-${s.sandbox}`, text: `sandbox: ${s.sandbox}` }));
  return out;
}

async function refreshList() {
  const body = await guarded(() => call("GET", "/v1/sessions"));
  if (!body) return;
  const ul = $("sessions");
  ul.replaceChildren(...body.sessions.map((s) => el("li", { class: "session-item", "data-sid": s.session_id },
    el("a", { href: `#/s/${s.session_id}` },
      el("div", { class: "s-title", text: s.title || s.session_id }),
      el("div", { class: "s-meta" }, ...badges(s),
        el("span", { class: "when", text: new Date(s.created_at).toLocaleString() }))))));
  $("empty").hidden = body.sessions.length > 0;
}

function enterList() {
  leaveSession();
  show("list");
  $("title").textContent = "Sessions";
  refreshList();
  state.listTimer = setInterval(refreshList, 5000);
}

// --- one session ---------------------------------------------------------------
const transcript = new Transcript($("transcript"), {
  answer: (rid, option) => guarded(() => call("POST",
    `/v1/sessions/${state.sid}/permissions/${encodeURIComponent(rid)}`, { option })),
});
const files = new Files({ call, guarded, toast, sid: () => state.sid });

function renderHeader() {
  const s = state.session;
  if (!s) return;
  $("title").textContent = s.title || s.session_id;
  const status = $("s-status");
  status.textContent = s.status.replace("_", " ");
  status.className = `badge status-${s.status}`;
  const q = $("s-queued");
  q.hidden = !s.queued;
  q.textContent = `${s.queued} queued`;
  const sb = $("s-sandbox");
  sb.textContent = `sandbox: ${s.sandbox}`;
  sb.className = `badge sandbox sb-${s.sandbox}`;
  $("cancel").hidden = !(s.status === "running" || s.status === "awaiting_permission");
  const closed = s.status === "closed";
  $("prompt").disabled = closed;
  $("send").disabled = closed;
  $("close-session").hidden = closed;
}

// Keeps the header's status and queue up to date from the stream itself.
function fold(ev) {
  const s = state.session;
  if (!s) return;
  const d = ev.data || {};
  s.last_seq = ev.seq;
  switch (ev.type) {
    case "user.prompt": state.queued.push(d.turn_id); break;
    case "turn.started": state.queued = state.queued.filter((t) => t !== d.turn_id); s.status = "running"; break;
    case "permission.requested": s.status = "awaiting_permission"; break;
    case "permission.resolved": s.status = "running"; break;
    case "turn.ended": s.status = "idle"; break;
    case "session.closed": s.status = "closed"; break;
    case "sandbox.state": s.sandbox = d.state; break;
    default: break;
  }
  s.queued = state.queued.length;
}

function leaveSession() {
  clearInterval(state.listTimer);
  if (state.stream) state.stream.close();
  state.stream = null;
  state.sid = null;
  state.session = null;
}

async function enterSession(sid) {
  leaveSession();
  show("session");
  transcript.clear();
  files.reset();
  state.sid = sid;
  state.queued = [];
  const session = await guarded(() => call("GET", `/v1/sessions/${encodeURIComponent(sid)}`));
  if (!session || state.sid !== sid) return;
  state.session = { ...session, status: "idle", queued: 0 };
  state.session.status = session.status === "closed" ? "closed" : "idle";
  renderHeader();
  state.stream = new SessionStream(sid, (ev) => {
    transcript.add(ev);
    fold(ev);
    renderHeader();
  }, (conn) => {
    const c = $("conn");
    c.textContent = conn;
    c.className = `conn ${conn}`;
    if (conn === "denied") toast("This session is not available.", true);
  });
  state.stream.open();
}

async function sendPrompt(ev) {
  ev.preventDefault();
  const box = $("prompt");
  const text = box.value.trim();
  if (!text || !state.sid) return;
  const body = { text, client_msg_id: crypto.randomUUID() };
  box.value = "";
  autosize();
  const ok = await guarded(() => call("POST", `/v1/sessions/${state.sid}/prompt`, body));
  if (!ok) box.value = text;
}

function autosize() {
  const box = $("prompt");
  box.style.height = "auto";
  box.style.height = `${Math.min(box.scrollHeight, 160)}px`;
}

// --- routing and wiring ----------------------------------------------------------
function route() {
  if (!savedToken()) { signOut(); return; }
  const m = location.hash.match(/^#\/s\/([A-Za-z0-9_-]+)$/);
  if (m) enterSession(m[1]);
  else enterList();
}

$("signin-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const token = $("token").value.trim();
  saveToken(token, $("remember").checked);
  try {
    await call("GET", "/v1/sessions");
  } catch (err) {
    signOut(err instanceof ApiError && err.status === 401 ? "That token was refused." : String(err.message));
    return;
  }
  $("token").value = "";
  $("signin-error").hidden = true;
  route();
});

$("create-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const title = $("new-title").value.trim();
  const s = await guarded(() => call("POST", "/v1/sessions", title ? { title } : {}));
  if (s) { $("new-title").value = ""; location.hash = `#/s/${s.session_id}`; }
});

$("close-session").addEventListener("click", async () => {
  if (!state.sid || !confirm("Close this session? Its sandbox is deleted; the log is kept.")) return;
  await guarded(() => call("DELETE", `/v1/sessions/${state.sid}`));
});

$("cancel").addEventListener("click", () => guarded(() => call("POST", `/v1/sessions/${state.sid}/cancel`)));
$("prompt-form").addEventListener("submit", sendPrompt);
$("prompt").addEventListener("input", autosize);
$("prompt").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); $("prompt-form").requestSubmit(); }
});
$("files-toggle").addEventListener("click", () => files.toggle());
$("back").addEventListener("click", () => { location.hash = ""; });
$("signout").addEventListener("click", () => signOut());
window.addEventListener("hashchange", route);
route();
