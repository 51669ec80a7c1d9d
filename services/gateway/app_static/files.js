// The files panel: browse the workspace, view, download and upload files.
import { el } from "./render.js";

const TEXT_LIMIT = 512 * 1024;

function join(dir, name) { return dir ? `${dir}/${name}` : name; }
function url(sid, path) {
  return `/v1/sessions/${encodeURIComponent(sid)}/files/${path.split("/").map(encodeURIComponent).join("/")}`;
}

export class Files {
  constructor(deps) {
    this.deps = deps; // { call, guarded, toast, sid }
    this.dir = "";
    this.viewing = null;
    const $ = (id) => document.getElementById(id);
    this.panel = $("files");
    this.list = $("files-list");
    $("upload").addEventListener("change", (ev) => this.upload(ev.target));
    $("file-close").addEventListener("click", () => { $("file-view").hidden = true; });
    $("file-download").addEventListener("click", () => this.download());
  }

  reset() {
    this.dir = "";
    this.panel.hidden = true;
    document.getElementById("file-view").hidden = true;
  }

  toggle() {
    this.panel.hidden = !this.panel.hidden;
    if (!this.panel.hidden) this.browse(this.dir);
  }

  async browse(dir) {
    const { call, guarded, sid } = this.deps;
    const body = await guarded(() => call("GET", url(sid(), dir)));
    if (!body) return;
    this.dir = dir;
    document.getElementById("files-path").textContent = `/workspace/${dir}`;
    const items = [];
    if (dir) {
      const up = dir.split("/").slice(0, -1).join("/");
      items.push(el("li", { class: "dir" }, el("button", { class: "link", text: "..", onclick: () => this.browse(up) })));
    }
    const entries = [...body.entries].sort((a, b) => (a.type === "dir") === (b.type === "dir") ? a.name.localeCompare(b.name) : a.type === "dir" ? -1 : 1);
    for (const e of entries) {
      const path = join(dir, e.name);
      const open = e.type === "dir" ? () => this.browse(path) : () => this.view(path);
      items.push(el("li", { class: e.type, "data-path": path },
        el("button", { class: "link", text: e.type === "dir" ? `${e.name}/` : e.name, onclick: open }),
        el("span", { class: "size", text: e.type === "dir" ? "" : `${e.size} B` })));
    }
    this.list.replaceChildren(...items);
  }

  async fetchBlob(path) {
    const { call, guarded, sid } = this.deps;
    const resp = await guarded(() => call("GET", url(sid(), path), undefined, true));
    return resp ? resp.blob() : null;
  }

  async view(path) {
    const blob = await this.fetchBlob(path);
    if (!blob) return;
    this.viewing = { path, blob };
    document.getElementById("file-name").textContent = path;
    const pre = document.getElementById("file-body");
    const text = blob.size <= TEXT_LIMIT ? await blob.text() : "";
    pre.textContent = blob.size > TEXT_LIMIT || text.includes("\u0000") ? `(${blob.size} bytes; download to open)` : text;
    document.getElementById("file-view").hidden = false;
  }

  download() {
    if (!this.viewing) return;
    const a = el("a", { href: URL.createObjectURL(this.viewing.blob), download: this.viewing.path.split("/").pop() });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  }

  async upload(input) {
    const file = input.files[0];
    input.value = "";
    if (!file) return;
    const { call, guarded, toast, sid } = this.deps;
    const path = join(this.dir, file.name);
    const ok = await guarded(() => call("PUT", url(sid(), path), file));
    if (ok) { toast(`Uploaded ${path} (${ok.size} B)`); this.browse(this.dir); }
  }
}
