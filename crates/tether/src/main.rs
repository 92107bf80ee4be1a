//! tether binary
fn main() {}
