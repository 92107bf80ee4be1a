//! tether-store
