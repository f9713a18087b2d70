// Models: the chat window's offer of a better model while only a small one answers (download
// and use it in one click, a progress bar, Stop, Not now), and the Models page opened from
// Settings — the catalog beside what is installed, in use or part-downloaded, each to download,
// resume, use or remove, and the models of servers already running here (Ollama, LM Studio),
// each to use in one step. One download at a time; it goes on while the window closes.

import { api, message } from "./api";
import { byId, h } from "./dom";
import { downloadLabel, fraction, modelFacts, offerText, pullText, pulling } from "./modelsState";
import type { ModelEntry, ModelsView, PullStatus } from "./types";

let status: PullStatus = { state: "idle" };
/** The model the chat window offers (kept once the download ends, to say so). */
let offered: ModelEntry | null = null;
/** What answers now (the offer names it). */
let answering = "";
let offerClosed = false;
let afterChange: () => Promise<void> = async () => {};

const dialog = () => byId<HTMLDialogElement>("models");

/** Shows a download's bar and line in `bar` and `text`. */
function showProgress(bar: HTMLProgressElement, text: HTMLElement): void {
  const part = fraction(status);
  if (part === null) bar.removeAttribute("value");
  else bar.value = part;
  text.textContent = pullText(status);
}

/** Whether the download (running or last) is the offered model's. */
function offersDownload(): boolean {
  return offered !== null && status.state !== "idle" && status.name === offered.name;
}

/** The offered model is here but does not answer (put in use elsewhere, or not as asked). */
function offeredButUnused(): boolean {
  return offersDownload() && status.state === "done" && !status.in_use;
}

function renderOffer(): void {
  const banner = byId("model-offer");
  const mine = offersDownload();
  banner.hidden = offerClosed || offered === null || (!mine && offered.state !== "absent");
  if (banner.hidden || offered === null) return;
  const going = mine && pulling(status);
  const answers = mine && status.state === "done" && status.in_use;
  const get = byId<HTMLButtonElement>("offer-get");
  byId("offer-text").textContent = offerText(offered, answering);
  byId("offer-text").hidden = mine && status.state === "done";
  byId("offer-progress").hidden = !mine;
  showProgress(byId<HTMLProgressElement>("offer-bar"), byId("offer-progress-text"));
  byId("offer-bar").hidden = !going;
  get.hidden = going || answers;
  get.textContent = offeredButUnused()
    ? "Use it"
    : mine && status.state === "stopped"
      ? "Resume"
      : mine && status.state === "failed"
        ? "Try again"
        : "Download and use it";
  // Another model downloading (from the Models page): one download at a time.
  get.disabled = pulling(status);
  byId("offer-stop").hidden = !going;
  byId("offer-later").hidden = going;
  byId("offer-later").textContent = answers ? "Close" : "Not now";
}

function renderPull(): void {
  const area = byId("pull-status");
  area.hidden = status.state === "idle";
  showProgress(byId<HTMLProgressElement>("pull-bar"), byId("pull-text"));
  byId("pull-bar").hidden = !pulling(status);
  byId("pull-stop").hidden = !pulling(status);
  for (const button of document.querySelectorAll<HTMLButtonElement>("#model-list button.download")) {
    button.disabled = pulling(status);
  }
}

async function onStatus(next: PullStatus): Promise<void> {
  // The window is told the latest status at most every tenth of a second: a short download may
  // go from one end to the next with nothing between, so an end is any new end.
  const ended = !pulling(next) && next.state !== "idle" && JSON.stringify(next) !== JSON.stringify(status);
  if (JSON.stringify(next) !== JSON.stringify(status)) byId("offer-error").textContent = "";
  status = next;
  renderOffer();
  renderPull();
  if (ended) {
    // What answers, and whether to offer a model, may have changed.
    await afterChange();
    if (dialog().open) await refreshModels();
  }
}

/** An action of the page: done, then the list again (or why not). */
async function act(action: () => Promise<unknown>, changesModel = false): Promise<void> {
  byId("models-error").textContent = "";
  try {
    await action();
    if (changesModel) await afterChange();
  } catch (err) {
    byId("models-error").textContent = message(err);
  }
  await refreshModels();
}

function button(label: string, className: string, onClick: () => void): HTMLButtonElement {
  const b = h("button", { type: "button", class: className }, label) as HTMLButtonElement;
  b.addEventListener("click", onClick);
  return b;
}

