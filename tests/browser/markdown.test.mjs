// The page's Markdown renderer, run directly in Node (it is a pure function): the
// constructs agents use, and that nothing in the input can become markup of its own.

import { test } from "node:test";
import assert from "node:assert/strict";
import { renderMarkdown as md } from "../../crates/tether-server/assets/js/markdown.js";

test("paragraphs keep single newlines as line breaks", () => {
  assert.equal(md("echo: hi\nremembers 0: []"), "<p>echo: hi<br>remembers 0: []</p>");
  assert.equal(md("a\n\nb"), "<p>a</p><p>b</p>");
  assert.equal(md(""), "");
});

test("fenced code blocks keep their text verbatim, escaped, with the language", () => {
  assert.equal(md("```rust\nfn main() { *x* }\n<b>\n```"), '<pre><code class="lang-rust">fn main() { *x* }\n&lt;b&gt;</code></pre>');
  // Unclosed while streaming: still a code block.
  assert.equal(md("text\n```\nlet a = 1;"), "<p>text</p><pre><code>let a = 1;</code></pre>");
  assert.equal(md("~~~\n```\n~~~"), "<pre><code>```</code></pre>");
});

test("inline code, bold, italics, strike", () => {
  assert.equal(md("use `a*b*c` and **bold** and *it* and _it2_ and ~~old~~"),
    "<p>use <code>a*b*c</code> and <strong>bold</strong> and <em>it</em> and <em>it2</em> and <del>old</del></p>");
  assert.equal(md("snake_case_name and 2*3*4"), "<p>snake_case_name and 2*3*4</p>");
  assert.equal(md("``code with ` tick``"), "<p><code>code with ` tick</code></p>");
});

test("lists: unordered, ordered with start, nested, tasks", () => {
  assert.equal(md("- a\n- b"), "<ul><li>a</li><li>b</li></ul>");
  assert.equal(md("3. x\n4. y"), '<ol start="3"><li>x</li><li>y</li></ol>');
  assert.equal(md("- a\n  - a1\n  - a2\n- b"), "<ul><li>a<ul><li>a1</li><li>a2</li></ul></li><li>b</li></ul>");
  assert.equal(md("- [x] done\n- [ ] todo"),
    '<ul><li><input type="checkbox" disabled checked> done</li><li><input type="checkbox" disabled> todo</li></ul>');
  assert.equal(md("intro\n- a\n- b\n\nafter"), "<p>intro</p><ul><li>a</li><li>b</li></ul><p>after</p>");
  assert.equal(md("1. step\n   ```\n   code\n   ```\n2. next"),
    "<ol><li>step<pre><code>code</code></pre></li><li>next</li></ol>");
});

test("headings, quotes, rules and tables", () => {
  assert.equal(md("# Title\n## Sub"), "<h3>Title</h3><h4>Sub</h4>");
  assert.equal(md("> quoted\n> more"), "<blockquote><p>quoted<br>more</p></blockquote>");
  assert.equal(md("a\n\n---\n\nb"), "<p>a</p><hr><p>b</p>");
  assert.equal(md("| a | b |\n|---|--:|\n| 1 | 2 |"),
    '<div class="table-wrap"><table><thead><tr><th>a</th><th class="a-right">b</th></tr></thead>' +
    '<tbody><tr><td>1</td><td class="a-right">2</td></tr></tbody></table></div>');
});

test("links: http(s), mailto and same-site only; bare URLs become links", () => {
  assert.equal(md("[docs](https://example.com/a?b=1&c=2)"),
    '<p><a href="https://example.com/a?b=1&amp;c=2" target="_blank" rel="noopener noreferrer">docs</a></p>');
  assert.equal(md("see https://example.com/x."),
    '<p>see <a href="https://example.com/x" target="_blank" rel="noopener noreferrer">https://example.com/x</a>.</p>');
  assert.equal(md("[home](/)"), '<p><a href="/">home</a></p>');
  assert.equal(md("[x](javascript:alert(1))"), "<p>[x](javascript:alert(1))</p>");
  assert.equal(md("[x](//evil.example/)"), "<p>[x](//evil.example/)</p>");
  assert.equal(md('["a", "see [docs](https://e.x)"]'),
    '<p>[&quot;a&quot;, &quot;see <a href="https://e.x" target="_blank" rel="noopener noreferrer">docs</a>&quot;]</p>');
  assert.equal(md("[`code` label](https://e.x)"),
    '<p><a href="https://e.x" target="_blank" rel="noopener noreferrer"><code>code</code> label</a></p>');
});

test("HTML in the input is text, never markup", () => {
  const evil = [
    "<img src=x onerror=alert(1)>",
    "<script>alert(1)</script>",
    '[a](https://x.y" onmouseover="alert(1))',
    "[a](&#106;avascript:alert(1))",
    "`<b>`",
    "```\n</code></pre><script>x</script>\n```",
    "- <iframe>",
    "| <a> | b |\n|---|---|\n| <svg onload=x> | y |",
    "\u0000 0\u0000 <x>",
  ];
  for (const src of evil) {
    const html = md(src);
    // The only tags allowed are the renderer's own.
    for (const tag of html.match(/<\/?([a-z0-9]+)/gi) || []) {
      assert.match(tag, /^<\/?(p|br|pre|code|ul|ol|li|a|strong|em|del|h[3-6]|blockquote|hr|div|table|thead|tbody|tr|th|td|input)$/i, `${src} → ${html}`);
    }
    assert.doesNotMatch(html, /<(script|img|iframe|svg)/i, src);
    for (const tag of html.match(/<[a-z][^>]*>/gi) || []) {
      assert.doesNotMatch(tag, /\son\w+\s*=/i, `${src} → ${html}`);
    }
    assert.doesNotMatch(html, /href="(?!https?:|mailto:|\/|#)/i, src);
  }
});
