//! Approvals and questions as the API and the channels list them (answered through
//! `Runtime::call` on the conversation's owner node, where the first answer wins,
//! `session/answers.rs`, and the waiting actor is told).
//!
//! The lists come in pages, newest first, after an opaque cursor (`<created_at_ms>.<id>`
//! of the last request of the page before): every request ever made stays reachable
//! (a list used to stop at the newest 500, so with more pending ones the oldest were
//! out of sight). A page holds the requests the caller may read among `limit` stored
//! ones, so it can be shorter than `limit` and still have a next page; the cursor, not
//! the page's length, tells.

use tether_proto::{Approval, ApprovalStatus, Question, QuestionStatus};
use tether_store::RequestPlace;

use crate::RuntimeError;
use crate::conversations::Conversations;
use crate::error::Result;

/// A page of approvals or questions and the cursor of the next page (`None`: the last).
#[derive(Debug, Clone)]
pub struct RequestPage<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// `<created_at_ms>.<id>` → where a page starts.
fn parse_cursor(text: &str) -> Result<RequestPlace> {
    let bad = || RuntimeError::BadRequest(format!("cursor {text:?} is not a cursor from a page"));
    let (at, id) = text.split_once('.').ok_or_else(bad)?;
    if id.is_empty() {
        return Err(bad());
    }
    Ok(RequestPlace {
        created_at_ms: at.parse().map_err(|_| bad())?,
        id: id.to_owned(),
    })
}

/// `stored` (read with one more than `limit`) cut to the page, and the next page's
/// cursor when there is more: the last request of the page.
fn cut<T>(
    mut stored: Vec<T>,
    limit: u32,
    place: impl Fn(&T) -> (i64, &str),
) -> (Vec<T>, Option<String>) {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if stored.len() <= limit {
        return (stored, None);
    }
    stored.truncate(limit);
    let next = stored.last().map(|r| {
        let (at, id) = place(r);
        format!("{at}.{id}")
    });
    (stored, next)
}

impl crate::Runtime {
    /// One page of approvals, newest first (`cursor`: the previous page's `next_cursor`).
    pub async fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<RequestPage<Approval>> {
        self.conversations()
            .list_approvals(status, cursor, limit)
            .await
    }
    /// One page of questions, newest first (`cursor`: the previous page's `next_cursor`).
    pub async fn list_questions(
        &self,
        status: Option<QuestionStatus>,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<RequestPage<Question>> {
        self.conversations()
            .list_questions(status, cursor, limit)
            .await
    }
}

impl Conversations<'_> {
    pub(crate) async fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<RequestPage<Approval>> {
        let after = cursor.map(parse_cursor).transpose()?;
        let stored = self
            .rt
            .ctx()
            .store
            .requests()
            .approvals_page(status, after.as_ref(), limit.saturating_add(1))
            .await?;
        let (page, next) = cut(stored, limit, |a| (a.created_at_ms, a.id.as_str()));
        let items = self
            .rt
            .access()
            .readable(page, |a| &a.conversation_id)
            .await?;
        Ok(RequestPage {
            items,
            next_cursor: next,
        })
    }

    pub(crate) async fn list_questions(
        &self,
        status: Option<QuestionStatus>,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<RequestPage<Question>> {
        let after = cursor.map(parse_cursor).transpose()?;
        let stored = self
            .rt
            .ctx()
            .store
            .requests()
            .questions_page(status, after.as_ref(), limit.saturating_add(1))
            .await?;
        let (page, next) = cut(stored, limit, |q| (q.created_at_ms, q.id.as_str()));
        let items = self
            .rt
            .access()
            .readable(page, |q| &q.conversation_id)
            .await?;
        Ok(RequestPage {
            items,
            next_cursor: next,
        })
    }
}
