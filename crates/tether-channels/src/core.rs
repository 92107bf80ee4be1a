//! What one running channel shares between its tasks: the adapter, the runtime, the
//! store, access rules, the chat ↔ conversation registry and the dispatcher's wake-up.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tether_proto::ConversationId;
use tether_runtime::Runtime;
use tether_store::{ChannelChat, NewOutbox, Store};
use tokio::sync::Notify;

use crate::ChannelError;
use crate::channel::{Address, Channel, OutMessage};
use crate::config::{GroupMode, Tuning};
use crate::format::Units;
use crate::render::Item;

/// One channel's shared state.
pub(crate) struct Core {
    pub channel: Arc<dyn Channel>,
    pub runtime: Runtime,
    pub store: Store,
    /// User ids allowed by the config file (pairing adds more, in the store).
    pub allowed_users: BTreeSet<String>,
    pub group_mode: GroupMode,
    pub tuning: Tuning,
    pub units: Units,
    /// Wakes the outbox dispatcher after rows were written.
    pub wake: Notify,
    /// Held by the row being delivered, which runs to its mark even when its leadership
    /// term ends meanwhile; a new term's dispatcher waits for it before it voids this
    /// node's earlier claims (else it would send that row again).
    pub delivering: tokio::sync::Mutex<()>,
    /// Mapped chats by conversation id (the pump's routing table).
    chats: Mutex<HashMap<ConversationId, ChannelChat>>,
    /// Tells the pump that a chat was mapped or unmapped (it follows the mapped ones).
    pub chats_changed: Notify,
    /// Wrong `/link <code>` tries per account.
    pub link_failures: crate::tries::LinkFailures,
}

pub(crate) type SharedCore = Arc<Core>;

impl Core {
    #[allow(clippy::too_many_arguments)]
    pub async fn new(
        channel: Arc<dyn Channel>,
        runtime: Runtime,
        store: Store,
        allowed_users: BTreeSet<String>,
        group_mode: GroupMode,
        tuning: Tuning,
        units: Units,
    ) -> Result<SharedCore, ChannelError> {
        let chats = store
            .channels()
            .channel_chats(channel.name())
            .await?
            .into_iter()
            .map(|c| (c.conversation_id.clone(), c))
            .collect();
        Ok(Arc::new(Core {
            channel,
            runtime,
            store,
            allowed_users,
            group_mode,
            tuning,
            units,
            wake: Notify::new(),
            delivering: tokio::sync::Mutex::new(()),
            chats: Mutex::new(chats),
            chats_changed: Notify::new(),
            link_failures: crate::tries::LinkFailures::default(),
        }))
    }

    pub fn name(&self) -> &'static str {
        self.channel.name()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ConversationId, ChannelChat>> {
        self.chats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The chat bound to a conversation, if it is one of this channel's.
    pub fn chat_of(&self, conversation_id: &ConversationId) -> Option<ChannelChat> {
        self.lock().get(conversation_id).cloned()
    }

    pub fn all_chats(&self) -> Vec<ChannelChat> {
        self.lock().values().cloned().collect()
    }

    pub fn remember_chat(&self, chat: ChannelChat) {
        self.lock().insert(chat.conversation_id.clone(), chat);
        self.chats_changed.notify_one();
    }

    pub fn forget_chat(&self, conversation_id: &ConversationId) {
        self.lock().remove(conversation_id);
        self.chats_changed.notify_one();
    }

    /// Takes the store's chat mapping (chats mapped by other nodes' webhooks, or while
    /// another node led); a known chat keeps the furthest cursor. Tells the pump when
    /// the set of chats changed.
    pub async fn reload_chats(&self) -> Result<(), ChannelError> {
        let stored = self.store.channels().channel_chats(self.name()).await?;
        let changed = {
            let mut chats = self.lock();
            let mut fresh: HashMap<ConversationId, ChannelChat> = HashMap::new();
            for mut c in stored {
                if let Some(known) = chats.get(&c.conversation_id) {
                    c.event_cursor = c.event_cursor.max(known.event_cursor);
                }
                fresh.insert(c.conversation_id.clone(), c);
            }
            let changed = fresh.len() != chats.len()
                || fresh.iter().any(|(k, c)| {
                    chats
                        .get(k)
                        .is_none_or(|old| old.chat_key != c.chat_key || old.address != c.address)
                });
            *chats = fresh;
            changed
        };
        if changed {
            self.chats_changed.notify_one();
        }
        Ok(())
    }

    /// Whether the conversation's replies come to this channel's chat (`reply_here`),
    /// as the store says now.
    pub fn set_muted(&self, conversation_id: &ConversationId, muted: bool) {
        if let Some(c) = self.lock().get_mut(conversation_id) {
            c.muted = muted;
        }
    }

    pub fn set_cursor(&self, conversation_id: &ConversationId, cursor: i64) {
        if let Some(c) = self.lock().get_mut(conversation_id) {
            c.event_cursor = c.event_cursor.max(cursor);
        }
    }

    /// An outbox row for `item` in the lane `chat_key`.
    pub fn row(
        &self,
        chat_key: &str,
        address: &str,
        item: &Item,
    ) -> Result<NewOutbox, ChannelError> {
        Ok(NewOutbox {
            channel: self.name().to_string(),
            chat_key: chat_key.to_string(),
            dedupe_key: item.key.clone(),
            op: if item.edit_of.is_some() {
                "edit"
            } else {
                "send"
            }
            .to_string(),
            target_key: item.edit_of.clone(),
            address: address.to_string(),
            body: serde_json::to_string(&item.msg)?,
            replace: item.replace,
            traceparent: None,
        })
    }

    /// Queues one plain message to an address (replies to commands, pairing notices).
    pub async fn reply(
        &self,
        chat_key: &str,
        address: &Address,
        key: String,
        msg: OutMessage,
    ) -> Result<(), ChannelError> {
        let item = Item {
            key,
            edit_of: None,
            msg,
            replace: false,
        };
        let row = self.row(chat_key, &serde_json::to_string(address)?, &item)?;
        self.store.channels().enqueue_outbox(&[row]).await?;
        self.wake.notify_one();
        Ok(())
    }
}

/// How often a channel's leader on a cluster looks for chats mapped on other nodes.
const CHATS_REFRESH: Duration = Duration::from_secs(2);

/// On a cluster, the leader's pump must follow chats that other nodes mapped (a webhook
/// taken by any node, or a chat first seen while another node led): re-read the mapping
/// at the start of every leadership term and then every [`CHATS_REFRESH`].
pub(crate) async fn refresh_chats(core: SharedCore) {
    let mut tick = tokio::time::interval(CHATS_REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = core.reload_chats().await {
            tracing::warn!(channel = core.name(), "cannot re-read the chats: {e}");
        }
    }
}
