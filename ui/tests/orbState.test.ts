import { describe, expect, it } from "vitest";
import {
  applyOrbEvent,
  applyStatus,
  canPlay,
  canRetry,
  canStop,
  emptyOrb,
  idleStatus,
  noticeText,
  phase,
  phaseLabel,
  ring,
} from "../src/orbState";

describe("the orb's phase", () => {
  it("goes thinking → speaking → idle from a reply's events", () => {
    let view = applyStatus(emptyOrb(), { ...idleStatus, chat: 1, replying: 3 });
    view = applyOrbEvent(view, { type: "reply_started", chat: 1, reply: 3, question: 7 });
    expect(phase(view)).toBe("thinking");
    view = applyOrbEvent(view, { type: "running", reply: 3 });
    expect(phase(view)).toBe("thinking");
    view = applyOrbEvent(view, { type: "delta", reply: 3, text: "Hello" });
    expect(phase(view)).toBe("speaking");
    expect(canStop(view)).toBe(true);
    view = applyOrbEvent(view, { type: "reply_ended", reply: 3, state: "done", reason: null });
    expect(phase(view)).toBe("idle");
    expect(canStop(view)).toBe(false);
  });

  it("shows thinking and speaking with the microphone open, and that it is open", () => {
    // Hands-free and wake mode: the microphone is open through the whole answer.
    let view = applyStatus(emptyOrb(), { ...idleStatus, chat: 1, listening: true, mode: "hands_free" });
    expect(phase(view)).toBe("listening");
    expect(phaseLabel(view)).toBe("Listening…");
    view = applyOrbEvent(view, { type: "reply_started", chat: 1, reply: 3, question: 7 });
    expect(phase(view)).toBe("thinking");
    expect(phaseLabel(view)).toBe("Thinking… · listening");
    view = applyOrbEvent(view, { type: "delta", reply: 3, text: "Hi" });
    view = applyOrbEvent(view, { type: "reply_ended", reply: 3, state: "done", reason: null });
    view = applyStatus(view, { ...view.status, speaking: true });
    expect(phase(view)).toBe("speaking");
    expect(phaseLabel(view)).toBe("Speaking · listening");
    view = applyStatus(view, { ...view.status, speaking: false });
    expect(phase(view)).toBe("listening");
  });

  it("waits while the backend is busy, and offers Stop while questions wait", () => {
    let view = applyOrbEvent(emptyOrb(), { type: "reply_started", chat: 1, reply: 3, question: 7 });
    view = applyOrbEvent(view, { type: "waiting", reply: 3, message: "Waiting…" });
    expect(phase(view)).toBe("waiting");
    let idle = applyStatus(emptyOrb(), { ...idleStatus, chat: 1, queue: [{ id: 1, text: "next" }] });
    expect(canStop(idle)).toBe(true);
    idle = applyStatus(idle, { ...idleStatus, chat: 1 });
    expect(canStop(idle)).toBe(false);
  });

  it("forgets the old conversation's answer when a new one begins", () => {
    let view = applyOrbEvent(emptyOrb(), { type: "reply_started", chat: 1, reply: 3, question: 7 });
    view = applyOrbEvent(view, { type: "delta", reply: 3, text: "Old" });
    view = applyStatus(view, { ...idleStatus, chat: null });
    expect(view.text).toBe("");
  });

  it("keeps speaking, with Stop, while its voice plays on after the text has ended", () => {
    let view = applyStatus(emptyOrb(), { ...idleStatus, chat: 1, replying: 3 });
    view = applyOrbEvent(view, { type: "reply_started", chat: 1, reply: 3, question: 7 });
    view = applyOrbEvent(view, { type: "delta", reply: 3, text: "A long answer." });
    view = applyOrbEvent(view, { type: "reply_ended", reply: 3, state: "done", reason: null });
    view = applyStatus(view, { ...idleStatus, chat: 1, speaking: true });
    expect(phase(view)).toBe("speaking");
    expect(canStop(view)).toBe(true);
    view = applyStatus(view, { ...idleStatus, chat: 1, speaking: false });
    expect(phase(view)).toBe("idle");
    expect(canStop(view)).toBe(false);
  });
});

describe("the orb's notices", () => {
  it("says a fifth spoken question was not taken, and what to do", () => {
    const text = noticeText({ notice: "queue_full", text: "What about Rome?" });
    expect(text).toContain("“What about Rome?” was not taken");
    expect(text).toContain("Remove one");
  });
});

describe("the orb's Try again and Play", () => {
  it("offers Try again for a failed voice reply once nothing runs, and Play for a finished one", () => {
    let view = applyStatus(emptyOrb(), { ...idleStatus, chat: 1, replying: 3 });
    view = applyOrbEvent(view, { type: "reply_started", chat: 1, reply: 3, question: 7 });
    view = applyOrbEvent(view, { type: "reply_ended", reply: 3, state: "failed", reason: "HTTP 500" });
    expect(canRetry(view)).toBe(false);
    view = applyStatus(view, { ...idleStatus, chat: 1 });
    expect(canRetry(view)).toBe(true);
    expect(canPlay(view)).toBe(false);
    view = applyOrbEvent(view, { type: "reply_started", chat: 1, reply: 4, question: 7 });
    expect(canRetry(view)).toBe(false);
    view = applyOrbEvent(view, { type: "delta", reply: 4, text: "Now it works." });
    expect(canPlay(view)).toBe(false);
    view = applyOrbEvent(view, { type: "reply_ended", reply: 4, state: "done", reason: null });
    expect(canPlay(view)).toBe(true);
    view = applyStatus(view, { ...idleStatus, chat: 1, speaking: true });
    expect(canPlay(view)).toBe(false);
  });
});

describe("the orb's level ring", () => {
  it("follows Jarvis's voice while it plays, else the open microphone, else nothing", () => {
    expect(ring({ mic: null, voice: null })).toEqual({ source: "none", level: 0 });
    expect(ring({ mic: 0.4, voice: null })).toEqual({ source: "mic", level: 0.4 });
    expect(ring({ mic: 0.4, voice: 0.15 })).toEqual({ source: "voice", level: 0.15 });
  });
});
