//! Who sent a channel message (issue 28), and the two commands that are about people
//! rather than the agent: `/link` and `/here`.
//!
//! - A **linked** account (see `tether_runtime::People::account_identity`) acts as its
//!   person: every call is checked against their role, history says "alice on Telegram",
//!   and the account's own chat (a direct message, or its lane in a group with
//!   `group_mode = "user"`) is handed to them on their first message after the link.
//!   A chat the whole group shares is the team's (visibility `team`): its people all
//!   read the replies anyway.
//! - An **admitted** account (the config's `allowed_users`, or an approved pairing) that
//!   is not linked acts for the install's owner, named by the account, as before people
//!   existed (an upgraded install keeps working).
//! - A **stranger** gets a pairing code, or links with a code the page gave.
//!
//! `/link` gives a code to enter on the page; `/link <code>` takes one the page gave.
//! Wrong codes are counted per account (`tries.rs`). `/here <conversation>` carries a conversation the person may
//! write to into this chat: the same agent session goes on here, and its replies come to
//! the chat its latest message came from.

use std::time::Instant;

use tether_core::authz::Action;
use tether_proto::{ConversationId, ErrorCode, Visibility};
use tether_runtime::{AccountStatus, Identity, Runtime, RuntimeError};

use crate::ChannelError;
use crate::chats::{label, own_lane};
use crate::core::SharedCore;
use crate::inbound::Inbound;

/// Who a message is from.
pub(crate) enum Who {
    /// A linked account: `rt` acts as the person.
    Person {
        rt: Runtime,
        identity: Identity,
    },
    /// Allowed here, not linked: tether's own runtime, for the install's owner.
    Admitted,
    /// Linked to a disabled person: nothing they send is taken.
    Disabled,
    Stranger,
}

impl Who {
    /// The runtime to act with and the name history records.
    pub(crate) fn acting(&self, core: &SharedCore, msg: &Inbound) -> (Runtime, String) {
        match self {
            Who::Person { rt, .. } => (rt.clone(), label(core.name()).to_owned()),
            Who::Admitted | Who::Disabled | Who::Stranger => (
                core.runtime.clone(),
                format!("{}:{}", core.name(), msg.sender.name),
            ),
        }
    }
}

/// Who sent `msg`.
pub(crate) async fn of(core: &SharedCore, msg: &Inbound) -> Result<Who, ChannelError> {
    let status = core
        .runtime
        .people()
        .account_identity(core.name(), &msg.sender.id)
        .await?;
    Ok(match status {
        AccountStatus::Linked(identity) => Who::Person {
            rt: core.runtime.acting_as(identity.clone()),
            identity,
        },
        AccountStatus::Disabled => Who::Disabled,
        AccountStatus::Unlinked if allowed(core, &msg.sender.id).await? => Who::Admitted,
        AccountStatus::Unlinked => Who::Stranger,
    })
}

/// The sender may talk to the agents here: allowed by the config file or by pairing.
pub(crate) async fn allowed(core: &SharedCore, user_id: &str) -> Result<bool, ChannelError> {
    Ok(core.allowed_users.contains(user_id)
        || core
            .store
            .channels()
            .channel_user_allowed(core.name(), user_id)
            .await?)
}

/// Before a linked person's message runs in `conversation`: their own lane's
/// conversation becomes theirs, a shared lane's the team's.
pub(crate) async fn claim(
    core: &SharedCore,
    msg: &Inbound,
    who: &Who,
    conversation: &ConversationId,
) -> Result<(), ChannelError> {
    let Who::Person { identity, .. } = who else {
        return Ok(());
    };
    let Some(row) = core
        .store
        .conversations()
        .get_conversation(conversation)
        .await?
    else {
        return Ok(());
    };
    let (owner, visibility) = if own_lane(core, msg) {
        (identity.person.clone(), row.visibility)
    } else {
        let owner = row
            .owner_id
            .clone()
            .unwrap_or_else(|| core.runtime.owner_identity().person);
        (owner, Visibility::Team)
    };
    if row.owner_id.as_ref() != Some(&owner) || row.visibility != visibility {
        core.store
            .people()
            .set_conversation_owner(conversation, &owner, visibility)
            .await?;
    }
    Ok(())
}

/// `/link` and `/here`: the answer when `text` is one of them (`None`: it is not).
pub(crate) async fn command(
    core: &SharedCore,
    msg: &Inbound,
    chat_key: &str,
    who: &Who,
    text: &str,
) -> Result<Option<String>, ChannelError> {
    let mut words = text.split_whitespace();
    let word = words.next().unwrap_or_default();
    let arg = words.next();
    match word {
        "/link" => link(core, msg, who, arg).await.map(Some),
        "/here" if !matches!(who, Who::Stranger) => {
            here(core, msg, chat_key, who, arg).await.map(Some)
        }
        _ => Ok(None),
    }
}

