// The Memory panel: the facts Jarvis remembers about the user (the profile the model sees) —
// listed, added, edited in place and deleted for real — and "What the model sees": the exact
// request the next question would send, as `jarvis request` prints it.

import { api, message } from "./api";
import { byId } from "./dom";
import type { Fact } from "./types";

function row(fact: Fact, refresh: () => Promise<void>): HTMLLIElement {
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
  const remove = document.createElement("button");
  remove.type = "button";
  remove.className = "danger";
  remove.textContent = "Delete";
  remove.title = "Delete this fact for good";
  remove.addEventListener("click", async () => {
    try {
      await api.removeFact(fact.id);
      await refresh();
    } catch (err) {
      byId("memory-error").textContent = message(err);
    }
  });
  li.append(text, save, remove);
  return li;
}

async function refresh(): Promise<void> {
  byId("memory-error").textContent = "";
  try {
    const facts = await api.listFacts();
    const list = byId("facts");
    list.replaceChildren(...facts.map((f) => row(f, refresh)));
    byId("facts-empty").hidden = facts.length > 0;
  } catch (err) {
    byId("memory-error").textContent = message(err);
  }
}

export function wireMemory(): void {
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
