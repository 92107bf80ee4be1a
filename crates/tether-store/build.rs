//! Build script of tether-store.
//!
//! - `sqlx::migrate!` embeds `migrations/` at compile time; a new or changed migration
//!   must rebuild this crate (sqlx's documented build script).
//! - Each public store method is declared once, as an async method of the backend's `Db`
//!   in one of the SQL files compiled per backend (the list in `src/backend/mod.rs`).
//!   This writes the method that runs it on the backend the store was opened on
//!   (`$OUT_DIR/store_forwarders.rs`, included by `src/backend/mod.rs`): same name,
//!   arguments, return type, documentation and visibility (`pub` or `pub(crate)`; a
//!   `pub(super)` or private method is the backend's own). The compiler then checks the
//!   forwarder against both backends.
//! - The folder of the SQL file decides where the method lands: a file of a concept
//!   folder (`../events/sql.rs`) puts it on that concept's handle (`Events`, reached by
//!   `store.events()`), a file of `backend/` itself on `Store`. The handles and their
//!   accessors are written here too (`$OUT_DIR/store_handles.rs`, included by
//!   `src/handles.rs`): one per concept folder the list names.

use std::collections::BTreeSet;
use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use quote::{ToTokens, format_ident, quote};

/// `Db` methods whose store side is written by hand (`src/cluster/tail.rs`, on the
/// `Cluster` handle: a claim first syncs the tail), so no forwarder is written for them.
const BY_HAND: &[&str] = &["claim_conversation", "take_over_conversation"];

/// The file that lists the SQL files compiled per backend.
const MODULE_LIST: &str = "src/backend/mod.rs";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed={MODULE_LIST}");
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let list = root.join(MODULE_LIST);
    let mut out = String::from("// Written by build.rs from the files `backend_modules!` lists.\n");
    let mut concepts = BTreeSet::new();
    let mut by_hand_seen = Vec::new();
    for (path, module) in module_list(&std::fs::read_to_string(&list)?)? {
        let file = list
            .parent()
            .ok_or("the module list has no folder")?
            .join(&path);
        println!("cargo:rerun-if-changed={}", file.display());
        let source = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let parsed = syn::parse_file(&source)
            .map_err(|e| format!("cannot parse {}: {e}", file.display()))?;
        let concept = concept_of(&path)?;
        if let Some(c) = &concept {
            concepts.insert(c.clone());
        }
        let target = Target::of(concept.as_deref());
        let forwarders = forwarders(&parsed, &target, &mut by_hand_seen, &file)?;
        if forwarders.is_empty() {
            continue;
        }
        // The forwarders see the names the file imports (less its backend siblings).
        let uses = parsed.items.iter().filter_map(|item| match item {
            syn::Item::Use(u) if !starts_with_super(&u.tree) => Some(u),
            _ => None,
        });
        let name = format_ident!("forward_{}", module);
        let doc = format!("The store methods of `{path}`.");
        let self_ty = &target.self_ty;
        let tokens = quote! {
            #[doc = #doc]
            #[allow(unused_imports)]
            mod #name {
                #(#uses)*
                use super::{Backend, UNBOUNDED};
                impl #self_ty {
                    #(#forwarders)*
                }
            }
        };
        writeln!(out, "{tokens}")?;
    }
    for name in BY_HAND {
        if !by_hand_seen.contains(name) {
            return Err(format!("BY_HAND names {name}, which no listed file declares").into());
        }
    }
    let dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(dir.join("store_forwarders.rs"), out)?;
    std::fs::write(dir.join("store_handles.rs"), handles(&concepts)?)?;
    Ok(())
}

/// The concept folder of a listed path (`../events/sql.rs`: `events`), or `None` for a
/// file of `backend/` itself.
fn concept_of(path: &str) -> Result<Option<String>, Box<dyn Error>> {
    let Some(rest) = path.strip_prefix("../") else {
        return Ok(None);
    };
    let (folder, _) = rest
        .split_once('/')
        .ok_or_else(|| format!("{path}: a listed file outside a concept folder"))?;
    let ok = folder.starts_with(|c: char| c.is_ascii_lowercase())
        && folder
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !ok {
        return Err(format!("{path}: the folder {folder:?} is not a concept's name").into());
    }
    Ok(Some(folder.to_string()))
}

/// The handle type of a concept: `events` → `Events`, `view_parts` → `ViewParts`.
fn handle_ident(concept: &str) -> proc_macro2::Ident {
    let name: String = concept
        .split('_')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or(String::new(), |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect();
    format_ident!("{}", name)
}

/// Where the forwarders of one file go: the concept's handle or `Store`.
struct Target {
    /// The type of the `impl` block.
    self_ty: proc_macro2::TokenStream,
    /// The receiver of the forwarders (`self` on a handle, which is `Copy`).
    receiver: proc_macro2::TokenStream,
    /// The expression that is the `Store` inside a forwarder.
    store: proc_macro2::TokenStream,
}

impl Target {
    fn of(concept: Option<&str>) -> Target {
        match concept {
            Some(c) => {
                let handle = handle_ident(c);
                Target {
                    self_ty: quote!(crate::#handle<'_>),
                    receiver: quote!(self),
                    store: quote!(self.store),
                }
            }
            None => Target {
                self_ty: quote!(crate::Store),
                receiver: quote!(&self),
                store: quote!(self),
            },
        }
    }
}

/// The handle types, one per concept folder, and their accessors on `Store`.
fn handles(concepts: &BTreeSet<String>) -> Result<String, Box<dyn Error>> {
    let mut out = String::from("// Written by build.rs: one handle per concept folder.\n");
    for concept in concepts {
        let handle = handle_ident(concept);
        let accessor = format_ident!("{}", concept);
        let doc = format!(
            "The store's `{concept}` calls (the SQL of `src/{concept}/`): \
             `store.{concept}().…`. A borrowed view of the [`Store`](crate::Store), free to \
             copy."
        );
        let accessor_doc = format!("The `{concept}` calls of this store (see [`{handle}`]).");
        let tokens = quote! {
            #[doc = #doc]
            #[derive(Debug, Clone, Copy)]
            pub struct #handle<'a> {
                pub(crate) store: &'a crate::Store,
            }

            impl crate::Store {
                #[doc = #accessor_doc]
                pub fn #accessor(&self) -> #handle<'_> {
                    #handle { store: self }
                }
            }
        };
        writeln!(out, "{tokens}")?;
    }
    Ok(out)
}

