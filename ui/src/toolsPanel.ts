// Settings → Tools: the user's MCP servers with their state (running with its tools, starting,
// failed and why), each one's approval (ask, always, never) changed or the server removed, a new
// one added from its command line, and the tools always allowed, each to be asked about again.

import { api, message } from "./api";
import { byId, h } from "./dom";
import { serverStateText } from "./toolsState";
import type { Approve, ServerView, ToolsView } from "./types";

const dialog = () => byId<HTMLDialogElement>("tools");

function render(view: ToolsView): void {
  const list = byId("tool-servers");
  byId("tools-empty").hidden = view.servers.length > 0;
  list.replaceChildren(...view.servers.map(serverEl));
}

function serverEl(server: ServerView): HTMLElement {
  const approve = h(
    "select",
    { class: "tool-approve", "aria-label": `Each call to ${server.name}'s tools` },
    h("option", { value: "ask" }, "Ask me first"),
    h("option", { value: "always" }, "Runs without asking"),
    h("option", { value: "never" }, "Never runs"),
  ) as HTMLSelectElement;
  approve.value = server.approve;
  approve.addEventListener("change", () => void act(() => api.setToolApproval(server.name, approve.value as Approve)));
  const remove = h("button", { type: "button", class: "tool-remove" }, "Remove");
  remove.addEventListener("click", () => void act(() => api.removeToolServer(server.name)));
  const tools = h(
    "ul",
    { class: "tool-list", "aria-label": `${server.name}'s tools` },
    ...server.tools.map((tool) => {
      const item = h(
        "li",
        { class: "tool", "data-tool": tool.name },
        h("span", { class: "tool-name" }, tool.name),
        h("span", { class: "muted" }, tool.description ? ` — ${tool.description}` : ""),
      );
      if (tool.always_allowed) {
        const again = h("button", { type: "button", class: "link ask-again", title: "The next call asks first" }, "Ask again");
        again.addEventListener("click", () => void act(() => api.askToolAgain(server.name, tool.name)));
        item.append(" ", h("span", { class: "badge allowed" }, "always allowed"), " ", again);
      }
      return item;
    }),
  );
  return h(
    "li",
    { class: "tool-server", "data-server": server.name },
    h(
      "div",
      { class: "tool-server-head" },
      h("strong", {}, server.name),
      h("span", { class: "server-state", role: "status" }, serverStateText(server.state)),
    ),
    h("code", { class: "tool-command" }, server.command),
    h("div", { class: "tool-server-actions" }, approve, remove),
    tools,
  );
}

/** While a server starts, the page looks again every second (as long as it is open). */
let poll: number | undefined;

/** Runs a change and shows the page it returns, or why it failed (and the page as it is). The
 *  page takes no other change meanwhile. */
async function act(change: () => Promise<ToolsView>): Promise<boolean> {
  byId("tools-error").textContent = "";
  const page = dialog();
  // (The server list's own controls: the add form keeps what is being typed, and its focus.)
  const controls = [...page.querySelectorAll("#tool-servers select, #tool-servers button")] as (HTMLSelectElement | HTMLButtonElement)[];
  for (const c of controls) c.disabled = true;
  let done = false;
  try {
    show(await change());
    done = true;
  } catch (err) {
    byId("tools-error").textContent = message(err);
    try {
      show(await api.toolsView());
    } catch {
      // The reason above says enough.
    }
  } finally {
    for (const c of controls) c.disabled = false;
  }
  return done;
}

function show(view: ToolsView): void {
  render(view);
  window.clearTimeout(poll);
  if (view.servers.some((s) => s.state.state === "not_started" || s.state.state === "starting")) {
    poll = window.setTimeout(() => {
      if (dialog().open) api.toolsView().then(show, () => {});
    }, 1000);
  }
}

export async function openTools(): Promise<void> {
  byId("tools-error").textContent = "";
  if (!dialog().open) dialog().showModal();
  await act(() => api.toolsView());
}

export function wireTools(): void {
  byId("tools-close").addEventListener("click", () => dialog().close());
  byId("tools-refresh").addEventListener("click", () => void act(() => api.toolsView()));
  byId("tool-add").addEventListener("submit", async (e) => {
    e.preventDefault();
    const button = byId<HTMLButtonElement>("tool-add-button");
    button.disabled = true;
    const added = await act(() =>
      api.addToolServer({
        name: byId<HTMLInputElement>("tool-name").value,
        command: byId<HTMLInputElement>("tool-command").value,
        approve: byId<HTMLSelectElement>("tool-approve").value as Approve,
      }),
    );
    if (added) {
      byId<HTMLInputElement>("tool-name").value = "";
      byId<HTMLInputElement>("tool-command").value = "";
    }
    button.disabled = false;
  });
}
