// A small, safe Markdown renderer for agent replies. The text is HTML-escaped before any
// markup is recognised, so the only tags in the output are the ones made here, and links
// are kept only for http(s), mailto and same-site targets.
//
// Blocks: fenced code (``` or ~~~, also unclosed while streaming), headings, lists (nested
// by indentation, ordered or not, task boxes), block quotes, rules, simple tables,
// paragraphs (single newlines are line breaks). Inline: `code`, **bold**, *italics*,
// ~~strike~~, [links](url) and bare URLs.

const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
export const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w#+.-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}&gt; ?/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_SEP = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;

/** Markdown → HTML (safe to assign to innerHTML). */
export function renderMarkdown(src) {
  const text = escapeHtml(String(src ?? "").replace(/\0/g, "").replace(/\r\n?/g, "\n"));
  return blocks(text.split("\n"));
}

const indentOf = (line) => line.match(/^\s*/)[0].replace(/\t/g, "    ").length;
const blank = (line) => line.trim() === "";

function blocks(lines) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (blank(line)) {
      i++;
      continue;
    }
    let m;
    if ((m = line.match(FENCE))) {
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length && !isClosingFence(lines[i], fence)) body.push(lines[i++]);
      i++; // the closing fence (or past the end)
      const lang = m[2] ? ` class="lang-${m[2]}"` : "";
      out.push(`<pre><code${lang}>${body.join("\n")}</code></pre>`);
      continue;
    }
    if ((m = line.match(HEADING))) {
      const level = Math.min(m[1].length + 2, 6);
      out.push(`<h${level}>${inline(m[2])}</h${level}>`);
      i++;
      continue;
    }
    if (RULE.test(line)) {
      out.push("<hr>");
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && !blank(lines[i]) && QUOTE.test(lines[i])) {
        body.push(lines[i++].replace(QUOTE, ""));
      }
      out.push(`<blockquote>${blocks(body)}</blockquote>`);
      continue;
    }
    if (ITEM.test(line)) {
      i = list(lines, i, out);
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1])) {
      i = table(lines, i, out);
      continue;
    }
    const para = [];
    while (i < lines.length && !blank(lines[i]) && !startsBlock(lines, i)) para.push(lines[i++].trim());
    out.push(`<p>${para.map(inline).join("<br>")}</p>`);
  }
  return out.join("");
}

