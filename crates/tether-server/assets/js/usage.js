// The usage view (issue 29): the ledger's totals for this conversation, its task tree,
// the signed-in person or the team, a bar chart of tokens per day, week or month (UTC),
// and the budgets that apply with what they have used. Task cards show their tree's
// total through `treeTotal`.

import { api, enc } from "./api.js";
import { $, h, setError } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";

/** "12 345 tokens · $0.0123" (plus the unknowns, never shown as zero). */
export function describe(t) {
  let s = `${t.total_tokens.toLocaleString()} tokens · $${t.cost_usd.toFixed(4)}`;
  if (t.unpriced_reports) s += ` · ${t.unpriced_reports} reports of unknown price`;
  if (t.unreported_turns) s += ` · ${t.unreported_turns} turns without a usage report`;
  return s;
}

/** The tree total of conversation `id`, as text (for a task card). */
export async function treeTotal(id) {
  const u = await api("GET", `/api/v1/usage?scope=tree&conversation_id=${enc(id)}&days=1`);
  return `tree: ${describe(u.totals)}`;
}

export class UsageView {
  /** `current()` is the open conversation's id (or null). */
  constructor({ current }) {
    this.current = current;
    this.scope = "conversation";
    $("usage").addEventListener("click", () => this.open());
    $("usage-close").addEventListener("click", () => $("usage-dialog").close());
    $("usage-bucket").addEventListener("change", () => this.load());
    for (const b of document.querySelectorAll(".usage-scopes [data-scope]")) {
      b.addEventListener("click", () => {
        this.scope = b.dataset.scope;
        this.load();
      });
    }
  }

  async open() {
    if (!this.current() && (this.scope === "conversation" || this.scope === "tree")) this.scope = "person";
    $("usage-dialog").showModal();
    await this.load();
  }

  query() {
    const bucket = $("usage-bucket").value;
    const days = { day: 30, week: 84, month: 365 }[bucket];
    const conv = this.current();
    const q = new URLSearchParams({ scope: this.scope, bucket, days: String(days) });
    if (this.scope === "conversation" || this.scope === "tree") q.set("conversation_id", conv || "");
    return q.toString();
  }

  async load() {
    for (const b of document.querySelectorAll(".usage-scopes [data-scope]")) {
      b.setAttribute("aria-pressed", String(b.dataset.scope === this.scope));
      if (b.dataset.scope === "conversation" || b.dataset.scope === "tree") b.disabled = !this.current();
    }
    try {
      const u = await api("GET", `/api/v1/usage?${this.query()}`);
      setError($("usage-error"), null);
      $("usage-totals").textContent = describe(u.totals);
      this.chart(u.series);
      $("usage-budgets").replaceChildren(...u.budgets.map((b) => {
        const amount = (v) => (b.unit === "cost" ? `$${v.toFixed(2)}` : `${v.toLocaleString()} tokens`);
        return h("li", { class: `budget${b.over ? " over" : ""}`, dataset: { budget: b.id } },
          `${b.scope} budget (${b.period}): ${amount(b.used)} of ${amount(b.limit)}`,
          b.over ? h("strong", null, " — reached: new turns are refused") : "");
      }));
    } catch (e) {
      setError($("usage-error"), e);
    }
  }

  /** Bars of total tokens per bucket (buckets without usage are absent). */
  chart(series) {
    const svg = $("usage-chart");
    svg.replaceChildren();
    const max = Math.max(1, ...series.map((p) => p.totals.total_tokens));
    const width = 600 / Math.max(series.length, 1);
    series.forEach((p, i) => {
      const height = (p.totals.total_tokens / max) * 150;
      const bar = document.createElementNS(SVG, "rect");
      bar.setAttribute("x", String(i * width + 2));
      bar.setAttribute("y", String(160 - height));
      bar.setAttribute("width", String(Math.max(width - 4, 1)));
      bar.setAttribute("height", String(height));
      bar.setAttribute("class", "usage-bar");
      const title = document.createElementNS(SVG, "title");
      title.textContent = `${new Date(p.start_ms).toISOString().slice(0, 10)}: ${describe(p.totals)}`;
      bar.append(title);
      svg.append(bar);
    });
  }
}
