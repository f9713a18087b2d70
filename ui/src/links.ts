// Which links a reply may open: web and mail links only, in the system browser.

export const SAFE_URL = /^(?:https?:|mailto:)/i;

/** The URL a click should open in the system browser, if it was on a reply's link. */
export function linkTarget(target: EventTarget | null): string | null {
  if (!(target instanceof Element)) return null;
  const anchor = target.closest("a[href]");
  const href = anchor?.getAttribute("href") ?? null;
  return href && SAFE_URL.test(href) ? href : null;
}
