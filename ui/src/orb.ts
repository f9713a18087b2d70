// The orb: the voice conversation's face. It attaches on load and whenever it is shown again,
// never opens the microphone by itself, and shows the open microphone whenever it is open.

import { api, message, onAttachAgain, onThemeChanged } from "./api";
import { byId, h } from "./dom";
import { showReply, whenMarkdown } from "./lazyMarkdown";
import {
  applyOrbEvent,
  applyStatus,
  canPlay,
  canRetry,
  canStop,
  emptyOrb,
  noticeText,
  phase,
  phaseLabel,
  ring,
  type OrbView,
} from "./orbState";
import { applyTheme } from "./theme";
import type { ListenMode, VoiceUpdate } from "./types";

let view: OrbView = emptyOrb();
/** The failure the error line shows, if it shows one (cleared once another reply starts). */
let failureShown: string | null = null;
/** Play answer was pressed since this window attached. */
let played = false;
let seq = 0;

function onUpdate(update: VoiceUpdate): void {
  if (update.kind === "status") {
    view = applyStatus(view, update.value);
  } else if (update.kind === "event") {
    view = applyOrbEvent(view, update.value);
  } else {
    byId("orb-error").textContent = noticeText(update.value);
  }
  render();
}

async function attach(): Promise<void> {
  const mine = ++seq;
  view = emptyOrb();
  played = false;
  render();
  try {
    await api.orbAttach((u) => {
      if (mine === seq) onUpdate(u);
    });
    // Why it cannot listen or speak (no speech model, a microphone that failed), while it lasts.
    // A small mark in the top bar (the orb has no room for a paragraph); the reason on hover,
    // and in the error line when clicked.
    // The ring follows sound: only a style changes, and nothing arrives while all is still.
    await api.orbLevels((levels) => {
      if (mine !== seq) return;
      const now = ring(levels);
      const card = byId("orb-card");
      card.dataset.sound = now.source;
      card.style.setProperty("--level", now.level.toFixed(2));
    });
    await api.orbProblems((problem) => {
      if (mine !== seq) return;
      const mark = byId("orb-problem");
      mark.hidden = problem === null;
      byId("orb-card").dataset.novoice = String(problem !== null);
      mark.title = problem === null ? "" : `Voice unavailable: ${problem}`;
      mark.setAttribute("aria-label", mark.title);
    });
  } catch (err) {
    byId("orb-error").textContent = message(err);
  }
}

function render(): void {
  const p = phase(view);
  const card = byId("orb-card");
  card.dataset.phase = p;
  card.dataset.mic = view.status.listening ? "on" : "off";
  const label = phaseLabel(view);
  byId("orb").setAttribute("aria-label", `Jarvis: ${label}`);
  byId("phase").textContent = label;
  const pending = view.status.pending_mode;
  byId("mic").hidden = !view.status.listening;
  // Hands-free and wake modes: the microphone is switched on and off here (or by the shortcut).
  const listen = byId("listen");
  listen.hidden = view.status.mode === "push_to_talk";
  listen.textContent = view.status.listening ? "Mic off" : "Listen";
  listen.setAttribute("aria-pressed", String(view.status.listening));
  byId("orb-stop").hidden = !canStop(view);
  byId("orb-retry").hidden = !canRetry(view);
  byId("orb-play").hidden = !canPlay(view) || (view.status.answered_away !== null && !played);
  byId<HTMLSelectElement>("mode").value = pending ?? view.status.mode;

  const away = view.status.answered_away !== null && !played;
  byId("away").hidden = !away;
  byId("continue").hidden =
    away || view.status.chat === null || view.state !== "ended" || view.status.listening;
  const answer = byId("answer");
  answer.hidden = away || view.text === "";
  if (!answer.hidden) {
    if (!showReply(answer, view.text)) whenMarkdown(render);
    answer.scrollTop = answer.scrollHeight;
  }
  // A failed reply's reason shows until another reply starts (Try again, a new question).
  const failure = view.ended === "failed" && view.reason ? `The reply failed: ${view.reason}` : null;
  const error = byId("orb-error");
  if (failure !== null) {
    error.textContent = failure;
    failureShown = failure;
  } else if (failureShown !== null && error.textContent === failureShown) {
    error.textContent = "";
    failureShown = null;
  }
  const items = view.status.queue.map((q) => {
    const remove = h("button", { class: "icon", type: "button", title: "Remove", "aria-label": `Remove “${q.text}”` }, "✕");
    remove.addEventListener("click", () => {
      api.orbRemove(q.id).catch((err) => (byId("orb-error").textContent = message(err)));
    });
    return h("li", { "data-queued": String(q.id) }, h("span", { class: "q" }, q.text), remove);
  });
  byId("queue").replaceChildren(...items);
}

async function init(): Promise<void> {
  byId("hide").addEventListener("click", () => void api.orbHide());
  byId("orb-problem").addEventListener("click", () => {
    byId("orb-error").textContent = byId("orb-problem").title;
  });
  byId("open-chat").addEventListener("click", () => void api.showWindow("chat"));
  byId("orb-stop").addEventListener("click", () => {
    api.orbStop().catch((err) => (byId("orb-error").textContent = message(err)));
  });
  byId("orb-retry").addEventListener("click", () => {
    byId("orb-error").textContent = "";
    api.orbRetry().catch((err) => (byId("orb-error").textContent = message(err)));
  });
  byId("orb-play").addEventListener("click", () => {
    if (view.reply === null) return;
    api.readAloud(view.reply).catch((err) => (byId("orb-error").textContent = message(err)));
  });
  byId("end").addEventListener("click", () => {
    api.orbEnd().catch((err) => (byId("orb-error").textContent = message(err)));
  });
  byId<HTMLSelectElement>("mode").addEventListener("change", (e) => {
    const mode = (e.target as HTMLSelectElement).value as ListenMode;
    api.orbSetMode(mode).catch((err) => (byId("orb-error").textContent = message(err)));
  });
  byId("play").addEventListener("click", () => {
    // Until speech lands, playing an answer shows it; the service forgets the mark.
    played = true;
    void api.orbAcknowledge();
    render();
  });
  byId("listen").addEventListener("click", () => {
    byId("orb-error").textContent = "";
    api.orbListen(!view.status.listening).catch((err) => (byId("orb-error").textContent = message(err)));
  });
  byId("continue-btn").addEventListener("click", () => byId("orb-question").focus());
  byId("ask").addEventListener("submit", async (e) => {
    e.preventDefault();
    const input = byId<HTMLInputElement>("orb-question");
    const text = input.value;
    if (!text.trim()) return;
    byId("orb-error").textContent = "";
    try {
      await api.orbAsk(text);
      input.value = "";
    } catch (err) {
      byId("orb-error").textContent = message(err);
    }
  });
  await onAttachAgain(() => void attach());
  await onThemeChanged((theme) => applyTheme(theme));
  try {
    applyTheme((await api.appInfo()).theme);
  } catch {
    // the default look
  }
  await attach();
}

void init();
