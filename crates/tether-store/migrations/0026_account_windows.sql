-- Subscription accounts' usage windows as their vendors report them (issue 29): the
-- latest used percent of each window (Codex's primary and secondary, Claude's five-hour
-- and seven-day) with its reset. Window budgets compare against it.
CREATE TABLE account_windows (
    account TEXT NOT NULL,
    window_name TEXT NOT NULL,
    used_percent INTEGER NOT NULL,
    resets_at INTEGER,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (account, window_name)
);
