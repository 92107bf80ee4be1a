//! Approvals and questions as the API and the channels list them (answered through
//! `Runtime::call` on the conversation's owner node, where the first answer wins,
//! `session/answers.rs`, and the waiting actor is told).

use tether_proto::{Approval, ApprovalStatus, Question, QuestionStatus};

use crate::conversations::Conversations;
use crate::error::Result;

impl Conversations<'_> {
    pub(crate) async fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
    ) -> Result<Vec<Approval>> {
        let all = self
            .rt
            .ctx()
            .store
            .requests()
            .list_approvals(status, None)
            .await?;
        self.rt.access().readable(all, |a| &a.conversation_id).await
    }

    pub(crate) async fn list_questions(
        &self,
        status: Option<QuestionStatus>,
    ) -> Result<Vec<Question>> {
        let all = self
            .rt
            .ctx()
            .store
            .requests()
            .list_questions(status, None)
            .await?;
        self.rt.access().readable(all, |q| &q.conversation_id).await
    }
}
