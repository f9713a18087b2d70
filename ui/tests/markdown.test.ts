import { describe, expect, it } from "vitest";
import { linkTarget } from "../src/links";
import { renderMarkdown } from "../src/markdown";

function dom(html: string): HTMLElement {
  const div = document.createElement("div");
  div.innerHTML = html;
  return div;
}

describe("renderMarkdown", () => {
  it("shows HTML and script in a reply as text, never as elements", () => {
    const reply = 'Look: <img src=x onerror="window.pwned=1"> and <script>window.pwned=2</script>';
    const el = dom(renderMarkdown(reply));
    expect(el.querySelector("img")).toBeNull();
    expect(el.querySelector("script")).toBeNull();
    expect(el.textContent).toContain('<img src=x onerror="window.pwned=1">');
    expect(el.textContent).toContain("<script>window.pwned=2</script>");
  });

  it("drops javascript: links but keeps web links with their address shown", () => {
    const el = dom(renderMarkdown("[bad](javascript:alert(1)) and [good](https://example.org/a)"));
    const links = [...el.querySelectorAll("a")];
    expect(links.filter((a) => a.hasAttribute("href")).map((a) => a.getAttribute("href"))).toEqual([
      "https://example.org/a",
    ]);
    expect(links.find((a) => a.textContent === "good")?.getAttribute("rel")).toBe("noopener noreferrer");
  });

  it("highlights a fenced code block by its language", () => {
    const el = dom(renderMarkdown("```rust\nfn main() { let x = 1; }\n```"));
    const code = el.querySelector("pre code");
    expect(code?.textContent).toBe("fn main() { let x = 1; }\n");
    expect(code?.querySelector(".hljs-keyword")?.textContent).toBe("fn");
  });

  it("renders a half-streamed reply with an open code fence as code, and the rest once complete", () => {
    const partial = "Here:\n\n```python\nprint('hi')";
    const el = dom(renderMarkdown(partial));
    expect(el.querySelector("pre code")?.textContent).toContain("print('hi')");
    const whole = dom(renderMarkdown(partial + "\n```\n\nDone **now**."));
    expect(whole.querySelector("strong")?.textContent).toBe("now");
    expect(whole.querySelectorAll("pre").length).toBe(1);
  });

  it("keeps the text of a streamed reply whatever the split", () => {
    const text = "A list:\n\n- one\n- two *three*\n\nA `code` span and a [link](https://a.example).";
    const whole = dom(renderMarkdown(text)).textContent;
    let streamed = "";
    for (const piece of text.match(/.{1,3}/gs) ?? []) {
      streamed += piece;
      renderMarkdown(streamed); // every intermediate state renders without throwing
    }
    expect(dom(renderMarkdown(streamed)).textContent).toBe(whole);
  });
});

describe("linkTarget", () => {
  it("finds a web link under a click and ignores anything else", () => {
    const el = dom('<p><a href="https://example.org"><b>x</b></a> <a href="file:///etc/passwd">f</a></p>');
    expect(linkTarget(el.querySelector("b"))).toBe("https://example.org");
    expect(linkTarget(el.querySelectorAll("a")[1] ?? null)).toBeNull();
    expect(linkTarget(el.querySelector("p"))).toBeNull();
  });
});
