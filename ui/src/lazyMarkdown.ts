// Markdown rendering (markdown-it, highlight.js, DOMPurify: most of the pages' code) is loaded when
// a reply first needs it, after the page is up: the window is usable sooner, and a page that shows
// no reply never loads it. Until it is here a reply shows as plain text.

type Renderer = (text: string) => string;

let renderer: Renderer | null = null;
const waiting: Array<() => void> = [];

let loading: Promise<void> | null = null;

function load(): void {
  loading ??= import("./markdown").then((m) => {
    renderer = m.renderMarkdown;
    for (const done of waiting.splice(0)) done();
  });
}

/** Runs `then` once Markdown can be rendered (at once if it can). */
export function whenMarkdown(then: () => void): void {
  if (renderer) {
    then();
    return;
  }
  waiting.push(then);
  load();
}

/** Fills `el` with a reply's text: rendered Markdown once loaded, plain text before. */
export function showReply(el: HTMLElement, text: string): boolean {
  if (renderer) {
    el.innerHTML = renderer(text);
    return true;
  }
  el.textContent = text;
  load();
  return false;
}
