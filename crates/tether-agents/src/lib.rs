//! tether-agents