function isClosingFence(line, fence) {
  const t = line.trim();
  return t.length >= fence.length && t[0] === fence[0] && /^(`+|~+)$/.test(t);
}

function startsBlock(lines, i) {
  const line = lines[i];
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
    ITEM.test(line) || (line.includes("|") && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]));
}

/** A list starting at line `i`; returns the index after it. */
function list(lines, i, out) {
  const first = lines[i].match(ITEM);
  const base = indentOf(first[1]);
  const ordered = /\d/.test(first[2]);
  const items = [];
  let loose = false;
  while (i < lines.length) {
    const m = lines[i].match(ITEM);
    if (!m || indentOf(m[1]) !== base || /\d/.test(m[2]) !== ordered) break;
    const contentIndent = base + m[2].length + 1;
    const body = [m[3]];
    i++;
    while (i < lines.length) {
      const line = lines[i];
      if (blank(line)) {
        // A blank line continues the item only if indented content follows.
        if (i + 1 < lines.length && !blank(lines[i + 1]) && indentOf(lines[i + 1]) > base) {
          loose = loose || !ITEM.test(lines[i + 1]);
          body.push("");
          i++;
          continue;
        }
        break;
      }
      const im = line.match(ITEM);
      if (indentOf(line) <= base && (im || startsBlock(lines, i))) break;
      body.push(indentOf(line) >= contentIndent ? line.slice(Math.min(contentIndent, line.search(/\S/))) : line.trim());
      i++;
    }
    items.push(body);
    // Blank lines between items make the list loose.
    if (i < lines.length && blank(lines[i]) && i + 1 < lines.length) {
      const next = lines[i + 1].match(ITEM);
      if (next && indentOf(next[1]) === base && /\d/.test(next[2]) === ordered) {
        loose = true;
        i++;
      }
    }
  }
  const start = ordered ? parseInt(first[2], 10) : 1;
  const open = ordered ? (start !== 1 ? `<ol start="${start}">` : "<ol>") : "<ul>";
  out.push(open);
  for (const body of items) out.push(`<li>${listItem(body, loose)}</li>`);
  out.push(ordered ? "</ol>" : "</ul>");
  return i;
}

function listItem(body, loose) {
  let task = "";
  const tm = body[0].match(/^\[([ xX])\]\s+(.*)$/);
  if (tm) {
    task = `<input type="checkbox" disabled${tm[1] === " " ? "" : " checked"}> `;
    body = [tm[2], ...body.slice(1)];
  }
  const html = blocks(body);
  if (!loose && html.startsWith("<p>")) {
    // Tight item: drop the paragraph around the first line.
    const end = html.indexOf("</p>");
    return task + html.slice(3, end) + html.slice(end + 4);
  }
  return task + html;
}

function table(lines, i, out) {
  const cells = (line) => {
    let t = line.trim();
    if (t.startsWith("|")) t = t.slice(1);
    if (t.endsWith("|")) t = t.slice(0, -1);
    return t.split("|").map((c) => c.trim());
  };
  const head = cells(lines[i]);
  const aligns = cells(lines[i + 1]).map((c) =>
    c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : "");
  const cell = (tag, c, k) => `<${tag}${aligns[k] ? ` class="a-${aligns[k]}"` : ""}>${inline(c)}</${tag}>`;
  const rows = [];
  i += 2;
  while (i < lines.length && !blank(lines[i]) && lines[i].includes("|")) {
    const r = cells(lines[i++]);
    rows.push(`<tr>${head.map((_, k) => cell("td", r[k] ?? "", k)).join("")}</tr>`);
  }
  out.push(`<div class="table-wrap"><table><thead><tr>${head.map((c, k) => cell("th", c, k)).join("")}</tr></thead>` +
    `<tbody>${rows.join("")}</tbody></table></div>`);
  return i;
}

const SAFE_URL = /^(https?:\/\/|mailto:|\/(?!\/)|#)/i;

/** Inline markup on already-escaped text. */
function inline(s) {
  const slots = [];
  const keep = (html) => `\u0000${slots.push(html) - 1}\u0000`;
  // Code spans first: nothing inside them is markup.
  s = s.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, __, code) => keep(`<code>${code.trim() || code}</code>`));
  s = s.replace(/\[([^[\]\n]+)\]\(\s*([^\s()]+(?:\([^\s()]*\))?[^\s()]*)\s*\)/g, (all, label, url) =>
    SAFE_URL.test(url) ? keep(link(url, label)) : all);
  s = s.replace(/(^|[\s(])((?:https?:\/\/)[^\s<]+[^\s<.,:;!?)'"\u0000])/g, (_, pre, url) => pre + keep(link(url, url)));
  s = s.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, "<strong>$1</strong>");
  s = s.replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, "$1<strong>$2</strong>");
  s = s.replace(/(^|[^*\w])\*(?=[^\s*])([^*]*?[^\s*])\*(?![*\w])/g, "$1<em>$2</em>");
  s = s.replace(/(^|[^\w])_(?=[^\s_])([^_]*?[^\s_])_(?!\w)/g, "$1<em>$2</em>");
  s = s.replace(/~~(?=\S)([\s\S]*?\S)~~/g, "<del>$1</del>");
  // Slots may nest (a link label with code): restore until none is left.
  for (let n = 0; n < 3 && s.includes("\u0000"); n++) {
    s = s.replace(/\u0000(\d+)\u0000/g, (_, k) => slots[Number(k)]);
  }
  return s;
}

function link(url, label) {
  const ext = /^https?:|^mailto:/i.test(url);
  const attrs = ext ? ' target="_blank" rel="noopener noreferrer"' : "";
  return `<a href="${url}"${attrs}>${label}</a>`;
}
