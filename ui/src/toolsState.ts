// What the Tools page says of a server, kept apart from the DOM so it can be tested.

import type { ServerState } from "./types";

/** A server's state in words: running with how many tools, starting, not started, or why it failed. */
export function serverStateText(state: ServerState): string {
  switch (state.state) {
    case "running":
      return state.tools === 1 ? "running · 1 tool" : `running · ${state.tools} tools`;
    case "starting":
      return "starting…";
    case "not_started":
      return "not started";
    case "failed":
      return `failed: ${state.reason}`;
  }
}
