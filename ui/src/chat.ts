// The chat window: the chat list, the open chat's messages with the live reply streaming in, the
// composer, and Settings. Every decision is the service's; this page shows and forwards.

import { api, message, onAttachAgain, onOpenSettings, onThemeChanged } from "./api";
import {
  applyEvent,
  canReadAloud,
  composerBlock,
  emptyView,
  endingNote,
  isReplying,
  messages,
  toolCallLine,
  type ChatView,
  type ConsentCard,
  type Message,
} from "./chatState";
import { h, byId } from "./dom";
import { showReply, whenMarkdown } from "./lazyMarkdown";
import { linkTarget } from "./links";
import { wireMemory, wireRequestView } from "./memoryPanel";
import { openModels, refreshOffer, watchDownloads, wireModels } from "./modelsPanel";
import { openSettings, wireSettings } from "./settingsForm";
import { openTools, wireTools } from "./toolsPanel";
import { showStartupProblem } from "./startupProblem";
import { applyTheme } from "./theme";
import type { Activity, Chat, Consent, ReplyEvent } from "./types";

let chats: Chat[] = [];
let activity: Activity = { replying: [], queued: 0, conversation: false, speaking: false, generation: -1 };
let view: ChatView = emptyView(null);
let loading = false;
let loadError: string | null = null;
/** Bumped on each chat switch, so a late answer for an old chat is dropped. */
let attachSeq = 0;
let frame = 0;

const list = byId("chat-list");
const messagesEl = byId("messages");
const title = byId("chat-title");
const question = byId<HTMLTextAreaElement>("question");
const send = byId<HTMLButtonElement>("send");
const stop = byId<HTMLButtonElement>("stop");
const note = byId("composer-note");
const problem = byId("problem");

async function init(): Promise<void> {
  const unusable = await api.startupProblem();
  if (unusable) {
    showStartupProblem(unusable);
    return;
  }
  document.addEventListener("click", (e) => {
    const url = linkTarget(e.target);
    if (url) {
      // Links open in the system browser, never in the webview.
      e.preventDefault();
      api.openLink(url).catch((err) => showNote(message(err)));
    }
  });
  byId("new-chat").addEventListener("click", () => void select(null));
  byId("start-afresh").addEventListener("click", () => void startAfresh());
  byId("show-orb").addEventListener("click", () => void api.showWindow("orb"));
  byId("open-settings").addEventListener("click", () => void openSettings());
  wireMemory((chat) => void select(chat));
  wireRequestView(() => view.chat);
  byId("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    void submit();
  });
  question.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      void submit();
    }
  });
  stop.addEventListener("click", () => {
    if (view.chat !== null) api.stop(view.chat).catch((err) => showNote(message(err)));
  });
  document.addEventListener("keydown", (e) => {
    if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === "n") {
      e.preventDefault();
      void select(null);
    }
  });
  const backendChanged = async () => {
    const info = await api.appInfo();
    showInfo(info.backend, info.model, info.problem);
    await refreshOffer(info.model);
    // A Settings form open meanwhile shows the model that answers now, not the one before.
    if (byId<HTMLDialogElement>("settings").open) await openSettings();
  };
  wireSettings(backendChanged);
  byId("open-models").addEventListener("click", () => {
    byId<HTMLDialogElement>("settings").close();
    void openModels();
  });
  wireModels(backendChanged);
  wireTools();
  byId("open-tools").addEventListener("click", () => {
    byId<HTMLDialogElement>("settings").close();
    void openTools();
  });
  await onAttachAgain(() => void attachAll());
  await onOpenSettings(() => void openSettings());
  await onThemeChanged((theme) => applyTheme(theme));

  try {
    const info = await api.appInfo();
    applyTheme(info.theme);
    showInfo(info.backend, info.model, info.problem);
    await refreshOffer(info.model);
  } catch (err) {
    showProblem(message(err));
  }
  await attachAll(true);
  question.focus();
}

function showInfo(backend: string, model: string, problemText: string | null): void {
  byId("backend-label").textContent = `${backend} · ${model}`;
  showProblem(problemText);
}

function showProblem(text: string | null): void {
  problem.hidden = !text;
  problem.textContent = text ? `${text}` : "";
}

/** Attaches (again): the activity, the model download, the chat list, and the open chat from its reply's first event. */
async function attachAll(first = false): Promise<void> {
  await api.watchActivity(onActivity).catch((err) => showProblem(message(err)));
  await watchDownloads().catch((err) => showProblem(message(err)));
  await refreshChats();
  if (first) {
    await select(chats[0]?.id ?? null);
  } else {
    await select(view.chat);
  }
}

