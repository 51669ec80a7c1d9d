// The transcript: one element per event, appended in seq order (data-seq on each);
// deltas join the open message, updates and results join their tool card.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v);
  }
  for (const c of children) if (c) node.append(c);
  return node;
}

const OPTIONS = [
  ["allow_once", "Allow once", "primary"],
  ["allow_always", "Always allow", ""],
  ["reject_once", "Reject", "danger"],
  ["reject_always", "Always reject", "danger"],
];

function argsText(args) {
  const parts = Object.entries(args || {}).filter(([k]) => !["content", "old", "new"].includes(k));
  return parts.map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`).join("  ");
}

function diffOf(tool, args) {
  const lines = [];
  if (tool === "edit") {
    for (const l of String(args.old ?? "").split("\n")) lines.push(["del", `- ${l}`]);
    for (const l of String(args.new ?? "").split("\n")) lines.push(["add", `+ ${l}`]);
  } else if (tool === "write") {
    const text = String(args.content ?? "");
    if (text === "") lines.push(["meta", "(empty file)"]);
    for (const l of text.replace(/\n$/, "").split("\n")) if (text) lines.push(["add", `+ ${l}`]);
  } else return null;
  const pre = el("pre", { class: "diff" });
  for (const [cls, text] of lines) pre.append(el("span", { class: cls, text: `${text}\n` }));
  return pre;
}

export class Transcript {
  constructor(root, actions) {
    this.root = root;
    this.actions = actions; // { answer(requestId, option) }
    this.open = null;        // { kind, node } the message/thought deltas extend
    this.tools = new Map();  // call_id -> card parts
    this.asks = new Map();   // request_id -> card
  }

  clear() {
    this.root.replaceChildren();
    this.open = null;
    this.tools.clear();
    this.asks.clear();
  }

  add(ev) {
    const stick = this.root.scrollHeight - this.root.scrollTop - this.root.clientHeight < 80;
    const handler = this[`on_${ev.type.replaceAll(".", "_")}`];
    if (handler) handler.call(this, ev, ev.data || {});
    else this.line(ev, `${ev.type}`, "meta");
    if (stick) this.root.scrollTop = this.root.scrollHeight;
  }

  block(ev, cls, ...children) {
    const node = el("div", { class: `ev ${cls}`, "data-seq": ev.seq, "data-type": ev.type }, ...children);
    this.root.append(node);
    this.open = null;
    return node;
  }

  line(ev, text, cls = "meta") {
    return this.block(ev, cls, el("span", { text }));
  }

  mark(parent, ev, text = "", cls = "") {
    const span = el("span", { class: cls, "data-seq": ev.seq, "data-type": ev.type, text });
    parent.append(span);
    return span;
  }

  on_session_created(ev, d) { this.line(ev, `Session opened${d.title ? `: ${d.title}` : ""}`); }
  on_session_closed(ev, d) { this.line(ev, `Session closed (${d.reason || "deleted"})`, "meta warn"); }
  on_user_prompt(ev, d) { this.block(ev, "user", el("div", { class: "bubble", text: d.text })); }
  on_turn_started(ev) { this.line(ev, "Turn started", "meta turn"); }
  on_turn_cancel_requested(ev) { this.line(ev, "Stop requested…", "meta warn"); }
  on_turn_ended(ev, d) {
    const u = d.usage || {};
    const tokens = u.input_tokens || u.output_tokens ? ` · ${u.input_tokens} in / ${u.output_tokens} out` : "";
    this.line(ev, `Turn ended: ${d.stop_reason}${d.message ? ` — ${d.message}` : ""}${tokens}`,
      `meta turn ${d.stop_reason === "end_turn" ? "" : "warn"}`);
  }

  on_agent_thought_delta(ev, d) {
    if (this.open?.kind !== "thought") {
      const body = el("div", { class: "thought-body" });
      const node = this.block(ev, "thought", el("details", {}, el("summary", { text: "Thinking" }), body));
      node.removeAttribute("data-seq");
      this.open = { kind: "thought", node: body };
    }
    this.mark(this.open.node, ev, d.text);
  }

  on_agent_message_delta(ev, d) {
    if (this.open?.kind !== "message") {
      const bubble = el("div", { class: "bubble streaming" });
      const node = this.block(ev, "agent", bubble);
      node.removeAttribute("data-seq");
      this.open = { kind: "message", node: bubble };
    }
    this.mark(this.open.node, ev, d.text);
  }

  on_sandbox_usage(ev, d) {
    // Billing facts: a quiet line (GET /v1/usage totals them).
    const secs = Number(d.seconds || 0).toFixed(1);
    this.line(ev, `Sandbox ${d.state} for ${secs} s${d.next_state ? ` → ${d.next_state}` : ""}`, "meta usage");
  }

  on_agent_message_discarded(ev, d) {
    // A failed model attempt's deltas are withdrawn; the retry streams the answer
    // again, so the transcript never holds half an answer twice.
    if (this.open?.kind === "message") {
      for (const span of this.open.node.querySelectorAll("span")) span.textContent = "";
      this.open.node.closest(".ev")?.remove();
      this.root.append(...this.open.node.querySelectorAll("span[data-seq]"));
      this.open = null;
    }
    this.line(ev, `Model stream interrupted (${d.cause || "error"}): retrying`, "meta warn");
  }

  on_agent_message(ev, d) {
    if (this.open?.kind === "message") {
      const bubble = this.open.node;
      if (bubble.textContent === d.text) {
        bubble.classList.remove("streaming");
        this.mark(bubble, ev, "", "final");
        this.open = null;
        return;
      }
    }
    const children = [];
    if (d.thought) children.push(el("details", {}, el("summary", { text: "Thinking" }), el("div", { class: "thought-body", text: d.thought })));
    children.push(el("div", { class: "bubble", text: d.text }));
    this.block(ev, "agent", ...children);
  }

  on_tool_call(ev, d) {
    const out = el("pre", { class: "output", hidden: true });
    const status = el("span", { class: "tool-status running", text: "running" });
    const head = el("div", { class: "tool-head" }, el("strong", { text: d.tool }),
      el("code", { class: "args", text: argsText(d.args) }), status);
    const card = this.block(ev, "tool", head);
    const diff = diffOf(d.tool, d.args || {});
    if (d.tool === "bash") card.append(el("pre", { class: "cmd", text: `$ ${d.args?.command ?? ""}` }));
    if (diff) card.append(diff);
    card.append(out);
    this.tools.set(d.call_id, { card, out, status });
  }

  on_tool_update(ev, d) {
    const t = this.tools.get(d.call_id);
    if (!t) { this.line(ev, d.text, "meta"); return; }
    if (d.stream === "status") {
      this.mark(t.card, ev, "", "status-mark");
      t.status.textContent = d.text || "running";
      return;
    }
    t.out.hidden = false;
    t.streamed = true;
    this.mark(t.out, ev, d.text, d.stream === "stderr" ? "stderr" : "");
  }

  on_tool_result(ev, d) {
    const t = this.tools.get(d.call_id);
    if (!t) { this.line(ev, `tool result: ${d.output || d.error || ""}`); return; }
    t.status.textContent = d.ok ? (d.exit_code != null ? `exit ${d.exit_code}` : "ok") : "failed";
    t.status.className = `tool-status ${d.ok ? "ok" : "bad"}`;
    const streamed = Boolean(t.streamed);
    const text = d.error ? `${d.output ? `${d.output}\n` : ""}${d.error}` : streamed ? "" : d.output;
    const span = this.mark(t.out, ev, text, d.ok ? "result" : "stderr");
    if (text) t.out.hidden = false;
    if (d.truncated) span.textContent += `\n… truncated${d.spill_path ? ` (full: ${d.spill_path})` : ""}`;
    if (!t.out.textContent.trim()) t.out.hidden = true;
    this.open = null;
  }

  on_permission_requested(ev, d) {
    const buttons = el("div", { class: "options" });
    for (const [option, label, cls] of OPTIONS) {
      buttons.append(el("button", {
        class: cls, "data-option": option, text: label,
        onclick: () => this.actions.answer(d.request_id, option),
      }));
    }
    const card = this.block(ev, "ask",
      el("div", { class: "ask-head" }, el("strong", { text: `Allow ${d.tool}?` })),
      el("pre", { class: "cmd", text: d.tool === "bash" ? `$ ${d.args?.command ?? ""}` : argsText(d.args) }),
      buttons);
    card.dataset.requestId = d.request_id;
    this.asks.set(d.request_id, card);
  }

  on_permission_resolved(ev, d) {
    const card = this.asks.get(d.request_id);
    if (card) {
      card.classList.add("resolved");
      for (const b of card.querySelectorAll("button")) {
        b.disabled = true;
        if (b.dataset.option === d.option) b.classList.add("chosen");
      }
    }
    this.line(ev, `Answered: ${d.option.replace("_", " ")}`, "meta");
  }

  on_policy_updated(ev, d) { this.line(ev, `Policy: ${d.decision} ${d.tool} for this session`); }
  on_worker_assigned(ev, d) { this.line(ev, `Worker ${d.worker_id} joined`, "meta dim"); }
  on_worker_released(ev, d) { this.line(ev, `Worker ${d.worker_id} left (${d.reason})`, "meta dim"); }
  on_sandbox_state(ev, d) { this.line(ev, `Sandbox ${d.state}${d.reason ? ` (${d.reason})` : ""}`, "meta dim"); }
  on_error(ev, d) { this.line(ev, `Error ${d.code}: ${d.message}`, "meta bad"); }
}
