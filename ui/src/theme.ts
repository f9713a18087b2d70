import type { Theme } from "./types";

/** Applies a theme to the page: `system` follows the desktop's preference. */
export function applyTheme(theme: Theme, root: HTMLElement = document.documentElement): void {
  root.dataset.theme = theme;
}