function onActivity(next: Activity): void {
  const listChanged = next.generation !== activity.generation;
  activity = next;
  if (listChanged) void refreshChats();
  else renderList();
}

async function refreshChats(): Promise<void> {
  try {
    chats = await api.listChats();
  } catch (err) {
    showProblem(`Cannot read the chats: ${message(err)}`);
  }
  renderList();
  if (view.chat !== null) {
    const chat = chats.find((c) => c.id === view.chat);
    if (chat) title.textContent = chat.title;
    else void select(null); // deleted elsewhere
  }
}

async function select(chat: number | null): Promise<void> {
  const seq = ++attachSeq;
  view = emptyView(chat);
  loadError = null;
  loading = chat !== null;
  title.textContent = chat === null ? "New chat" : (chats.find((c) => c.id === chat)?.title ?? "Chat");
  render();
  if (chat === null) return;
  try {
    const records = await api.records(chat);
    if (seq !== attachSeq) return;
    view = { ...view, records };
    loading = false;
    await api.attachChat(chat, (event) => {
      if (seq === attachSeq) onEvent(event);
    });
  } catch (err) {
    if (seq !== attachSeq) return;
    loading = false;
    loadError = message(err);
  }
  render();
}

function onEvent(event: ReplyEvent): void {
  const result = applyEvent(view, event);
  view = result.view;
  if (result.reload) reloadRecords();
  // Deltas re-render at most once a frame; anything else at once.
  if (event.type === "delta") scheduleRender();
  else render();
}

/** Reads the open chat's records again, and shows them if that chat is still the one open. */
function reloadRecords(): void {
  if (view.chat === null) return;
  const chat = view.chat;
  const seq = attachSeq;
  api
    .records(chat)
    .then((records) => {
      if (seq === attachSeq) {
        view = { ...view, records };
        scheduleRender();
      }
    })
    .catch((err) => showNote(message(err)));
}

function scheduleRender(): void {
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    render();
  });
}

async function submit(): Promise<void> {
  const text = question.value;
  if (!text.trim() || composerBlock(view)) return;
  send.disabled = true;
  try {
    const asked = await api.ask(view.chat, text);
    question.value = "";
    showNote(null);
    if (asked.chat !== view.chat) {
      await refreshChats();
      await select(asked.chat);
    } else {
      const records = await api.records(asked.chat);
      view = { ...view, records };
      render();
    }
  } catch (err) {
    showNote(message(err));
  } finally {
    send.disabled = false;
    renderComposer();
  }
}

let noteText: string | null = null;
function showNote(text: string | null): void {
  noteText = text;
  renderComposer();
}

function render(): void {
  if (frame) {
    cancelAnimationFrame(frame);
    frame = 0;
  }
  renderList();
  renderMessages();
  renderComposer();
}

function renderList(): void {
  const items = chats.map((chat) => chatItem(chat));
  if (chats.length === 0) {
    items.push(h("p", { class: "empty-list muted" }, "No chats yet. Ask something to start one."));
  }
  list.replaceChildren(...items);
}

function chatItem(chat: Chat): HTMLElement {
  const replying = activity.replying.includes(chat.id);
  const open = () => void select(chat.id);
  const name = h("button", {
    class: "chat-name",
    type: "button",
    title: chat.title,
    "aria-current": chat.id === view.chat ? "page" : "false",
  }, chat.title);
  name.addEventListener("click", open);
  const marks: HTMLElement[] = [];
  if (replying) marks.push(h("span", { class: "dot replying", title: "Replying", "aria-label": "replying" }));
  else if (chat.last_reply === "failed" || chat.last_reply === "interrupted")
    marks.push(h("span", { class: "dot failed", title: `Last reply ${chat.last_reply}`, "aria-label": chat.last_reply }));
  const rename = h("button", { class: "icon", type: "button", title: "Rename", "aria-label": `Rename ${chat.title}` }, "✎");
  rename.addEventListener("click", () => startRename(item, chat));
  const remove = h("button", { class: "icon", type: "button", title: "Delete", "aria-label": `Delete ${chat.title}` }, "🗑");
  remove.addEventListener("click", () => void confirmDelete(chat));
  const item = h("div", {
    class: `chat-item${chat.id === view.chat ? " selected" : ""}`,
    "data-chat": String(chat.id),
    "data-replying": String(replying),
  }, name, ...marks, rename, remove);
  return item;
}

