// The orb's view state from its voice attachment: status updates and the conversation's reply
// events. Its phase is what the orb draws.

import type { Levels, ListenMode, ReplyEvent, VoiceNotice, VoiceStatus } from "./types";

export type Phase = "idle" | "listening" | "thinking" | "speaking" | "waiting";

export interface OrbView {
  status: VoiceStatus;
  /** The reply the orb follows, its text so far and how it stands. */
  reply: number | null;
  text: string;
  question: number | null;
  state: "started" | "waiting" | "running" | "ended";
  ended: string | null;
  reason: string | null;
}

export const idleStatus: VoiceStatus = {
  chat: null,
  mode: "push_to_talk",
  pending_mode: null,
  listening: false,
  replying: null,
  queue: [],
  answered_away: null,
  awake: false,
  awaiting_answer: false,
  speaking: false,
};

export function emptyOrb(): OrbView {
  return {
    status: idleStatus,
    reply: null,
    text: "",
    question: null,
    state: "ended",
    ended: null,
    reason: null,
  };
}

export function applyStatus(view: OrbView, status: VoiceStatus): OrbView {
  if (status.chat === null) {
    // A new conversation: nothing of the old one is shown.
    return { ...emptyOrb(), status };
  }
  return { ...view, status };
}

export function applyOrbEvent(view: OrbView, event: ReplyEvent): OrbView {
  if (event.type === "reply_started") {
    return {
      ...view,
      reply: event.reply,
      question: event.question,
      text: "",
      state: "started",
      ended: null,
      reason: null,
    };
  }
  if (event.reply !== view.reply) return view;
  switch (event.type) {
    case "waiting":
      return { ...view, state: "waiting" };
    case "running":
      return { ...view, state: "running" };
    case "retrying":
    case "action":
    case "remembered":
    case "consent":
    case "consented":
    case "tool_called":
      return view;
    case "delta":
      return { ...view, state: "running", text: view.text + event.text };
    case "reply_ended":
      return { ...view, state: "ended", ended: event.state, reason: event.reason };
  }
}

/** What the orb draws: what Jarvis does (its voice, the reply), else the open microphone. The
 * microphone's own state is drawn beside it whatever the phase (the "Mic on" mark, the red rim,
 * and [phaseLabel]), so in hands-free and wake mode — the microphone always open — an answer
 * still shows as thinking and speaking. */
export function phase(view: OrbView): Phase {
  // Its voice may go on for a minute after the text has ended.
  if (view.status.speaking) return "speaking";
  if (view.state === "waiting") return "waiting";
  if (view.state === "started" || (view.state === "running" && view.text === "")) return "thinking";
  if (view.state === "running") return "speaking";
  if (view.status.listening) return "listening";
  return "idle";
}

/** The orb's status line: its phase, that the microphone is open when the phase does not say
 * so, and a listening mode chosen for after the reply. */
export function phaseLabel(view: OrbView): string {
  const p = phase(view);
  let label = p === "idle" && view.status.awaiting_answer ? "Waiting for your answer…" : PHASE_LABEL[p];
  if (view.status.listening && p !== "listening") label = `${label} · listening`;
  const pending = view.status.pending_mode;
  return pending ? `${label} · ${MODE_LABEL[pending]} after this reply` : label;
}

/** Stop reply shows whenever a reply runs, waits or speaks (its voice still playing), or
 * questions wait. */
export function canStop(view: OrbView): boolean {
  return view.state !== "ended" || view.status.queue.length > 0 || view.status.speaking;
}

/** Try again shows for a voice reply that failed or was interrupted, once nothing runs. */
export function canRetry(view: OrbView): boolean {
  return (
    view.state === "ended" &&
    (view.ended === "failed" || view.ended === "interrupted") &&
    view.status.replying === null &&
    view.status.chat !== null
  );
}

/** Play reads the latest finished answer aloud again, when it has words and nothing is said. */
export function canPlay(view: OrbView): boolean {
  return (
    view.state === "ended" &&
    (view.ended === "done" || view.ended === "stopped") &&
    view.reply !== null &&
    view.text.trim() !== "" &&
    !view.status.speaking &&
    view.status.replying === null
  );
}

/** What the orb says of a notice from the voice conversation. */
export function noticeText(notice: VoiceNotice): string {
  switch (notice.notice) {
    case "queue_full":
      return `Four questions are already waiting, so “${notice.text}” was not taken. Remove one or wait for the reply to end.`;
  }
}

export const PHASE_LABEL: Record<Phase, string> = {
  idle: "Ready",
  listening: "Listening…",
  thinking: "Thinking…",
  speaking: "Speaking",
  waiting: "Waiting for the backend…",
};

export const MODE_LABEL: Record<ListenMode, string> = {
  push_to_talk: "Push to talk",
  hands_free: "Hands-free",
  wake: "Wake word",
};

/** What the orb's ring follows: Jarvis's voice while it plays (lowered when ducked), else the
 * open microphone, else nothing. */
export function ring(levels: Levels): { source: "voice" | "mic" | "none"; level: number } {
  if (levels.voice !== null) return { source: "voice", level: levels.voice };
  if (levels.mic !== null) return { source: "mic", level: levels.mic };
  return { source: "none", level: 0 };
}