async fn link(
    core: &SharedCore,
    msg: &Inbound,
    who: &Who,
    code: Option<&str>,
) -> Result<String, ChannelError> {
    let people = core.runtime.people();
    match (who, code) {
        (Who::Person { identity, .. }, _) => Ok(format!(
            "This account is linked to {} already. To link it to someone else, unlink it \
             on the tether page first.",
            identity.name
        )),
        (Who::Disabled, _) => Ok("This account's person is disabled here.".to_owned()),
        (Who::Stranger, None) => Ok("On this tether's team? Make a link code on the tether \
             page (Accounts) and send /link <code> here."
            .to_owned()),
        (Who::Admitted, None) => {
            let c = people
                .link_code_for_account(core.name(), &msg.sender.id, &msg.sender.name)
                .await?;
            Ok(format!(
                "🔗 Your link code is {} (ten minutes, once). Sign in to the tether page as \
                 yourself and enter it under Accounts: this {} account then acts as you.",
                c.code,
                label(core.name())
            ))
        }
        (Who::Admitted | Who::Stranger, Some(code)) => {
            let now = Instant::now();
            if core.link_failures.blocked(&msg.sender.id, now) {
                return Ok("Too many wrong link codes: wait a few minutes.".to_owned());
            }
            let linked = people
                .redeem_on_channel(core.name(), &msg.sender.id, &msg.sender.name, code)
                .await;
            match linked {
                Ok(a) => {
                    let p = people.account_identity(core.name(), &a.user_id).await?;
                    let name = match p {
                        AccountStatus::Linked(i) => i.name,
                        AccountStatus::Disabled | AccountStatus::Unlinked => {
                            a.person_id.to_string()
                        }
                    };
                    Ok(format!(
                        "✅ Linked: what this account sends now acts as {name}."
                    ))
                }
                Err(e) if e.code() == ErrorCode::NotFound => {
                    core.link_failures.failed(&msg.sender.id, now);
                    Ok("That link code is unknown, used or expired.".to_owned())
                }
                Err(e) if e.code() == ErrorCode::Conflict => {
                    Ok("This account is linked to someone already.".to_owned())
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

async fn here(
    core: &SharedCore,
    msg: &Inbound,
    chat_key: &str,
    who: &Who,
    id: Option<&str>,
) -> Result<String, ChannelError> {
    let Who::Person { rt, .. } = who else {
        return Ok(
            "Link this account first (/link): /here carries your own conversations \
             between channels."
                .to_owned(),
        );
    };
    let Some(id) = id else {
        return Ok(
            "Usage: /here <conversation id> (the page shows it under \"Continue on…\").".to_owned(),
        );
    };
    let id = ConversationId::from(id.trim());
    let conv = match rt.get_conversation(&id).await {
        Ok(c) => c,
        Err(RuntimeError::NotFound { .. }) => return Ok("No such conversation.".to_owned()),
        Err(e) => return Err(e.into()),
    };
    if let Err(e) = rt.people().may_on(&id, Action::Write).await {
        return Ok(format!("⚠️ {e}"));
    }
    if conv.archived {
        return Ok("That conversation is archived.".to_owned());
    }
    if let Some(other) = core.chat_of(&id) {
        if other.chat_key == chat_key {
            return Ok(format!("This chat is in “{}” already.", conv.title));
        }
        return Ok(format!(
            "“{}” is in another {} chat already; /here carries a conversation between \
             channels and the page.",
            conv.title,
            label(core.name())
        ));
    }
    let store = core.store.channels();
    let head = store.conversation_head(&id).await?;
    let chat = match store.channel_chat(core.name(), chat_key).await? {
        Some(old) => {
            core.forget_chat(&old.conversation_id);
            store
                .remap_channel_chat(core.name(), chat_key, &id, head)
                .await?
        }
        None => {
            let address = serde_json::to_string(&msg.address())?;
            store
                .insert_channel_chat(core.name(), chat_key, &id, &address, head)
                .await?
        }
    };
    store.reply_here(core.name(), chat_key, &id).await?;
    let mut chat = chat;
    chat.muted = false;
    core.remember_chat(chat);
    Ok(format!(
        "➡️ Here: “{}”. The same session goes on in this chat; its replies now come here.",
        conv.title
    ))
}
