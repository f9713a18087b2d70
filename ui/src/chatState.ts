// The chat page's view state, kept apart from the DOM so it can be tested: the stored records of
// the open chat, and the live reply its attachment streams (replayed from its first event).

import type { ChatRecord, ReplyEvent, ReplyState } from "./types";

export interface LiveReply {
  reply: number;
  question: number;
  text: string;
  /** `started` until the backend says whether it waits or runs. */
  state: ReplyState | "started";
  reason: string | null;
  /** Shown while the reply waits for the backend. */
  waiting: string | null;
  /** Shown while a failed request is tried again. */
  retrying: string | null;
  /** A tool call waiting for the user's Allow or Deny (the action card). */
  consent: ConsentCard | null;
}

/** A tool call of the user's MCP servers that waits for their consent. */
export interface ConsentCard {
  call: string;
  server: string;
  tool: string;
  /** Its arguments as indented JSON. */
  arguments: string;
}

export interface ChatView {
  chat: number | null;
  records: ChatRecord[];
  live: LiveReply | null;
}

export interface Message {
  key: string;
  /** `afresh`: the line where the user started afresh; the model does not see what is above.
   *  `action`: what a reply did ("Remembered: …"), shown above its answer. */
  role: "user" | "assistant" | "afresh" | "action";
  text: string;
  /** For an action line of a stored fact: the fact, while it is remembered (Undo forgets it). */
  fact?: number | null;
  /** The reply an assistant message is the answer of (Read aloud plays it). */
  reply?: number | null;
  /** For the live reply: how it stands. */
  live?: LiveReply;
}

export function emptyView(chat: number | null = null): ChatView {
  return { chat, records: [], live: null };
}

/** Applies one event of the chat's attachment. Returns the new view and whether the stored
 *  records should be read again (a question appeared that the page has not seen). */
export function applyEvent(view: ChatView, event: ReplyEvent): { view: ChatView; reload: boolean } {
  if (event.type === "reply_started") {
    if (event.chat !== view.chat) return { view, reload: false };
    const live: LiveReply = {
      reply: event.reply,
      question: event.question,
      text: "",
      state: "started",
      reason: null,
      waiting: null,
      retrying: null,
      consent: null,
    };
    const known = view.records.some((r) => r.id === event.question);
    return { view: { ...view, live }, reload: !known };
  }
  const live = view.live;
  if (!live || live.reply !== event.reply) return { view, reload: false };
  let next: LiveReply;
  switch (event.type) {
    case "waiting":
      next = { ...live, state: "waiting", waiting: event.message };
      break;
    case "running":
      next = { ...live, state: "running", waiting: null };
      break;
    case "retrying":
      next = {
        ...live,
        retrying: `${event.reason} — trying again in ${Math.ceil(event.wait_ms / 1000)} s (attempt ${event.attempt})`,
      };
      break;
    case "action":
      // What Jarvis is doing ("Remembering…") shows until its next words arrive.
      next = { ...live, state: "running", waiting: event.label };
      break;
    case "remembered":
    case "tool_called":
      // Its action line is a record of the chat: read again, so it shows (with Undo for a fact).
      return { view: { ...view, live: { ...live, waiting: null } }, reload: true };
    case "consent":
      next = {
        ...live,
        state: "running",
        waiting: null,
        consent: { call: event.call, server: event.server, tool: event.tool, arguments: event.arguments },
      };
      break;
    case "consented":
      next = live.consent?.call === event.call ? { ...live, consent: null } : live;
      break;
    case "delta":
      next = { ...live, state: "running", text: live.text + event.text, waiting: null, retrying: null };
      break;
    case "reply_ended":
      next = { ...live, state: event.state, reason: event.reason, waiting: null, retrying: null, consent: null };
      break;
  }
  // The stored answer of a reply that ended is read again, so the page shows what the store has.
  return { view: { ...view, live: next }, reload: event.type === "reply_ended" };
}

export function isReplying(view: ChatView): boolean {
  const state = view.live?.state;
  return state === "started" || state === "waiting" || state === "running";
}

/** Why the composer is disabled, or null when a question can be sent. */
export function composerBlock(view: ChatView): string | null {
  if (!isReplying(view)) return null;
  if (view.live?.consent) return "Jarvis waits for your answer above: allow the tool, or deny it.";
  return view.live?.state === "waiting"
    ? "This chat's question waits for the backend; press Stop to withdraw it."
    : "Jarvis is replying. Wait for the reply to end, or press Stop.";
}

/** What the page shows: the stored records, with the live reply in place of its stored answer. */
export function messages(view: ChatView, since: number | null = null): Message[] {
  const live = view.live;
  const out: Message[] = [];
  let placed = false;
  const afresh: Message = { key: `afresh${since}`, role: "afresh", text: AFRESH };
  let divided = since === null;
  const liveMessage = (l: LiveReply): Message => ({ key: `l${l.reply}`, role: "assistant", text: l.text, reply: l.reply, live: l });
  // The live answer follows its question and the action lines its reply has kept so far.
  let answerDue = false;
  for (const record of view.records) {
    if (live && answerDue && !(record.role === "tool" && record.reply === live.reply)) {
      out.push(liveMessage(live));
      answerDue = false;
      placed = true;
    }
    if (!divided && record.seq >= (since ?? 0)) {
      if (out.length > 0) out.push(afresh);
      divided = true;
    }
    if (live && record.role === "assistant" && record.reply === live.reply) continue;
    if (record.role === "tool") {
      out.push({ key: `r${record.id}`, role: "action", text: record.text, reply: record.reply, fact: record.fact });
    } else {
      out.push({ key: `r${record.id}`, role: record.role, text: record.text, reply: record.reply });
    }
    if (live && record.id === live.question) answerDue = true;
  }
  if (live && answerDue) {
    out.push(liveMessage(live));
    placed = true;
  }
  if (live && !placed && view.records.length > 0) out.push(liveMessage(live));
  if (!divided && out.length > 0) out.push(afresh);
  return out;
}

/** What the line where the user started afresh says. */
export const AFRESH = "Started afresh — Jarvis no longer sees the messages above";

/** A short label for a reply that did not simply finish. */
export function endingNote(live: LiveReply): string | null {
  switch (live.state) {
    case "stopped":
      return "Stopped — what was written is kept.";
    case "failed":
      return `Failed: ${live.reason ?? "the backend gave no reason"}`;
    case "interrupted":
      return `Interrupted: ${live.reason ?? "Jarvis stopped while writing this reply"}`;
    case "done":
      return live.reason; // e.g. cut off at the token limit
    default:
      return null;
  }
}

/** Whether a message offers Read aloud: an answer with words, no longer being written. */
export function canReadAloud(m: Message): boolean {
  if (m.role !== "assistant" || m.reply === undefined || m.reply === null) return false;
  if (m.text.trim() === "") return false;
  return !m.live || !["started", "waiting", "running"].includes(m.live.state);
}

/** How the action line of a tool call begins: ran, not run (denied, never allowed), or stopped
 *  while it ran. */
const TOOL_LINE = /^(Used |Not run: |Stopped: )/;

/** A tool call's action line, split into what shows (its first line) and what unfolds (the
 *  arguments and the result); null for any other action line. */
export function toolCallLine(text: string): { summary: string; detail: string } | null {
  if (!TOOL_LINE.test(text)) return null;
  const cut = text.indexOf("\n");
  return cut < 0 ? { summary: text, detail: "" } : { summary: text.slice(0, cut), detail: text.slice(cut + 1) };
}
