// The App API from a browser: the device token (browser storage only) and a
// ticketed EventSource that resumes by seq and never delivers a seq twice.

const KEY = "agentbus.token";

export const EVENT_TYPES = [
  "session.created", "session.closed", "session.forked", "user.prompt",
  "turn.started", "turn.cancel_requested", "turn.ended",
  "agent.thought.delta", "agent.message.delta", "agent.message", "agent.message.discarded",
  "tool.call", "tool.update", "tool.result",
  "permission.requested", "permission.resolved", "policy.updated",
  "worker.assigned", "worker.released", "sandbox.state", "sandbox.usage", "error", "message",
];

export function savedToken() {
  return sessionStorage.getItem(KEY) || localStorage.getItem(KEY) || "";
}

export function saveToken(token, remember) {
  forgetToken();
  (remember ? localStorage : sessionStorage).setItem(KEY, token);
}

export function forgetToken() {
  localStorage.removeItem(KEY);
  sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message || code || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

export async function call(method, path, body, raw = false) {
  const headers = { Authorization: `Bearer ${savedToken()}` };
  let payload = body;
  if (body !== undefined && !(body instanceof Blob)) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  }
  const resp = await fetch(path, { method, headers, body: payload });
  if (!resp.ok) {
    let err = {};
    try { err = (await resp.json()).error || {}; } catch { /* not JSON */ }
    throw new ApiError(resp.status, err.code, err.message);
  }
  if (raw) return resp;
  return resp.status === 204 ? null : resp.json();
}

// Follows one session: a fresh one-use ticket per (re)connect, `after=<last seq>`
// so the server resumes exactly, and a seq filter so nothing is shown twice.
export class SessionStream {
  constructor(sid, onEvent, onState) {
    this.sid = sid;
    this.onEvent = onEvent;
    this.onState = onState;
    this.last = 0;
    this.es = null;
    this.closed = false;
    this.delay = 250;
    this.timer = null;
    // A dead network can leave the socket open for minutes: drop it at once and
    // resume from the last seq when the browser is back online.
    this.online = () => this.reconnect(0);
    this.offline = () => this.drop("offline");
    window.addEventListener("online", this.online);
    window.addEventListener("offline", this.offline);
  }

  async open() {
    if (this.closed) return;
    this.onState("connecting");
    let ticket;
    try {
      const path = `/v1/sessions/${encodeURIComponent(this.sid)}/stream-ticket`;
      ticket = (await call("POST", path)).ticket;
    } catch (err) {
      if (err instanceof ApiError && (err.status === 401 || err.status === 404)) {
        this.onState("denied");
        return;
      }
      this.reconnect();
      return;
    }
    if (this.closed) return;
    const q = new URLSearchParams({ ticket, after: String(this.last) });
    const es = new EventSource(`/v1/sessions/${encodeURIComponent(this.sid)}/events?${q}`);
    this.es = es;
    es.onopen = () => { this.delay = 250; this.onState("live"); };
    es.onerror = () => {
      // EventSource would retry with the same (now used) ticket: we reopen.
      if (this.es === es) this.reconnect();
    };
    for (const type of EVENT_TYPES) es.addEventListener(type, (m) => this.deliver(m));
    es.addEventListener("resync", (m) => this.resync(JSON.parse(m.data)));
  }

  deliver(message) {
    // "error" is also EventSource's own (data-less) failure event: not a log event.
    if (typeof message.data !== "string") return;
    const event = JSON.parse(message.data);
    if (typeof event.seq !== "number" || event.seq <= this.last) return;
    this.last = event.seq;
    this.onEvent(event);
  }

  resync(info) {
    // The log before `first_available` is gone from the stream: skip to it.
    if (typeof info.resume_after === "number" && info.resume_after > this.last) {
      this.last = info.resume_after;
    }
  }

  drop(state) {
    if (this.es) { this.es.close(); this.es = null; }
    clearTimeout(this.timer);
    this.onState(state);
  }

  reconnect(delay = this.delay) {
    if (this.es) { this.es.close(); this.es = null; }
    if (this.closed) return;
    if (!navigator.onLine) { this.drop("offline"); return; }
    this.onState("reconnecting");
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.open(), delay);
    this.delay = Math.min(this.delay * 2, 5000);
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    window.removeEventListener("online", this.online);
    window.removeEventListener("offline", this.offline);
    if (this.es) this.es.close();
  }
}
