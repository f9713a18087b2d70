// Markdown for replies: rendered by markdown-it with raw HTML off (a reply's `<img onerror>` is
// text), code highlighted by highlight.js, and the result sanitised by DOMPurify as a second
// wall. Rendering the whole text again on each frame keeps a streaming reply's half-written
// Markdown (an open code fence, a half list) consistent with what it will end as.

import DOMPurify from "dompurify";
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import c from "highlight.js/lib/languages/c";
import cpp from "highlight.js/lib/languages/cpp";
import css from "highlight.js/lib/languages/css";
import go from "highlight.js/lib/languages/go";
import java from "highlight.js/lib/languages/java";
import javascript from "highlight.js/lib/languages/javascript";
import json from "highlight.js/lib/languages/json";
import markdownLang from "highlight.js/lib/languages/markdown";
import python from "highlight.js/lib/languages/python";
import rust from "highlight.js/lib/languages/rust";
import sql from "highlight.js/lib/languages/sql";
import typescript from "highlight.js/lib/languages/typescript";
import xml from "highlight.js/lib/languages/xml";
import yaml from "highlight.js/lib/languages/yaml";
import MarkdownIt from "markdown-it";

const languages = {
  bash, c, cpp, css, go, java, javascript, json, markdown: markdownLang, python, rust, sql,
  typescript, xml, yaml,
};
for (const [name, lang] of Object.entries(languages)) hljs.registerLanguage(name, lang);
hljs.registerAliases(["sh", "shell", "zsh"], { languageName: "bash" });
hljs.registerAliases(["js", "jsx"], { languageName: "javascript" });
hljs.registerAliases(["ts", "tsx"], { languageName: "typescript" });
hljs.registerAliases(["py"], { languageName: "python" });
hljs.registerAliases(["rs"], { languageName: "rust" });
hljs.registerAliases(["html", "svg"], { languageName: "xml" });
hljs.registerAliases(["yml", "toml"], { languageName: "yaml" });

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) =>
    ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[ch] as string,
  );
}

const md: MarkdownIt = new MarkdownIt({
  html: false,
  linkify: true,
  breaks: false,
  highlight(code, lang) {
    const name = lang.trim().split(/\s+/)[0]?.toLowerCase() ?? "";
    if (name && hljs.getLanguage(name)) {
      try {
        return hljs.highlight(code, { language: name, ignoreIllegals: true }).value;
      } catch {
        // fall through to plain text
      }
    }
    return escapeHtml(code);
  },
});

import { SAFE_URL } from "./links";

// Every link is checked again after sanitising: only web and mail links stay links.
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    const href = node.getAttribute("href") ?? "";
    if (!SAFE_URL.test(href)) {
      node.removeAttribute("href");
    } else {
      node.setAttribute("rel", "noopener noreferrer");
      node.setAttribute("title", href);
    }
  }
});

/** A reply's Markdown as safe HTML. */
export function renderMarkdown(text: string): string {
  const html = md.render(text);
  return DOMPurify.sanitize(html, {
    USE_PROFILES: { html: true },
    FORBID_TAGS: ["style", "img", "video", "audio", "iframe", "form", "input", "button"],
    FORBID_ATTR: ["style"],
  });
}
