import { describe, expect, it } from "vitest";
import { serverStateText } from "../src/toolsState";

describe("a tool server's state", () => {
  it("says how many tools a running server offers, and why one failed", () => {
    expect(serverStateText({ state: "running", tools: 1 })).toBe("running · 1 tool");
    expect(serverStateText({ state: "running", tools: 13 })).toBe("running · 13 tools");
    expect(serverStateText({ state: "starting" })).toBe("starting…");
    expect(serverStateText({ state: "not_started" })).toBe("not started");
    expect(serverStateText({ state: "failed", reason: "the MCP server x could not be started: no such program" })).toBe(
      "failed: the MCP server x could not be started: no such program",
    );
  });
});
