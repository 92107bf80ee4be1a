//! `sqlx::migrate!` embeds `migrations/` at compile time; a new or changed migration must
//! rebuild this crate (sqlx's documented build script).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