function modelItem(model: ModelEntry): HTMLElement {
  const badges = [];
  if (model.state === "in_use") badges.push(h("span", { class: "badge in-use" }, "In use"));
  if (model.recommended) badges.push(h("span", { class: "badge" }, "Recommended for this computer"));
  const actions = h("div", { class: "model-actions" });
  if (model.state === "absent") {
    const downloading = pulling(status) && "name" in status && status.name === model.name;
    const label = downloading ? "Downloading…" : downloadLabel(model);
    const get = button(label, "primary download", () => void act(() => api.pullModel(model.name, false)));
    get.disabled = pulling(status);
    actions.append(get);
  } else if (model.state === "installed") {
    actions.append(button("Use", "primary", () => void act(() => api.useModel(model.name), true)));
    const remove = button("Remove", "danger", () => {
      if (remove.dataset.sure) void act(() => api.removeModel(model.name));
      else {
        remove.dataset.sure = "1";
        remove.textContent = `Remove ${model.file}?`;
      }
    });
    actions.append(remove);
  }
  return h(
    "li",
    { class: "model", "data-name": model.name, "data-state": model.state },
    h("div", { class: "model-head" }, h("strong", {}, model.title), ...badges),
    h("div", { class: "model-facts muted" }, modelFacts(model)),
    model.about ? h("div", { class: "model-about" }, model.about) : null,
    actions,
  );
}

function render(view: ModelsView): void {
  // The status is the watch's alone (a list fetched as a download ends may be older).
  const memory = view.memory_gb ? `This computer has ${view.memory_gb} GB of memory. ` : "";
  byId("models-intro").textContent =
    `${memory}Models run here, offline, from ${view.folder}. A stopped download goes on from where it stopped.`;
  byId("model-list").replaceChildren(...view.models.map(modelItem));
  const served = view.servers.flatMap((server) =>
    server.models.map((model) =>
      h(
        "li",
        { class: "model served", "data-server": server.title, "data-name": model.name },
        h("div", { class: "model-head" }, h("strong", {}, model.name), h("span", { class: "muted" }, `${server.title} · ${server.base_url}`)),
        h(
          "div",
          { class: "model-actions" },
          model.in_use
            ? h("span", { class: "badge in-use" }, "In use")
            : button("Use", "primary", () => void act(() => api.useServedModel(server.base_url, model.name), true)),
        ),
      ),
    ),
  );
  byId("server-list").replaceChildren(...served);
  byId("servers-empty").hidden = view.servers.length > 0;
  renderPull();
}

async function refreshModels(): Promise<void> {
  try {
    render(await api.modelsView());
  } catch (err) {
    byId("models-error").textContent = message(err);
  }
}

/** Opens the Models page. */
export async function openModels(): Promise<void> {
  byId("models-error").textContent = "";
  if (!dialog().open) dialog().showModal();
  await refreshModels();
}

/** Looks again whether to offer a better model (at start, and after the backend changed). */
export async function refreshOffer(model: string): Promise<void> {
  answering = model;
  try {
    const offer = await api.modelOffer();
    // An offer whose download ended stays to say how it ended, until closed.
    const mine = offered !== null && status.state !== "idle" && status.name === offered.name;
    if (offer || !mine) offered = offer;
  } catch {
    offered = null;
  }
  renderOffer();
}

/** Follows the model download (again, after the window was detached). */
export function watchDownloads(): Promise<void> {
  return api.watchPull((next) => void onStatus(next));
}

/** Wires the offer and the page; `changed` runs once another model answers. */
export function wireModels(changed: () => Promise<void>): void {
  afterChange = changed;
  byId("models-close").addEventListener("click", () => dialog().close());
  byId("pull-stop").addEventListener("click", () => void api.stopPull());
  byId("offer-stop").addEventListener("click", () => void api.stopPull());
  byId("offer-get").addEventListener("click", async () => {
    if (!offered) return;
    const get = byId<HTMLButtonElement>("offer-get");
    get.disabled = true;
    byId("offer-error").textContent = "";
    try {
      if (offeredButUnused()) {
        await api.useModel(offered.name);
        await afterChange();
        offerClosed = true;
      } else {
        await api.pullModel(offered.name, true);
      }
    } catch (err) {
      byId("offer-error").textContent = message(err);
    }
    renderOffer();
  });
  byId("offer-later").addEventListener("click", async () => {
    // Closing the message of the offered model answering needs nothing kept; "Not now" is
    // remembered.
    const answers = offersDownload() && status.state === "done" && status.in_use;
    if (!answers) {
      try {
        await api.dismissModelOffer();
      } catch (err) {
        byId("offer-error").textContent = `Not remembered: ${message(err)}`;
        return;
      }
    }
    offerClosed = true;
    renderOffer();
  });
}
