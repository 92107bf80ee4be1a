//! tether-server
