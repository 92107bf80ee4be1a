-- Budgets (issue 29). Each ledger row gets the id of the report it records (a retried
-- write whose first answer was lost stores it once) and a mark for a turn whose agent
-- reported no usage at all (an unknown, counted apart, never a silent zero).
ALTER TABLE usage_ledger ADD COLUMN report_id TEXT;
ALTER TABLE usage_ledger ADD COLUMN unreported INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX usage_by_report ON usage_ledger (report_id);
-- A budget over a conversation, a delegation tree (its root), a person or the team
-- (scope_id NULL), in tokens or cost (nano-dollars), per day / week / month or none.
CREATE TABLE budgets (
    id TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    scope_id TEXT,
    unit TEXT NOT NULL,
    cap INTEGER NOT NULL,
    warn_percent INTEGER,
    period TEXT NOT NULL,
    created_by TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX budgets_by_scope ON budgets (scope, scope_id);
-- What each budget has used in each period: one row, added to under its lock, so the
-- report that crosses the cap reads the sum that includes every other report.
CREATE TABLE budget_counters (
    budget_id TEXT NOT NULL REFERENCES budgets (id) ON DELETE CASCADE,
    period_start INTEGER NOT NULL,
    used INTEGER NOT NULL,
    PRIMARY KEY (budget_id, period_start)
);
