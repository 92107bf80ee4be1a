-- Issue 31 (rolling upgrades). A draining node takes no new conversations (placement sends
-- them to the others) and each node names the tether version it runs. `schema_info`
-- records, per applied migration, which tether version applied it and whether it breaks
-- older versions (`breaks_older`: a contract step; older nodes then refuse to start
-- instead of damaging data). Expand only: nodes of the version before ignore all three.
ALTER TABLE nodes ADD COLUMN draining_at INTEGER;
ALTER TABLE nodes ADD COLUMN version TEXT NOT NULL DEFAULT '';
CREATE TABLE schema_info (
    migration INTEGER PRIMARY KEY,
    tether_version TEXT NOT NULL,
    breaks_older INTEGER NOT NULL
);
