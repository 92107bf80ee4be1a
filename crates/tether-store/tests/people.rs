//! People and personal tokens (issue 28), on both backends (see `support`): the bootstrap
//! owner, roles that always keep an enabled owner, tokens found by their hash only,
//! revoked and expired tokens unusable, last use recorded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tether_proto::*;
use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

fn new_person(id: &str, email: Option<&str>, role: Role) -> NewPerson {
    NewPerson {
        id: PersonId::new(id),
        name: id.to_uppercase(),
        email: email.map(str::to_owned),
        role,
    }
}

async fn the_first_owner_is_made_once_and_the_last_owner_stays(b: Backend) {
    let (_d, store) = support::open(b).await;
    let owner = store
        .people()
        .ensure_owner(&PersonId::new("p-owner"), "Owner")
        .await
        .unwrap();
    assert_eq!((owner.role, owner.disabled), (Role::Owner, false));
    // A second start finds the same owner, whatever id it would have made.
    let again = store
        .people()
        .ensure_owner(&PersonId::new("p-other"), "X")
        .await
        .unwrap();
    assert_eq!(again.id, owner.id);
    assert_eq!(store.people().list_people().await.unwrap().len(), 1);

    // The only owner cannot be demoted or disabled.
    for (role, disabled) in [(Role::Admin, false), (Role::Owner, true)] {
        let err = store
            .people()
            .set_person_access(&owner.id, role, disabled)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::LastOwner), "{err}");
    }
    let ann = store
        .people()
        .add_person(&new_person("p-ann", Some("ann@example.com"), Role::Member))
        .await
        .unwrap();
    let dup = store
        .people()
        .add_person(&new_person("p-ann2", Some("ann@example.com"), Role::Viewer))
        .await
        .unwrap_err();
    assert!(matches!(dup, StoreError::Duplicate { .. }), "{dup}");
    // With a second owner, the first may step down.
    store
        .people()
        .set_person_access(&ann.id, Role::Owner, false)
        .await
        .unwrap();
    let down = store
        .people()
        .set_person_access(&owner.id, Role::Member, false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(down.role, Role::Member);
    assert!(
        store
            .people()
            .set_person_access(&PersonId::new("nobody"), Role::Viewer, false)
            .await
            .unwrap()
            .is_none()
    );
}

async fn tokens_are_found_by_hash_and_stop_when_revoked_or_expired(b: Backend) {
    let (_d, store) = support::open(b).await;
    let me = store
        .people()
        .ensure_owner(&PersonId::new("p-me"), "Me")
        .await
        .unwrap();
    let t = store
        .people()
        .add_token(&NewToken {
            id: "tok-1".into(),
            person_id: me.id.clone(),
            name: "laptop".into(),
            hash: "h1".into(),
            scopes: vec![TokenScope::Read, TokenScope::Approve],
            expires_at_ms: None,
        })
        .await
        .unwrap();
    assert_eq!(t.scopes, [TokenScope::Read, TokenScope::Approve]);
    let (found, person) = store.people().token_by_hash("h1").await.unwrap().unwrap();
    assert_eq!((found.id.as_str(), person.id.as_str()), ("tok-1", "p-me"));
    assert!(found.usable(found.created_at_ms + 1));
    assert!(store.people().token_by_hash("h2").await.unwrap().is_none());

    store
        .people()
        .touch_token("tok-1", &me.id, 60_000)
        .await
        .unwrap();
    let (used, person) = store.people().token_by_hash("h1").await.unwrap().unwrap();
    assert!(used.last_used_at_ms.is_some() && person.last_seen_at_ms.is_some());

    // Someone else's revoke does not reach it; the owner's does, once.
    assert!(
        !store
            .people()
            .revoke_token("tok-1", Some(&PersonId::new("q")))
            .await
            .unwrap()
    );
    assert!(
        store
            .people()
            .revoke_token("tok-1", Some(&me.id))
            .await
            .unwrap()
    );
    assert!(!store.people().revoke_token("tok-1", None).await.unwrap());
    let (revoked, _) = store.people().token_by_hash("h1").await.unwrap().unwrap();
    assert!(!revoked.usable(revoked.created_at_ms + 1));

    let expiring = store
        .people()
        .add_token(&NewToken {
            id: "tok-2".into(),
            person_id: me.id.clone(),
            name: "ci".into(),
            hash: "h2".into(),
            scopes: vec![TokenScope::Read],
            expires_at_ms: Some(1_000),
        })
        .await
        .unwrap();
    assert!(expiring.usable(999) && !expiring.usable(1_000));
    let listed: Vec<_> = store
        .people()
        .list_tokens(Some(&me.id))
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(
        store
            .people()
            .list_tokens(Some(&PersonId::new("q")))
            .await
            .unwrap()
            .is_empty()
    );
}

