import { describe, expect, it } from "vitest";
import {
  applyEvent,
  canReadAloud,
  composerBlock,
  emptyView,
  isReplying,
  messages,
  toolCallLine,
  type ChatView,
} from "../src/chatState";
import type { ChatRecord, ReplyEvent } from "../src/types";

const question: ChatRecord = { id: 10, chat: 1, seq: 1, role: "user", text: "Hi?", reply: null, created_at: 0, fact: null };

function run(view: ChatView, events: ReplyEvent[]): { view: ChatView; reloads: number } {
  let reloads = 0;
  for (const e of events) {
    const r = applyEvent(view, e);
    view = r.view;
    if (r.reload) reloads++;
  }
  return { view, reloads };
}

describe("the chat view", () => {
  it("streams a reply after its question and frees the composer when it ends", () => {
    const start = { ...emptyView(1), records: [question] };
    let { view } = run(start, [
      { type: "reply_started", chat: 1, reply: 5, question: 10 },
      { type: "running", reply: 5 },
      { type: "delta", reply: 5, text: "Hel" },
      { type: "delta", reply: 5, text: "lo." },
    ]);
    expect(isReplying(view)).toBe(true);
    expect(composerBlock(view)).toMatch(/replying/);
    expect(messages(view).map((m) => [m.role, m.text])).toEqual([
      ["user", "Hi?"],
      ["assistant", "Hello."],
    ]);
    ({ view } = run(view, [{ type: "reply_ended", reply: 5, state: "done", reason: null }]));
    expect(isReplying(view)).toBe(false);
    expect(composerBlock(view)).toBeNull();
  });

  it("says what Jarvis is doing while it calls a tool, until its next words", () => {
    const start = { ...emptyView(1), records: [question] };
    let { view } = run(start, [
      { type: "reply_started", chat: 1, reply: 5, question: 10 },
      { type: "running", reply: 5 },
      { type: "action", reply: 5, tool: "remember_fact", label: "Remembering…" },
    ]);
    expect(view.live?.waiting).toBe("Remembering…");
    ({ view } = run(view, [{ type: "delta", reply: 5, text: "Noted." }]));
    expect(view.live?.waiting).toBeNull();
    expect(messages(view).at(-1)?.text).toBe("Noted.");
  });

  it("shows each fact a reply stored as an action line above its answer, with Undo while it is kept", () => {
    const start = { ...emptyView(1), records: [question] };
    const { view, reloads } = run(start, [
      { type: "reply_started", chat: 1, reply: 5, question: 10 },
      { type: "action", reply: 5, tool: "remember_fact", label: "Remembering…" },
      { type: "remembered", reply: 5, fact: 7, text: "Their dog is called Bruno." },
      { type: "delta", reply: 5, text: "Noted" },
    ]);
    expect(reloads).toBe(1);
    expect(view.live?.waiting).toBeNull();
    // The store's records, read again: the action line is one of them.
    const line: ChatRecord = {
      id: 11, chat: 1, seq: 2, role: "tool", text: "Remembered: Their dog is called Bruno.", reply: 5, created_at: 0, fact: 7,
    };
    const shown = messages({ ...view, records: [question, line] });
    expect(shown.map((m) => [m.role, m.text, m.fact ?? null])).toEqual([
      ["user", "Hi?", null],
      ["action", "Remembered: Their dog is called Bruno.", 7],
      ["assistant", "Noted", null],
    ]);
    // Ended and stored, then forgotten: the line stays, without its fact.
    const answer: ChatRecord = { id: 12, chat: 1, seq: 3, role: "assistant", text: "Noted.", reply: 5, created_at: 0, fact: null };
    const after = messages({ ...emptyView(1), records: [question, { ...line, fact: null }, answer] });
    expect(after.map((m) => [m.role, m.fact ?? null])).toEqual([
      ["user", null],
      ["action", null],
      ["assistant", null],
    ]);
  });

  it("draws the line where the user started afresh, with the live reply after it", () => {
    const answer: ChatRecord = { id: 11, chat: 1, seq: 2, role: "assistant", text: "Hello.", reply: 5, created_at: 0, fact: null };
    const base = { ...emptyView(1), records: [question, answer] };
    // Just started afresh: the line comes after everything so far.
    expect(messages(base, 3).map((m) => m.role)).toEqual(["user", "assistant", "afresh"]);
    const next: ChatRecord = { id: 12, chat: 1, seq: 3, role: "user", text: "Again?", reply: null, created_at: 0, fact: null };
    const { view } = run({ ...base, records: [question, answer, next] }, [
      { type: "reply_started", chat: 1, reply: 6, question: 12 },
      { type: "delta", reply: 6, text: "Hi." },
    ]);
    expect(messages(view, 3).map((m) => [m.role, m.text])).toEqual([
      ["user", "Hi?"],
      ["assistant", "Hello."],
      ["afresh", "Started afresh — Jarvis no longer sees the messages above"],
      ["user", "Again?"],
      ["assistant", "Hi."],
    ]);
    // Started afresh before anything was said: no line.
    expect(messages(view, 1).some((m) => m.role === "afresh")).toBe(false);
    expect(messages(view).some((m) => m.role === "afresh")).toBe(false);
  });

  it("shows a replayed reply once, in place of its stored answer", () => {
    const answer: ChatRecord = { id: 11, chat: 1, seq: 2, role: "assistant", text: "Hello.", reply: 5, created_at: 0, fact: null };
    const start = { ...emptyView(1), records: [question, answer] };
    const { view } = run(start, [
      { type: "reply_started", chat: 1, reply: 5, question: 10 },
      { type: "delta", reply: 5, text: "Hello." },
      { type: "reply_ended", reply: 5, state: "done", reason: null },
    ]);
    expect(messages(view).map((m) => m.text)).toEqual(["Hi?", "Hello."]);
  });

  it("asks for the records again when a reply starts for a question it has not seen", () => {
    const start = { ...emptyView(1), records: [question] };
    const { reloads } = run(start, [{ type: "reply_started", chat: 1, reply: 6, question: 12 }]);
    expect(reloads).toBe(1);
  });

  it("says why it waits, and drops events of other replies", () => {
    const start = { ...emptyView(1), records: [question] };
    const { view } = run(start, [
      { type: "reply_started", chat: 1, reply: 5, question: 10 },
      { type: "waiting", reply: 5, message: "Waiting for the reply in another chat to finish…" },
      { type: "delta", reply: 99, text: "not mine" },
    ]);
    expect(view.live?.waiting).toBe("Waiting for the reply in another chat to finish…");
    expect(view.live?.text).toBe("");
    expect(composerBlock(view)).toMatch(/waits/);
  });

  it("keeps a stopped reply's text and a failed reply's reason", () => {
    const start = { ...emptyView(1), records: [question] };
    const { view } = run(start, [
      { type: "reply_started", chat: 1, reply: 5, question: 10 },
      { type: "delta", reply: 5, text: "Partial" },
      { type: "reply_ended", reply: 5, state: "failed", reason: "the server closed the connection" },
    ]);
    expect(view.live?.text).toBe("Partial");
    expect(view.live?.reason).toBe("the server closed the connection");
  });
});

