// The Memory panel: the facts Jarvis remembers about the user (the profile the model sees) —
// listed with the chat each came from, added, edited in place and deleted for real — and the
// summaries of earlier conversations it may recall, each deletable, with recall's own switch.
// Also "What the model sees": the exact request the next question would send, as
// `jarvis request` prints it.

import { api, message } from "./api";
import { byId } from "./dom";
import { factSource } from "./provenance";
import type { Chat, Fact, Summary } from "./types";

/** Opens a chat in the window (the panel closes first). */
type OpenChat = (chat: number) => void;

let openChat: OpenChat = () => {};

function day(ms: number): string {
  return new Date(ms).toLocaleDateString(undefined, { day: "numeric", month: "short", year: "numeric" });
}

/** "Lead “Title”, 2 Dec 2026" with the title opening that chat, or "`plain`, 2 Dec 2026" when no
 *  chat is named. */
function source(chat: number | null, titles: Map<number, string>, when: number, lead: string, plain: string): HTMLElement {
  const line = document.createElement("span");
  line.className = "source";
  const title = chat === null ? undefined : titles.get(chat);
  if (chat === null || title === undefined) {
    line.textContent = `${plain}, ${day(when)}`;
    return line;
  }
  const link = document.createElement("button");
  link.type = "button";
  link.className = "link";
  link.textContent = `“${title}”`;
  link.title = "Open this chat";
  link.addEventListener("click", () => {
    byId<HTMLDialogElement>("memory").close();
    openChat(chat);
  });
  line.append(`${lead} `, link, `, ${day(when)}`);
  return line;
}

/** A Delete button that runs `action`, then lists everything again (or shows why not). */
function deleteButton(title: string, action: () => Promise<unknown>): HTMLButtonElement {
  const remove = document.createElement("button");
  remove.type = "button";
  remove.className = "danger";
  remove.textContent = "Delete";
  remove.title = title;
  remove.addEventListener("click", async () => {
    try {
      await action();
      await refresh();
    } catch (err) {
      byId("memory-error").textContent = message(err);
    }
  });
  return remove;
}

function summaryRow(summary: Summary, titles: Map<number, string>): HTMLLIElement {
  const li = document.createElement("li");
  li.className = "summary";
  li.dataset.chat = String(summary.chat);
  const text = document.createElement("p");
  text.className = "text";
  text.textContent = summary.text;
  const remove = deleteButton("Forget this summary (the chat stays)", () =>
    api.deleteSummary(summary.chat),
  );
  li.append(text, remove, source(summary.chat, titles, summary.updated_at, "Summary of", "Summary of a chat"));
  return li;
}

function row(fact: Fact, titles: Map<number, string>): HTMLLIElement {
  const li = document.createElement("li");
  li.className = "fact";
  li.dataset.id = String(fact.id);
  const text = document.createElement("input");
  text.value = fact.text;
  text.setAttribute("aria-label", "Fact");
  const save = document.createElement("button");
  save.type = "button";
  save.textContent = "Save";
  save.hidden = true;
  text.addEventListener("input", () => (save.hidden = text.value.trim() === fact.text));
  save.addEventListener("click", async () => {
    try {
      await api.editFact(fact.id, text.value);
      await refresh();
    } catch (err) {
      byId("memory-error").textContent = message(err);
    }
  });
  const remove = deleteButton("Delete this fact for good", () => api.removeFact(fact.id));
  const title = fact.chat === null ? undefined : titles.get(fact.chat);
  const from = factSource(fact, title);
  li.append(text, save, remove, source(from.link ? fact.chat : null, titles, fact.created_at, from.lead, from.lead));
  return li;
}

async function refresh(): Promise<void> {
  byId("memory-error").textContent = "";
  try {
    const [facts, summaries, chats, settings] = await Promise.all([
      api.listFacts(),
      api.listSummaries(),
      api.listChats(),
      api.getSettings(),
    ]);
    const titles = new Map(chats.map((c: Chat) => [c.id, c.title]));
    byId("facts").replaceChildren(...facts.map((f) => row(f, titles)));
    byId("facts-empty").hidden = facts.length > 0;
    const list = byId("summaries");
    list.replaceChildren(...summaries.map((s) => summaryRow(s, titles)));
    list.classList.toggle("off", !settings.earlier_conversations);
    byId("summaries-empty").hidden = summaries.length > 0;
    byId<HTMLInputElement>("earlier-on").checked = settings.earlier_conversations;
  } catch (err) {
    byId("memory-error").textContent = message(err);
  }
}

export function wireMemory(open: OpenChat): void {
  openChat = open;
  byId<HTMLInputElement>("earlier-on").addEventListener("change", async (e) => {
    const on = (e.target as HTMLInputElement).checked;
    try {
      await api.setEarlierConversations(on);
      await refresh();
    } catch (err) {
      byId("memory-error").textContent = message(err);
    }
  });
  const dialog = byId<HTMLDialogElement>("memory");
  byId("open-memory").addEventListener("click", async () => {
    await refresh();
    dialog.showModal();
  });
  byId("memory-close").addEventListener("click", () => dialog.close());
  byId("fact-add").addEventListener("submit", async (e) => {
    e.preventDefault();
    const input = byId<HTMLInputElement>("fact-new");
    if (!input.value.trim()) return;
    try {
      await api.addFact(input.value);
      input.value = "";
      await refresh();
    } catch (err) {
      byId("memory-error").textContent = message(err);
    }
  });
}

/** Shows the request the next question (the composer's text) would send in `chat`. */
export function wireRequestView(currentChat: () => number | null): void {
  const dialog = byId<HTMLDialogElement>("request-view");
  byId("show-request").addEventListener("click", async () => {
    const text = byId<HTMLTextAreaElement>("question").value.trim() || "(your next question)";
    const out = byId("request-json");
    try {
      out.textContent = JSON.stringify(await api.chatRequest(currentChat(), text), null, 2);
    } catch (err) {
      out.textContent = message(err);
    }
    dialog.showModal();
  });
  byId("request-close").addEventListener("click", () => dialog.close());
}
