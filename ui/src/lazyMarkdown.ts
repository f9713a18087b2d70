// Markdown rendering (markdown-it, highlight.js, DOMPurify: most of the pages' code) is loaded after
// the page is up, so the window is usable sooner; until then a reply shows as plain text.

type Renderer = (text: string) => string;

let renderer: Renderer | null = null;
const waiting: Array<() => void> = [];

export const markdownLoaded: Promise<void> = import("./markdown").then((m) => {
  renderer = m.renderMarkdown;
  for (const done of waiting.splice(0)) done();
});

/** Runs `then` once Markdown can be rendered (at once if it can). */
export function whenMarkdown(then: () => void): void {
  if (renderer) then();
  else waiting.push(then);
}

/** Fills `el` with a reply's text: rendered Markdown once loaded, plain text before. */
export function showReply(el: HTMLElement, text: string): boolean {
  if (renderer) {
    el.innerHTML = renderer(text);
    return true;
  }
  el.textContent = text;
  return false;
}