/// The `(path, module)` pairs of `#[path = "…"] mod …;` in the module list.
fn module_list(source: &str) -> Result<Vec<(String, String)>, Box<dyn Error>> {
    let mut pairs = Vec::new();
    let mut lines = source.lines().map(str::trim);
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("#[path = \"") else {
            continue;
        };
        let path = rest
            .strip_suffix("\"]")
            .ok_or("a path attribute on two lines")?;
        let module = lines
            .next()
            .and_then(|l| l.strip_prefix("mod "))
            .and_then(|l| l.strip_suffix(';'))
            .ok_or("a path attribute not followed by `mod name;`")?;
        pairs.push((path.to_string(), module.to_string()));
    }
    if pairs.is_empty() {
        return Err("no SQL files listed".into());
    }
    Ok(pairs)
}

fn starts_with_super(tree: &syn::UseTree) -> bool {
    match tree {
        syn::UseTree::Path(p) => p.ident == "super" || p.ident == "self",
        syn::UseTree::Name(n) => n.ident == "super" || n.ident == "self",
        syn::UseTree::Rename(r) => r.ident == "super" || r.ident == "self",
        syn::UseTree::Glob(_) | syn::UseTree::Group(_) => false,
    }
}

/// The forwarders of the `impl Db` blocks of one file.
fn forwarders(
    file: &syn::File,
    target: &Target,
    by_hand_seen: &mut Vec<&'static str>,
    path: &Path,
) -> Result<Vec<proc_macro2::TokenStream>, Box<dyn Error>> {
    let mut out = Vec::new();
    for item in &file.items {
        let syn::Item::Impl(block) = item else {
            continue;
        };
        let is_db = block.trait_.is_none()
            && matches!(&*block.self_ty, syn::Type::Path(p) if p.path.is_ident("Db"));
        if !is_db {
            continue;
        }
        for member in &block.items {
            let syn::ImplItem::Fn(f) = member else {
                continue;
            };
            let name = f.sig.ident.to_string();
            if let Some(hand) = BY_HAND.iter().find(|n| **n == name) {
                by_hand_seen.push(hand);
                continue;
            }
            if let Some(fwd) =
                forwarder(f, target).map_err(|e| format!("{}: {name}: {e}", path.display()))?
            {
                out.push(fwd);
            }
        }
    }
    Ok(out)
}

/// The store method of one `Db` method, or `None` for the backend's own methods (not
/// `pub` or `pub(crate)`, or not async).
fn forwarder(
    f: &syn::ImplItemFn,
    target: &Target,
) -> Result<Option<proc_macro2::TokenStream>, String> {
    let vis = match &f.vis {
        syn::Visibility::Public(_) => quote!(pub),
        syn::Visibility::Restricted(r) if r.path.is_ident("crate") => quote!(pub(crate)),
        _ => return Ok(None),
    };
    let sig = &f.sig;
    if sig.asyncness.is_none() {
        return Ok(None);
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err("a store method takes no generic parameters".into());
    }
    let mut inputs = sig.inputs.iter();
    match inputs.next() {
        Some(syn::FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_none() => {}
        _ => return Err("a store method takes `&self` first".into()),
    }
    let mut names = Vec::new();
    let mut params = Vec::new();
    for input in inputs {
        let syn::FnArg::Typed(arg) = input else {
            return Err("a second receiver".into());
        };
        let syn::Pat::Ident(pat) = &*arg.pat else {
            return Err(format!(
                "argument {} is not a plain name",
                arg.pat.to_token_stream()
            ));
        };
        let ident = &pat.ident;
        let ty = &arg.ty;
        names.push(ident.clone());
        params.push(quote!(#ident: #ty));
    }
    let attrs = &f.attrs;
    let ident = &sig.ident;
    let output = &sig.output;
    let name = ident.to_string();
    let receiver = &target.receiver;
    let store = &target.store;
    Ok(Some(quote! {
        #(#attrs)*
        #vis async fn #ident(#receiver, #(#params),*) #output {
            #store.count_call();
            match #store.backend() {
                Backend::Sqlite(db) => db.#ident(#(#names),*).await,
                Backend::Postgres(db) if UNBOUNDED.contains(&#name) => {
                    db.#ident(#(#names),*).await
                }
                Backend::Postgres(db) => db.bounded(db.#ident(#(#names),*)).await,
            }
        }
    }))
}
