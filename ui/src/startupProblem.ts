// When the database cannot be used, the chat window shows why instead of the chats, with the
// way out: move the file aside (it is kept, renamed) and start again, or quit.

import { api, message } from "./api";
import { byId } from "./dom";
import type { StartupProblem } from "./types";

/** Shows `problem` in place of the app; the page then does nothing else. */
export function showStartupProblem(problem: StartupProblem): void {
  byId("app").hidden = true;
  byId("startup-problem").hidden = false;
  byId("startup-reason").textContent = problem.reason.charAt(0).toUpperCase() + problem.reason.slice(1);
  byId("startup-advice").textContent = problem.advice;
  const move = byId<HTMLButtonElement>("move-aside");
  const note = byId("startup-note");
  move.hidden = !problem.can_move_aside;
  move.addEventListener("click", () => {
    move.disabled = true;
    note.textContent = "";
    // On success the app starts again, and this page with it.
    api.moveDatabaseAside().catch((err) => {
      move.disabled = false;
      note.textContent = message(err);
    });
  });
  byId("quit-app").addEventListener("click", () => void api.quitApp());
}