describe("a call to one of the user's tools", () => {
  it("shows its action card until it is answered, and reloads to show its action line", () => {
    const start = { ...emptyView(1), records: [question] };
    let { view, reloads } = run(start, [
      { type: "reply_started", chat: 1, reply: 5, question: 10 },
      { type: "running", reply: 5 },
      { type: "consent", reply: 5, call: "c1", server: "files", tool: "read_text_file", arguments: '{\n  "path": "/a"\n}' },
    ]);
    expect(view.live?.consent).toEqual({ call: "c1", server: "files", tool: "read_text_file", arguments: '{\n  "path": "/a"\n}' });
    expect(composerBlock(view)).toMatch(/waits for your answer/);
    // Another call's answer does not take this card away.
    ({ view } = run(view, [{ type: "consented", reply: 5, call: "c0", allowed: true }]));
    expect(view.live?.consent?.call).toBe("c1");
    ({ view, reloads } = run(view, [
      { type: "consented", reply: 5, call: "c1", allowed: true },
      { type: "action", reply: 5, tool: "files__read_text_file", label: "Using files · read_text_file…" },
      { type: "tool_called", reply: 5, tool: "files__read_text_file" },
    ]));
    expect(view.live?.consent).toBeNull();
    expect(reloads).toBe(1);
    expect(composerBlock(view)).toMatch(/replying/);
  });

  it("drops the card when the reply ends (Stop while it waits)", () => {
    const { view } = run({ ...emptyView(1), records: [question] }, [
      { type: "reply_started", chat: 1, reply: 5, question: 10 },
      { type: "consent", reply: 5, call: "c1", server: "s", tool: "t", arguments: "{}" },
      { type: "reply_ended", reply: 5, state: "stopped", reason: null },
    ]);
    expect(view.live?.consent).toBeNull();
    expect(isReplying(view)).toBe(false);
  });

  it("folds a tool call's action line under its first line; other action lines are not tool calls", () => {
    expect(toolCallLine('Used files · read_text_file\n{\n  "path": "/a"\n}\n\nhello')).toEqual({
      summary: "Used files · read_text_file",
      detail: '{\n  "path": "/a"\n}\n\nhello',
    });
    expect(toolCallLine("Not run: files · write_file — denied\n{}")?.summary).toBe("Not run: files · write_file — denied");
    expect(toolCallLine("Remembered: The user's dog is called Bruno.")).toBeNull();
  });
});

describe("Read aloud", () => {
  it("is offered on a finished answer with words, not on a question or a reply being written", () => {
    const answer: ChatRecord = { id: 11, chat: 1, seq: 2, role: "assistant", text: "Hello.", reply: 5, created_at: 0, fact: null };
    const stored = messages({ ...emptyView(1), records: [question, answer] });
    expect(stored.map(canReadAloud)).toEqual([false, true]);
    const start = { ...emptyView(1), records: [question] };
    let { view } = run(start, [
      { type: "reply_started", chat: 1, reply: 6, question: 10 },
      { type: "delta", reply: 6, text: "Half" },
    ]);
    expect(messages(view).map(canReadAloud)).toEqual([false, false]);
    ({ view } = run(view, [{ type: "reply_ended", reply: 6, state: "done", reason: null }]));
    const done = messages(view);
    expect(done.map(canReadAloud)).toEqual([false, true]);
    expect(done[1].reply).toBe(6);
    const empty: ChatRecord = { ...answer, text: "  " };
    expect(messages({ ...emptyView(1), records: [question, empty] }).map(canReadAloud)).toEqual([false, false]);
  });
});
