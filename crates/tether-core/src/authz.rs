//! Who may do what (issue 28): the capability table, written once, and the one decision
//! every route, MCP tool, channel command and the page pass through (the runtime calls
//! [`decide`] where every `Command` passes; listings filter with it).
//!
//! A decision weighs three things: the person's [`Role`], the [`TokenScope`]s of what
//! they signed in with (a personal token may carry fewer than all; a sign-in session
//! carries all), and, for an action on a conversation, whether it is theirs and its
//! [`Visibility`]. A conversation the person may not read does not exist for them
//! ([`Denied::Hidden`], answered 404, never 403), so its id leaks nothing; one they may
//! read but not change is [`Denied::Forbidden`].

use tether_proto::{PersonId, Role, TokenScope, Visibility};

/// What someone wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Read a conversation: its history, events, attachments, turn files, tasks.
    Read,
    /// Change a conversation: a message, its settings, `/new`, stop, detach, archive,
    /// continue or close its tasks.
    Write,
    /// Decide an approval or answer a question of a conversation.
    Answer,
    /// Start a conversation.
    CreateConversation,
    /// See the node: agents, the pool, the cluster, figures (lists in them are filtered).
    ReadNode,
    /// Create, list and revoke one's own tokens.
    ManageOwnTokens,
    /// Link and unlink one's own channel accounts.
    LinkSelf,
    /// Add people, change roles, disable people.
    ManagePeople,
    /// List and revoke anyone's tokens.
    ManageTokens,
    /// Link and unlink anyone's channel accounts.
    LinkOthers,
    /// Approve or refuse a stranger's pairing request.
    DecidePairing,
    /// Read the audit log.
    ReadAudit,
    /// Read anyone's usage and the team's (one's own and one's conversations' usage is
    /// `Read` on them).
    ReadTeamUsage,
    /// Create and delete budgets.
    ManageBudgets,
    /// Operate the node (issue 31): drain it, read its metrics.
    OperateNode,
}

impl Action {
    /// Every action, in the table's order.
    pub const ALL: &'static [Action] = &[
        Action::Read,
        Action::Write,
        Action::Answer,
        Action::CreateConversation,
        Action::ReadNode,
        Action::ManageOwnTokens,
        Action::LinkSelf,
        Action::ManagePeople,
        Action::ManageTokens,
        Action::LinkOthers,
        Action::DecidePairing,
        Action::ReadAudit,
        Action::ReadTeamUsage,
        Action::ManageBudgets,
        Action::OperateNode,
    ];

    /// Whether the action is on one conversation (and needs its [`Target`]).
    pub fn on_conversation(self) -> bool {
        matches!(self, Action::Read | Action::Write | Action::Answer)
    }
}

/// One row of the table: the scope a token needs, and the lowest role that may act — on
/// one's own conversation (or, for actions not on a conversation, at all), on someone
/// else's team conversation, and on someone else's private one (`None`: nobody).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub scope: TokenScope,
    pub own: Role,
    pub team: Option<Role>,
    pub private: Option<Role>,
}

/// The capability table (documented in the README's "Teams" section, checked by a test).
pub fn rule(action: Action) -> Rule {
    use Role::{Admin, Member, Viewer};
    use TokenScope as S;
    let global = |scope, own| Rule {
        scope,
        own,
        team: None,
        private: None,
    };
    match action {
        Action::Read => Rule {
            scope: S::Read,
            own: Viewer,
            team: Some(Viewer),
            private: Some(Admin),
        },
        Action::Write => Rule {
            scope: S::Write,
            own: Member,
            team: Some(Member),
            private: Some(Admin),
        },
        Action::Answer => Rule {
            scope: S::Approve,
            own: Member,
            team: Some(Member),
            private: Some(Admin),
        },
        Action::CreateConversation => global(S::Write, Member),
        Action::ReadNode => global(S::Read, Viewer),
        Action::ManageOwnTokens => global(S::Admin, Viewer),
        Action::LinkSelf => global(S::Write, Viewer),
        Action::ManagePeople => global(S::Admin, Admin),
        Action::ManageTokens => global(S::Admin, Admin),
        Action::LinkOthers => global(S::Admin, Admin),
        Action::DecidePairing => global(S::Admin, Admin),
        Action::ReadAudit => global(S::Admin, Admin),
        Action::ReadTeamUsage => global(S::Read, Admin),
        Action::ManageBudgets => global(S::Admin, Admin),
        Action::OperateNode => global(S::Admin, Admin),
    }
}

/// The scopes a credential carries (a set of [`TokenScope`]s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scopes(u8);

impl Scopes {
    /// Every scope: a sign-in session, the bootstrap owner token.
    pub const ALL: Scopes = Scopes(0b1111);

    /// Exactly these scopes.
    pub fn of(scopes: &[TokenScope]) -> Scopes {
        Scopes(scopes.iter().fold(0, |bits, s| bits | bit(*s)))
    }

    pub fn contains(self, scope: TokenScope) -> bool {
        self.0 & bit(scope) != 0
    }

