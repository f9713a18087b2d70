import { describe, expect, it } from "vitest";
import { applyOrbEvent, applyStatus, canStop, emptyOrb, idleStatus, phase } from "../src/orbState";

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

  it("shows an open microphone above everything else", () => {
    let view = applyStatus(emptyOrb(), { ...idleStatus, chat: 1, listening: true });
    view = applyOrbEvent(view, { type: "reply_started", chat: 1, reply: 3, question: 7 });
    view = applyOrbEvent(view, { type: "delta", reply: 3, text: "Hi" });
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
});
