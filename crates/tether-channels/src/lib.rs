//! tether-channels: Telegram and Feishu adapters (work in progress).
