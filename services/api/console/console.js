// memstream console: plain JS, no build step. Everything the API returns is put on the page with
// textContent (never innerHTML), so a memory or a dead letter can hold any text without running.
"use strict";

const store = window.sessionStorage;
const state = { tenant: null, admin: false, user: null, memory: null, live: null };
const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function say(message) { $("status").textContent = message; }

async function api(method, path, params, body) {
  const url = new URL(path, window.location.origin);
  for (const [k, v] of Object.entries(params || {})) if (v !== "" && v != null) url.searchParams.set(k, v);
  const headers = { authorization: "Bearer " + store.getItem("memstream-key") };
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (response.status === 401) { logout("The key was refused; log in again."); throw new Error("unauthenticated"); }
  const data = response.headers.get("content-type")?.includes("json") ? await response.json() : null;
  if (!response.ok) {
    const message = data?.error?.message || response.statusText;
    say(`${method} failed: ${message}`);
    throw new Error(message);
  }
  return data;
}

function show(view) {
  for (const id of ["login-view", "users-view", "user-view", "memory-view", "ops-view"]) $(id).hidden = id !== view;
  $("main").focus();
}

function userPath(user) { return "/v1/users/" + encodeURIComponent(user); }
function scope() { return { tenant_id: state.tenant }; }

async function login(event) {
  event.preventDefault();
  store.setItem("memstream-key", $("api-key").value.trim());
  $("api-key").value = "";
  const tenant = $("tenant").value.trim();
  if (tenant) store.setItem("memstream-tenant", tenant); else store.removeItem("memstream-tenant");
  await start();
}

function logout(message) {
  stopLive();
  store.removeItem("memstream-key");
  store.removeItem("memstream-tenant");
  $("nav").hidden = true;
  show("login-view");
  say(message || "Logged out.");
}

async function start() {
  if (!store.getItem("memstream-key")) { show("login-view"); return; }
  try {
    const listed = await api("GET", "/v1/users", { tenant_id: store.getItem("memstream-tenant") || "" });
    state.tenant = listed.tenant_id;
    state.admin = await api("GET", "/v1/keys").then(() => true, () => false);
    document.body.classList.toggle("is-admin", state.admin);
    $("nav").hidden = false;
    renderUsers(listed.users);
    say(`Tenant ${state.tenant}: ${listed.users.length} users.`);
  } catch (err) { /* said already */ }
}

function counts(map) { return Object.entries(map).map(([k, n]) => `${k} ${n}`).join(", "); }

function renderUsers(users) {
  const body = $("users").tBodies[0];
  body.replaceChildren();
  for (const u of users) {
    const row = body.insertRow();
    const link = el("button", u.user_id, "link");
    link.type = "button";
    link.addEventListener("click", () => openUser(u.user_id));
    row.insertCell().append(link);
    row.insertCell().textContent = u.total;
    row.insertCell().textContent = counts(u.by_status);
    row.insertCell().textContent = counts(u.by_type);
  }
  show("users-view");
}

async function openUser(user) {
  state.user = user;
  $("user-title").textContent = `User ${user}`;
  $("results").replaceChildren();
  $("changes").replaceChildren();
  show("user-view");
  await listMemories();
  startLive();
}

function localTime(id) {
  const v = $(id).value;
  return v ? new Date(v).toISOString() : "";
}

async function listMemories(event) {
  if (event) event.preventDefault();
  const params = {
    ...scope(), type: $("f-type").value, status: $("f-status").value, layer: $("f-layer").value,
    since: localTime("f-since"), until: localTime("f-until"), as_of: localTime("f-asof"),
  };
  const found = await api("GET", userPath(state.user) + "/memories", params);
  const list = $("memories");
  list.replaceChildren();
  for (const m of found.memories) list.append(memoryCard(m.id, m.text, `${m.type} · ${m.status} · ${m.observed_at}`));
  say(`${found.memories.length} memories.`);
}

function memoryCard(id, text, meta, extra) {
  const item = el("li", null, "card");
  const open = el("button", text, "link memory-link");
  open.type = "button";
  open.addEventListener("click", () => openMemory(id));
  item.append(open, el("p", meta, "meta"));
  if (extra) item.append(extra);
  return item;
}

