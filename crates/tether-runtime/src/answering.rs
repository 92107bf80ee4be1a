//! Approvals and questions as the API and the channels answer them: listed from the
//! store, answered on the conversation's owner node (`Runtime::routed`), where the first
//! answer wins (`session/answers.rs`) and the waiting actor is told.

use tether_proto::{
    Approval, ApprovalId, ApprovalStatus, Decision, Question, QuestionId, QuestionStatus,
};

use crate::Runtime;
use crate::cluster::Forwarded;
use crate::error::Result;
use crate::session::answers;

impl Runtime {
    pub async fn list_approvals(&self, status: Option<ApprovalStatus>) -> Result<Vec<Approval>> {
        Ok(self.ctx().store.list_approvals(status, None).await?)
    }

    /// First answer wins; a second gets `approval_already_resolved`.
    pub async fn answer_approval(
        &self,
        id: &ApprovalId,
        decision: Decision,
        by: &str,
    ) -> Result<Approval> {
        let approval = self.ctx().store.get_approval(id).await?;
        let conv = approval.as_ref().map(|a| a.conversation_id.clone());
        let command = || Forwarded::AnswerApproval {
            approval_id: id.clone(),
            decision,
            by: by.to_owned(),
        };
        self.routed(conv.as_ref(), command, || async {
            // The actor that waits for it runs here (this node owns the conversation).
            let actor = approval.and_then(|a| self.existing_actor(&a.session_id));
            answers::answer_approval(self.ctx(), actor.as_ref(), id, decision, by).await
        })
        .await
    }

    pub async fn list_questions(&self, status: Option<QuestionStatus>) -> Result<Vec<Question>> {
        Ok(self.ctx().store.list_questions(status, None).await?)
    }

    pub async fn answer_question(
        &self,
        id: &QuestionId,
        answer: &str,
        by: &str,
    ) -> Result<Question> {
        let question = self.ctx().store.get_question(id).await?;
        let conv = question.as_ref().map(|q| q.conversation_id.clone());
        let command = || Forwarded::AnswerQuestion {
            question_id: id.clone(),
            answer: answer.to_owned(),
            by: by.to_owned(),
        };
        self.routed(conv.as_ref(), command, || async {
            let actor = question.and_then(|q| self.existing_actor(&q.session_id));
            answers::answer_question(self.ctx(), actor.as_ref(), id, answer, by).await
        })
        .await
    }
}