async fn the_audit_log_pages_newest_first(b: Backend) {
    let (_d, store) = support::open(b).await;
    assert!(
        store
            .people()
            .audit_page(None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    for i in 0..5 {
        store
            .people()
            .record_audit(&NewAudit {
                action: AuditAction::TokenCreated,
                person_id: (i % 2 == 0).then(|| PersonId::new("p")),
                by: format!("p{i} on api"),
                target: Some(format!("t{i}")),
                detail: None,
            })
            .await
            .unwrap();
    }
    let first = store.people().audit_page(None, 3).await.unwrap();
    let targets: Vec<_> = first.iter().map(|e| e.target.clone().unwrap()).collect();
    assert_eq!(targets, ["t4", "t3", "t2"]);
    assert_eq!(first[0].person_id, Some(PersonId::new("p")));
    assert_eq!(first[1].person_id, None);
    assert_eq!(first[0].action, AuditAction::TokenCreated);
    assert!(first[0].at_ms > 0);
    let rest = store
        .people()
        .audit_page(Some(first[2].id), 10)
        .await
        .unwrap();
    let targets: Vec<_> = rest.iter().map(|e| e.target.clone().unwrap()).collect();
    assert_eq!(targets, ["t1", "t0"]);
}

async fn an_account_links_once_and_a_link_code_is_taken_once_before_it_expires(b: Backend) {
    let (_d, store) = support::open(b).await;
    let people = store.people();
    for id in ["ann", "bob"] {
        people
            .add_person(&new_person(id, None, Role::Member))
            .await
            .unwrap();
    }
    let (ann, bob) = (PersonId::new("ann"), PersonId::new("bob"));
    let a = people
        .link_account("telegram", "111", "Ann", &ann, "Ann on web")
        .await
        .unwrap();
    assert_eq!(
        (a.person_id.clone(), a.linked_by.as_str()),
        (ann.clone(), "Ann on web")
    );
    let twice = people
        .link_account("telegram", "111", "Ann", &bob, "admin")
        .await;
    assert!(
        matches!(twice, Err(StoreError::Duplicate { .. })),
        "{twice:?}"
    );
    assert_eq!(
        people.channel_account("telegram", "111").await.unwrap(),
        Some(a.clone())
    );
    assert_eq!(people.list_accounts(Some(&bob)).await.unwrap(), []);
    assert_eq!(
        people.list_accounts(None).await.unwrap(),
        std::slice::from_ref(&a)
    );
    assert_eq!(
        people.unlink_account("telegram", "111").await.unwrap(),
        Some(a)
    );
    assert_eq!(
        people.unlink_account("telegram", "111").await.unwrap(),
        None
    );
    people
        .link_account("telegram", "111", "Ann", &bob, "admin")
        .await
        .unwrap();

    // A code is taken once; an expired one never; an unknown one is the same `None`.
    let later = 600_000;
    people
        .add_link_code("h-account", Some(("slack", "UANN", "Ann")), None, later)
        .await
        .unwrap();
    people
        .add_link_code("h-person", None, Some(&ann), later)
        .await
        .unwrap();
    people
        .add_link_code("h-old", None, Some(&ann), -1)
        .await
        .unwrap();
    let taken = people.take_link_code("h-account").await.unwrap().unwrap();
    assert_eq!(
        taken.account,
        Some(("slack".into(), "UANN".into(), "Ann".into()))
    );
    assert_eq!(taken.person_id, None);
    assert_eq!(people.take_link_code("h-account").await.unwrap(), None);
    let taken = people.take_link_code("h-person").await.unwrap().unwrap();
    assert_eq!((taken.account, taken.person_id), (None, Some(ann)));
    assert_eq!(people.take_link_code("h-old").await.unwrap(), None);
    assert_eq!(people.take_link_code("h-unknown").await.unwrap(), None);
}

contract!(
    an_account_links_once_and_a_link_code_is_taken_once_before_it_expires,
    the_first_owner_is_made_once_and_the_last_owner_stays,
    tokens_are_found_by_hash_and_stop_when_revoked_or_expired,
    the_audit_log_pages_newest_first,
);