async function search(event) {
  event.preventDefault();
  const body = { tenant_id: state.tenant, user_id: state.user, query: $("query").value };
  const found = await api("POST", "/v1/recall", {}, body);
  const list = $("results");
  list.replaceChildren();
  for (const m of found.memories || []) {
    const signals = el("dl", null, "signals");
    for (const [name, value] of Object.entries(m.signals)) signals.append(el("dt", name), el("dd", value.toFixed(3)));
    list.append(memoryCard(m.id, m.text, `${m.type} · ${m.layer} · score ${m.score.toFixed(3)}`, signals));
  }
  say(`${(found.memories || []).length} recalled.`);
}

async function openMemory(id) {
  const detail = await api("GET", `${userPath(state.user)}/memories/${encodeURIComponent(id)}`, scope());
  state.memory = detail.memory;
  const m = detail.memory;
  $("memory-text").textContent = m.text;
  const meta = $("memory-meta");
  meta.replaceChildren();
  for (const [k, v] of [["id", m.id], ["type", m.type], ["layer", detail.layer], ["status", m.status],
    ["observed", m.observed_at], ["importance", m.importance], ["session", m.source.session_id]]) {
    meta.append(el("dt", k), el("dd", v));
  }
  const sources = $("sources");
  sources.replaceChildren();
  for (const s of detail.sources) sources.append(el("li", `${s.ts} · session ${s.session_id} · ${s.role}: ${s.text}`));
  if (!detail.sources.length) sources.append(el("li", "No archived source turns."));
  const history = await api("GET", `${userPath(state.user)}/memories/${encodeURIComponent(id)}/history`, scope());
  const chain = $("history");
  chain.replaceChildren();
  for (const h of history.chain) chain.append(el("li", `${h.status} · ${h.observed_at} · ${h.text}`));
  $("correction").value = m.text;
  show("memory-view");
}

async function correct(event) {
  event.preventDefault();
  const path = `${userPath(state.user)}/memories/${encodeURIComponent(state.memory.id)}`;
  await api("PATCH", path, {}, { tenant_id: state.tenant, text: $("correction").value });
  say("Correction accepted; it shows in live changes once applied.");
  show("user-view");
}

async function remove() {
  if (!window.confirm("Delete this memory?")) return;
  await api("DELETE", `${userPath(state.user)}/memories/${encodeURIComponent(state.memory.id)}`, scope());
  say("Delete accepted.");
  show("user-view");
}

async function forget() {
  if (!window.confirm(`Forget user ${state.user} and everything memory holds for them?`)) return;
  await api("DELETE", userPath(state.user), scope());
  say("Forget accepted.");
}

async function exportUser() {
  const doc = await api("GET", userPath(state.user) + "/export", scope());
  const blob = new Blob([JSON.stringify(doc, null, 2)], { type: "application/json" });
  const link = el("a", "download");
  link.href = URL.createObjectURL(blob);
  link.download = `${state.user}.json`;
  link.click();
  URL.revokeObjectURL(link.href);
}

// Live changes: fetch() with the Authorization header and a stream reader (EventSource cannot send headers).
function stopLive() { if (state.live) { state.live.abort(); state.live = null; } }

async function startLive() {
  stopLive();
  const abort = new AbortController();
  state.live = abort;
  const url = new URL(userPath(state.user) + "/changes", window.location.origin);
  url.searchParams.set("tenant_id", state.tenant);
  try {
    const response = await fetch(url, {
      headers: { authorization: "Bearer " + store.getItem("memstream-key"), accept: "text/event-stream" },
      signal: abort.signal,
    });
    if (!response.ok) { say("Live changes unavailable."); return; }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        onEvent(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
      }
    }
  } catch (err) { if (err.name !== "AbortError") say("Live changes stopped."); }
}

function onEvent(block) {
  let event = "message";
  let data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event: ")) event = line.slice(7);
    else if (line.startsWith("data: ")) data += line.slice(6);
  }
  if (event === "ready") { $("live-title").dataset.ready = "true"; return; }
  if (event !== "change" && event !== "forgotten") return;
  const change = JSON.parse(data);
  const text = event === "forgotten" ? "user forgotten" : `${change.op}: ${change.record.text} (${change.record.status})`;
  const item = el("li", text, "change");
  $("changes").prepend(item);
}

