-- SQLite migration 0026.
-- Subscription accounts' usage windows as their vendors report them (issue 29): the
-- latest used percent of each window (Codex's primary and secondary, Claude's five-hour
-- and seven-day) with its reset. Window budgets compare against it.
CREATE TABLE account_windows (
    account TEXT NOT NULL,
    window_name TEXT NOT NULL,
    used_percent BIGINT NOT NULL,
    resets_at BIGINT,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (account, window_name)
);
