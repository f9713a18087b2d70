// The orb's view state from its voice attachment: status updates and the conversation's reply
// events. Its phase is what the orb draws.

import type { ListenMode, ReplyEvent, VoiceStatus } from "./types";

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
  stops: 0,
  listens: 0,
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
      return view;
    case "delta":
      return { ...view, state: "running", text: view.text + event.text };
    case "reply_ended":
      return { ...view, state: "ended", ended: event.state, reason: event.reason };
  }
}

/** What the orb draws: the open microphone first (it must always show), then the reply. */
export function phase(view: OrbView): Phase {
  if (view.status.listening) return "listening";
  if (view.state === "waiting") return "waiting";
  if (view.state === "started" || (view.state === "running" && view.text === "")) return "thinking";
  if (view.state === "running") return "speaking";
  return "idle";
}

/** Stop reply shows whenever a reply runs, waits or speaks, or questions wait. */
export function canStop(view: OrbView): boolean {
  return view.state !== "ended" || view.status.queue.length > 0;
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
