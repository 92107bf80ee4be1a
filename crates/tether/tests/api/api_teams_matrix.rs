//! The route × role matrix (issue 28), generated from the OpenAPI document: every route
//! behind a token, called by an owner, an admin, a member and a viewer (tokens with every
//! scope), is refused with 403 exactly when `tether_core::authz` says the role may not
//! (on a team conversation the owner started, for the routes of one conversation), and
//! never refused otherwise. A route without a rule fails the test.

use std::time::Duration;

use serde_json::{Value, json};
use tether_core::authz::{Actor, Scopes, Target, decide};
use tether_proto::{PersonId, Role, TokenScope, Visibility};
use tether_testkit::{Daemon, DaemonOptions, within};

use tether_testkit::people::{Who, person};

/// Every operation behind a token: (method, path template).
fn secured_operations(doc: &Value) -> Vec<(String, String)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let secured = op["security"].as_array().is_some_and(|s| !s.is_empty());
            if secured {
                ops.push((method.to_uppercase(), path.clone()));
            }
        }
    }
    ops.sort();
    ops
}

#[tokio::test]
async fn every_route_refuses_exactly_the_roles_the_table_refuses() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let owner = Who {
        d: &d,
        token: d.token.clone(),
    };
    let (_, me) = owner.get("/api/v1/me").await;
    let owner_id = PersonId::new(me["person"]["id"].as_str().unwrap());
    let (_, admin) = person(&owner, "ada", "admin").await;
    let (_, member) = person(&owner, "max", "member").await;
    let (_, viewer) = person(&owner, "val", "viewer").await;
    let (status, c) = owner
        .post("/api/v1/conversations", json!({"visibility": "team"}))
        .await;
    assert_eq!(status, 201, "{c}");
    let conv = c["id"].as_str().unwrap().to_string();

    let (_, doc) = owner.get("/api/openapi.json").await;
    let mut ops = secured_operations(&doc);
    // Draining stops the daemon: last, and asked by the roles it refuses first.
    ops.sort_by_key(|(m, t)| m == "POST" && t == "/api/v1/drain");
    let mut drained = false;
    assert!(ops.len() > 40, "{} operations", ops.len());
    let people = [
        (Role::Owner, &owner),
        (Role::Admin, &admin),
        (Role::Member, &member),
        (Role::Viewer, &viewer),
    ];
    let mut checked = 0;
    for (method, template) in &ops {
        let action = tether_server::route_action(&method.parse().unwrap(), template)
            .unwrap_or_else(|| panic!("{method} {template} has no access rule"));
        let of_conversation = template.starts_with("/api/v1/conversations/{id}");
        let path = if of_conversation {
            template.replace("{id}", &conv)
        } else {
            template.replace("{id}", "nope").replace("{code}", "nope")
        };
        let mut order: Vec<&(Role, &Who<'_>)> = people.iter().collect();
        if template == "/api/v1/drain" {
            order.sort_by_key(|(role, _)| tether_core::authz::at_least(*role, Role::Admin));
        }
        for (role, who) in order {
            if drained {
                // The daemon drained and stopped: the table alone decides the rest.
                checked += 1;
                continue;
            }
            let someone = PersonId::new("someone");
            let actor = Actor {
                person: if *role == Role::Owner {
                    &owner_id
                } else {
                    &someone
                },
                role: *role,
                scopes: Scopes::of(TokenScope::ALL),
            };
            let target = Target {
                owner: &owner_id,
                visibility: Visibility::Team,
            };
            let refused = if action.on_conversation() {
                of_conversation && decide(&actor, action, Some(&target)).is_err()
            } else {
                decide(&actor, action, None).is_err()
            };
            let status = status_of(&d, who, method, &path).await;
            drained = status == 202 && template == "/api/v1/drain";
            assert_ne!(status, 401, "{method} {path} as {role:?}");
            assert_eq!(
                status == 403,
                refused,
                "{method} {path} as {role:?}: {status} (the table says refused: {refused})"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, ops.len() * 4);
}

/// The status of one request with an empty JSON object as its body (streams: the status
/// of their first answer).
async fn status_of(d: &Daemon, who: &Who<'_>, method: &str, path: &str) -> u16 {
    let mut req = d
        .client
        .request(method.parse().unwrap(), d.url(path))
        .bearer_auth(&who.token)
        .timeout(Duration::from_secs(10));
    if method != "GET" && method != "DELETE" {
        req = req.json(&json!({}));
    }
    let resp = within("matrix request", req.send()).await.unwrap();
    resp.status().as_u16()
}