function startRename(item: HTMLElement, chat: Chat): void {
  const input = h("input", { class: "rename", value: chat.title, "aria-label": "New title" }) as HTMLInputElement;
  let done = false;
  const finish = async (save: boolean) => {
    if (done) return;
    done = true;
    const text = input.value.trim();
    if (save && text && text !== chat.title) {
      try {
        await api.renameChat(chat.id, text);
      } catch (err) {
        showNote(message(err));
      }
    }
    await refreshChats();
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") void finish(true);
    if (e.key === "Escape") void finish(false);
  });
  input.addEventListener("blur", () => void finish(true));
  item.replaceChildren(input);
  input.focus();
  input.select();
}

async function startAfresh(): Promise<void> {
  const chat = view.chat;
  if (chat === null) return;
  try {
    await api.startAfresh(chat);
    await refreshChats();
    showNote(null);
  } catch (err) {
    showNote(message(err));
  }
  render();
}

async function confirmDelete(chat: Chat): Promise<void> {
  const dialog = byId<HTMLDialogElement>("confirm");
  byId("confirm-title").textContent = "Delete chat?";
  byId("confirm-text").textContent = `“${chat.title}” and everything in it will be deleted. This cannot be undone.`;
  dialog.returnValue = "";
  dialog.showModal();
  await new Promise<void>((resolve) => dialog.addEventListener("close", () => resolve(), { once: true }));
  if (dialog.returnValue !== "ok") return;
  try {
    await api.deleteChat(chat.id);
    if (view.chat === chat.id) await select(null);
    await refreshChats();
  } catch (err) {
    showNote(message(err));
  }
}

function renderMessages(): void {
  const stick = messagesEl.scrollHeight - messagesEl.scrollTop - messagesEl.clientHeight < 40;
  if (loading) {
    messagesEl.replaceChildren(h("p", { class: "placeholder muted" }, "Loading the chat…"));
    return;
  }
  if (loadError) {
    const again = h("button", { type: "button" }, "Try again");
    again.addEventListener("click", () => void select(view.chat));
    messagesEl.replaceChildren(
      h("div", { class: "placeholder" }, h("p", { class: "error-text" }, `Cannot open this chat: ${loadError}`), again),
    );
    return;
  }
  const since = chats.find((c) => c.id === view.chat)?.history_since ?? null;
  const shown = messages(view, since);
  if (shown.length === 0) {
    messagesEl.replaceChildren(
      h("div", { class: "placeholder empty" },
        h("p", { class: "hello" }, "How can I help?"),
        h("p", { class: "muted" }, "Type a question below. Replies keep going if you switch chats or close the window."),
      ),
    );
    return;
  }
  const keep = new Map<string, { text: string; el: HTMLElement }>();
  const els = shown.map((m) => {
    // A stored message does not change: its element (and any selection in it) is kept.
    const cached = rendered.get(m.key);
    // (An action line changes when its fact is forgotten.)
    const stamp = m.role === "action" ? `${m.text}\u0001${m.fact ?? ""}` : m.text;
    const el = !m.live && cached && cached.text === stamp ? cached.el : messageEl(m);
    keep.set(m.key, { text: m.live ? "\u0000" : stamp, el });
    return el;
  });
  rendered = keep;
  messagesEl.replaceChildren(...els);
  if (stick) messagesEl.scrollTop = messagesEl.scrollHeight;
}

let rendered = new Map<string, { text: string; el: HTMLElement }>();

