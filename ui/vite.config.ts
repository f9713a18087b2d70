import { resolve } from "node:path";
import { defineConfig } from "vitest/config";

// Two pages, one per window; no inline scripts or styles, so the strict CSP holds.
export default defineConfig({
  clearScreen: false,
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "safari15",
    modulePreload: { polyfill: false },
    rollupOptions: {
      input: {
        chat: resolve(__dirname, "index.html"),
        orb: resolve(__dirname, "orb.html"),
      },
    },
  },
  test: {
    environment: "jsdom",
    globals: true,
    include: ["tests/**/*.test.ts"],
  },
});