    /// The scopes, in declaration order.
    pub fn list(self) -> Vec<TokenScope> {
        TokenScope::ALL
            .iter()
            .copied()
            .filter(|s| self.contains(*s))
            .collect()
    }
}

fn bit(scope: TokenScope) -> u8 {
    match scope {
        TokenScope::Read => 1,
        TokenScope::Write => 2,
        TokenScope::Approve => 4,
        TokenScope::Admin => 8,
    }
}

/// Who acts: a person with their role, through a credential with its scopes.
#[derive(Debug, Clone, Copy)]
pub struct Actor<'a> {
    pub person: &'a PersonId,
    pub role: Role,
    pub scopes: Scopes,
}

/// The conversation acted on: whose it is and who else sees it.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub owner: &'a PersonId,
    pub visibility: Visibility,
}

/// Why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// The conversation is not theirs to see: it does not exist for them (404).
    #[error("no such conversation")]
    Hidden,
    /// They see it (or the action is not on a conversation) but their role may not do this.
    #[error("your role may not do this")]
    Forbidden,
    /// The credential lacks the scope the action needs.
    #[error("this token lacks the `{0}` scope")]
    Scope(TokenScope),
    /// An action on a conversation was asked without naming one (a caller's bug).
    #[error("no conversation named")]
    NoTarget,
}

impl Denied {
    /// The stable wire code.
    pub fn code(self) -> tether_proto::ErrorCode {
        use tether_proto::ErrorCode;
        match self {
            Denied::Hidden => ErrorCode::NotFound,
            Denied::Forbidden | Denied::Scope(_) => ErrorCode::Forbidden,
            Denied::NoTarget => ErrorCode::Internal,
        }
    }
}

/// How high a role stands (owner highest).
fn rank(role: Role) -> u8 {
    match role {
        Role::Owner => 3,
        Role::Admin => 2,
        Role::Member => 1,
        Role::Viewer => 0,
    }
}

/// Whether `role` is `min` or above.
pub fn at_least(role: Role, min: Role) -> bool {
    rank(role) >= rank(min)
}

/// The lowest role that may do `action` on `target` as `actor` sees it (`None`: nobody).
fn lowest(rule: &Rule, actor: &Actor<'_>, target: &Target<'_>) -> Option<Role> {
    if target.owner == actor.person {
        return Some(rule.own);
    }
    of_others(rule, target.visibility)
}

/// The lowest role that may do a rule's action on someone else's conversation.
fn of_others(rule: &Rule, visibility: Visibility) -> Option<Role> {
    match visibility {
        Visibility::Team => rule.team,
        Visibility::Private => rule.private,
    }
}

/// Whether `actor` may do `action` on every conversation, whoever's it is and whoever
/// sees it: then [`decide`] needs no conversation row (an unknown one is still
/// `not_found` where the command runs).
pub fn allowed_on_any(actor: &Actor<'_>, action: Action) -> bool {
    let on_all = |rule: &Rule| {
        at_least(actor.role, rule.own)
            && Visibility::ALL
                .iter()
                .all(|v| of_others(rule, *v).is_some_and(|min| at_least(actor.role, min)))
    };
    let wanted = rule(action);
    action.on_conversation()
        && actor.scopes.contains(wanted.scope)
        && on_all(&rule(Action::Read))
        && on_all(&wanted)
}

/// May `actor` do `action` (on `target`, for an action on a conversation)?
pub fn decide(
    actor: &Actor<'_>,
    action: Action,
    target: Option<&Target<'_>>,
) -> Result<(), Denied> {
    let rule = rule(action);
    if action.on_conversation() {
        let target = target.ok_or(Denied::NoTarget)?;
        // Hidden first: a conversation one may not read says nothing, whatever the scope.
        let read = lowest(&self::rule(Action::Read), actor, target);
        if !read.is_some_and(|min| at_least(actor.role, min)) {
            return Err(Denied::Hidden);
        }
        if !actor.scopes.contains(rule.scope) {
            return Err(Denied::Scope(rule.scope));
        }
        return match lowest(&rule, actor, target) {
            Some(min) if at_least(actor.role, min) => Ok(()),
            _ => Err(Denied::Forbidden),
        };
    }
    if !actor.scopes.contains(rule.scope) {
        return Err(Denied::Scope(rule.scope));
    }
    if at_least(actor.role, rule.own) {
        Ok(())
    } else {
        Err(Denied::Forbidden)
    }
}

/// Whether `actor_role` may move someone from `current` to `new`: the owner may do
/// anything; an admin moves people between member and viewer only (never touching an
/// admin or an owner, never making one). Keeping at least one owner is the store's check.
pub fn may_set_role(actor_role: Role, current: Role, new: Role) -> bool {
    match actor_role {
        Role::Owner => true,
        Role::Admin => !at_least(current, Role::Admin) && !at_least(new, Role::Admin),
        Role::Member | Role::Viewer => false,
    }
}

#[cfg(test)]
#[path = "authz_tests.rs"]
mod tests;
