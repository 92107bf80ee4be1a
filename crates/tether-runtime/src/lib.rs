//! tether-runtime
