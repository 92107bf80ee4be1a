-- Issue 33 (D261): approvals and questions are listed in pages, newest first, ties by id
-- (`requests/sql.rs`, `requests_page`): each page is an index range, not a sort of the
-- whole table. Expand only.
CREATE INDEX approvals_by_created ON approvals(created_at DESC, id);
CREATE INDEX questions_by_created ON questions(created_at DESC, id);
