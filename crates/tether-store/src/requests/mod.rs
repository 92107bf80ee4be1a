//! Pending requests of agents to people: approvals (allow or deny a tool call) and
//! questions (free text). Both are one family in the store (`sql.rs`): created with
//! their event, marking the turn waiting; resolved at most once (the conditional update
//! lets the first answer win).

use tether_proto::{ApprovalId, ConversationId, Decision, QuestionId, SessionId, TurnId};

/// An approval to insert.
#[derive(Debug, Clone)]
pub struct NewApproval {
    pub id: ApprovalId,
    pub conversation_id: ConversationId,
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub title: String,
    pub kind: Option<String>,
    pub detail: Option<serde_json::Value>,
    pub options: Vec<Decision>,
    pub deadline_ms: i64,
}

/// A question to insert.
#[derive(Debug, Clone)]
pub struct NewQuestion {
    pub id: QuestionId,
    pub conversation_id: ConversationId,
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub prompt: String,
    pub deadline_ms: i64,
}

/// Where a page of approvals or questions starts: after the request created at
/// `created_at_ms` with id `id` (lists are newest first, ties by id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPlace {
    pub created_at_ms: i64,
    pub id: String,
}

/// The statement of a page of `table` (`sql.rs`, `requests_page`), with only the
/// filters given, each an index range: `status` is a literal of the code's (a status's
/// `as_str`), so `pending` reads the partial index of pending requests; the
/// conversation is the first parameter when given, the place after which the page
/// starts the next two (`created_at`, `id`), the limit the last. The place is a seek:
/// `created_at <= $a` bounds the index range, the rest breaks the tie.
pub(crate) fn page_sql(
    table: &str,
    status: Option<&'static str>,
    by_conversation: bool,
    after: bool,
) -> String {
    let mut conds = Vec::new();
    let mut n = 0;
    if let Some(s) = status {
        debug_assert!(s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        conds.push(format!("status = '{s}'"));
    }
    if by_conversation {
        n += 1;
        conds.push(format!("conversation_id = ${n}"));
    }
    if after {
        let (at, id) = (n + 1, n + 2);
        n += 2;
        conds.push(format!(
            "created_at <= ${at} AND (created_at < ${at} OR id > ${id})"
        ));
    }
    let filter = if conds.is_empty() {
        String::new()
    } else {
        format!("WHERE {} ", conds.join(" AND "))
    };
    format!(
        "SELECT * FROM {table} {filter}ORDER BY created_at DESC, id LIMIT ${}",
        n + 1
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use sqlx::{Connection, SqliteConnection};

    use super::page_sql;

    #[tokio::test]
    async fn pages_read_index_ranges() {
        let mut c = SqliteConnection::connect("sqlite::memory:").await.unwrap();
        sqlx::migrate!("./migrations").run(&mut c).await.unwrap();
        for table in ["approvals", "questions"] {
            for status in [None, Some("pending"), Some("resolved")] {
                for by_conversation in [false, true] {
                    for after in [false, true] {
                        let sql = page_sql(table, status, by_conversation, after);
                        let mut q = sqlx::query_as::<_, (i64, i64, i64, String)>(Box::leak(
                            format!("EXPLAIN QUERY PLAN {sql}").into_boxed_str(),
                        ));
                        if by_conversation {
                            q = q.bind("c");
                        }
                        if after {
                            q = q.bind(1_i64).bind("x");
                        }
                        let plan: Vec<String> = q
                            .bind(10_i64)
                            .fetch_all(&mut c)
                            .await
                            .unwrap()
                            .into_iter()
                            .map(|r| r.3)
                            .collect();
                        let at = format!("{table} {status:?} {by_conversation} {after}: {plan:?}");
                        if status == Some("pending") {
                            assert!(
                                plan.iter().any(|l| l.contains(&format!("{table}_pending"))),
                                "{at}"
                            );
                        } else if after {
                            assert!(
                                plan.iter().any(|l| l.starts_with(&format!(
                                    "SEARCH {table} USING INDEX {table}_by_created (created_at<?)"
                                ))),
                                "{at}"
                            );
                        }
                    }
                }
            }
        }
    }
}