async function refreshLag() {
  const report = await api("GET", "/v1/ops/lag");
  const body = $("lag").tBodies[0];
  body.replaceChildren();
  for (const s of report.stages) {
    const row = body.insertRow();
    row.insertCell().textContent = s.stage;
    row.insertCell().textContent = s.topic;
    row.insertCell().textContent = s.lag === null ? "unknown" : s.lag;
  }
}

async function refreshServing() {
  // /readyz answers 503 with the same body while a check fails: both are worth showing.
  const response = await fetch(new URL("/readyz", window.location.origin));
  const ready = await response.json();
  const failing = Object.entries(ready.checks || {}).filter(([, ok]) => !ok).map(([name]) => name);
  const rebuilding = Object.entries(ready.rebuilding || {})
    .map(([name, lag]) => `${name} (lag ${lag === null ? "unknown" : lag})`).join(", ");
  $("serving").textContent = `Answering from generation ${ready.generation}; `
    + (failing.length ? `not ready: ${failing.join(", ")}` : "all checks ready")
    + (rebuilding ? `; rebuilding: ${rebuilding}` : "; nothing rebuilding") + ".";
}

async function refreshDlq() {
  const found = await api("GET", "/v1/ops/dlq", { limit: 50 });
  const list = $("dlq");
  list.replaceChildren();
  for (const e of found.entries) {
    const item = el("li", null, "card");
    item.append(el("p", `${e.partition}:${e.offset} · ${e.reason} · ${e.state}`, "meta"), el("pre", e.preview));
    list.append(item);
  }
  if (!found.complete) list.append(el("li", "The broker did not return every partition in time: refresh for the rest."));
  else if (!found.entries.length) list.append(el("li", "No dead letters."));
}

async function refreshKeys() {
  const found = await api("GET", "/v1/keys");
  const body = $("keys").tBodies[0];
  body.replaceChildren();
  for (const k of found.keys) {
    const row = body.insertRow();
    for (const v of [k.id, k.name, k.role, k.tenant_id || "operator", k.revoked_at || "no"]) row.insertCell().textContent = v;
    const cell = row.insertCell();
    if (!k.revoked_at) {
      const revoke = el("button", "Revoke", "danger");
      revoke.type = "button";
      revoke.setAttribute("aria-label", `Revoke key ${k.id}`);
      revoke.addEventListener("click", async () => { await api("DELETE", "/v1/keys/" + encodeURIComponent(k.id)); await refreshKeys(); });
      cell.append(revoke);
    }
  }
}

async function createKey(event) {
  event.preventDefault();
  const made = await api("POST", "/v1/keys", scope(), { role: $("key-role").value, name: $("key-name").value });
  $("new-key-value").textContent = `New key (shown once): ${made.key}`;
  await refreshKeys();
}

async function openOps() {
  stopLive();
  show("ops-view");
  await Promise.allSettled([refreshServing(), refreshKeys(), refreshLag(), refreshDlq()]);
}

function quietly(handler) { return (...args) => handler(...args).catch(() => {}); }

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", quietly(login));
  $("logout").addEventListener("click", () => logout());
  document.querySelector('[data-view="users"]').addEventListener("click", () => { stopLive(); quietly(start)(); });
  document.querySelector('[data-view="ops"]').addEventListener("click", quietly(openOps));
  $("search").addEventListener("submit", quietly(search));
  $("filters").addEventListener("submit", quietly(listMemories));
  $("correct").addEventListener("submit", quietly(correct));
  $("delete").addEventListener("click", quietly(remove));
  $("forget").addEventListener("click", quietly(forget));
  $("export").addEventListener("click", quietly(exportUser));
  $("back").addEventListener("click", () => show("user-view"));
  $("lag-refresh").addEventListener("click", quietly(refreshLag));
  $("dlq-refresh").addEventListener("click", quietly(refreshDlq));
  $("new-key").addEventListener("submit", quietly(createKey));
  quietly(start)();
});