function messageEl(m: Message): HTMLElement {
  if (m.role === "afresh") return h("div", { class: "afresh", role: "separator", "data-key": m.key }, m.text);
  if (m.role === "action") return actionEl(m);
  const body = h("div", { class: "body" });
  if (m.role === "user") {
    body.textContent = m.text;
  } else if (!showReply(body, m.text)) {
    whenMarkdown(() => {
      // Shown as plain text so far: render it again now that Markdown is here.
      rendered.clear();
      scheduleRender();
    });
  }
  const el = h("article", { class: `message ${m.role}`, "data-key": m.key }, body);
  if (canReadAloud(m) && m.reply !== undefined && m.reply !== null) {
    const reply = m.reply;
    const read = h("button", { type: "button", class: "read-aloud", title: "Read this reply aloud" }, "Read aloud");
    read.addEventListener("click", () => {
      api.readAloud(reply).catch((err) => showNote(message(err)));
    });
    el.append(h("div", { class: "message-actions" }, read));
  }
  const live = m.live;
  if (live) {
    el.dataset.reply = String(live.reply);
    el.dataset.state = live.state;
    if (!live.consent && (live.state === "started" || (live.state === "running" && live.text === ""))) {
      el.append(h("p", { class: "status muted" }, "Thinking…"));
    }
    if (live.waiting) el.append(h("p", { class: "status muted" }, live.waiting));
    if (live.consent) el.append(consentEl(live.reply, live.consent));
    if (live.retrying) el.append(h("p", { class: "status muted" }, live.retrying));
    const ending = endingNote(live);
    if (ending) {
      const kind = live.state === "failed" || live.state === "interrupted" ? "error-text" : "muted";
      const noteEl = h("p", { class: `status ${kind}` }, ending);
      if ((live.state === "failed" || live.state === "interrupted") && view.chat !== null) {
        const chat = view.chat;
        const again = h("button", { type: "button", class: "retry" }, "Try again");
        again.addEventListener("click", () => {
          api.retry(chat).catch((err) => showNote(message(err)));
        });
        noteEl.append(" ", again);
      }
      el.append(noteEl);
    }
  }
  return el;
}

/** The action card of a tool call waiting for the user: what would run, with what, and the
 *  three answers. Nothing runs until one is pressed; Stop ends the wait. */
function consentEl(reply: number, card: ConsentCard): HTMLElement {
  const answer = (consent: Consent, label: string, cls: string) => {
    const b = h("button", { type: "button", class: cls, "data-consent": consent }, label) as HTMLButtonElement;
    b.addEventListener("click", async () => {
      for (const other of el.querySelectorAll("button")) (other as HTMLButtonElement).disabled = true;
      try {
        if (!(await api.consent(reply, card.call, consent))) showNote("That tool call no longer waits for an answer.");
      } catch (err) {
        showNote(message(err));
      }
    });
    return b;
  };
  const el = h(
    "section",
    { class: "consent-card", role: "group", "aria-label": "Allow this tool call?", "data-call": card.call },
    h("p", { class: "consent-what" }, "Jarvis wants to use ", h("strong", {}, card.tool), ` from ${card.server}`),
    h("pre", { class: "consent-arguments" }, card.arguments),
    h(
      "div",
      { class: "consent-answers" },
      answer("once", "Allow once", "primary"),
      answer("always", "Always allow this tool", ""),
      answer("deny", "Deny", ""),
    ),
  );
  return el;
}

/** An action line: a tool call (folded: its arguments and result unfold), or a fact stored
 *  ("Remembered: …") with Undo while it is remembered; once it is forgotten the store keeps the
 *  line without the fact's words. */
function actionEl(m: Message): HTMLElement {
  const call = toolCallLine(m.text);
  if (call) {
    const details = h(
      "details",
      { class: "action-line tool-call", "data-key": m.key },
      h("summary", { class: "action-text" }, call.summary),
      h("pre", { class: "tool-call-detail" }, call.detail),
    );
    return details;
  }
  const el = h("div", { class: "action-line", role: "note", "data-key": m.key }, h("span", { class: "action-text" }, m.text));
  const fact = m.fact;
  if (fact === undefined || fact === null) {
    // Forgotten: the line says so, without the fact's words.
    el.classList.add("undone");
    return el;
  }
  const undo = h("button", { type: "button", class: "link undo", title: "Forget this fact again" }, "Undo") as HTMLButtonElement;
  undo.addEventListener("click", async () => {
    undo.disabled = true;
    try {
      await api.removeFact(fact);
    } catch (err) {
      // Forgotten already (in the Memory panel): the line is read again either way.
      showNote(message(err));
    }
    reloadRecords();
  });
  el.append(" ", undo);
  return el;
}

function renderComposer(): void {
  const replying = isReplying(view);
  const block = composerBlock(view);
  question.disabled = replying;
  send.hidden = replying;
  stop.hidden = !replying;
  const afresh = byId<HTMLButtonElement>("start-afresh");
  afresh.hidden = view.chat === null || view.records.length === 0;
  afresh.disabled = replying;
  const text = noteText ?? block ?? (view.live?.waiting ?? "");
  note.textContent = text;
  note.classList.toggle("error-text", noteText !== null);
}

void init();
