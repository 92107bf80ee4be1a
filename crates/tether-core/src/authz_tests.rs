use super::*;
use tether_proto::{PersonId, Role, TokenScope, Visibility};

fn actor(person: &PersonId, role: Role) -> Actor<'_> {
    Actor {
        person,
        role,
        scopes: Scopes::ALL,
    }
}

const ROLES: [Role; 4] = [Role::Owner, Role::Admin, Role::Member, Role::Viewer];

#[test]
fn a_member_reads_and_writes_their_own_and_the_teams_but_not_anothers_private() {
    let (me, other) = (PersonId::new("p-me"), PersonId::new("p-other"));
    let a = actor(&me, Role::Member);
    let own = Target {
        owner: &me,
        visibility: Visibility::Private,
    };
    let team = Target {
        owner: &other,
        visibility: Visibility::Team,
    };
    let private = Target {
        owner: &other,
        visibility: Visibility::Private,
    };
    for action in [Action::Read, Action::Write, Action::Answer] {
        assert_eq!(decide(&a, action, Some(&own)), Ok(()), "{action:?} own");
        assert_eq!(decide(&a, action, Some(&team)), Ok(()), "{action:?} team");
        assert_eq!(
            decide(&a, action, Some(&private)),
            Err(Denied::Hidden),
            "{action:?} private: 404, never 403"
        );
    }
}

#[test]
fn a_viewer_reads_the_team_and_writes_nothing() {
    let (me, other) = (PersonId::new("p-v"), PersonId::new("p-o"));
    let v = actor(&me, Role::Viewer);
    let team = Target {
        owner: &other,
        visibility: Visibility::Team,
    };
    assert_eq!(decide(&v, Action::Read, Some(&team)), Ok(()));
    assert_eq!(
        decide(&v, Action::Write, Some(&team)),
        Err(Denied::Forbidden)
    );
    assert_eq!(
        decide(&v, Action::Answer, Some(&team)),
        Err(Denied::Forbidden)
    );
    assert_eq!(
        decide(&v, Action::CreateConversation, None),
        Err(Denied::Forbidden)
    );
    let private = Target {
        owner: &other,
        visibility: Visibility::Private,
    };
    assert_eq!(
        decide(&v, Action::Read, Some(&private)),
        Err(Denied::Hidden)
    );
}

#[test]
fn admins_and_owners_see_and_act_on_everything() {
    let (me, other) = (PersonId::new("p-a"), PersonId::new("p-o"));
    for role in [Role::Admin, Role::Owner] {
        let a = actor(&me, role);
        for visibility in [Visibility::Private, Visibility::Team] {
            let t = Target {
                owner: &other,
                visibility,
            };
            for action in Action::ALL.iter().copied() {
                let target = action.on_conversation().then_some(&t);
                assert_eq!(decide(&a, action, target), Ok(()), "{role} {action:?}");
            }
        }
    }
}

#[test]
fn administration_is_for_admins_only() {
    let me = PersonId::new("p");
    for action in [
        Action::ManagePeople,
        Action::ManageTokens,
        Action::LinkOthers,
        Action::DecidePairing,
        Action::ReadAudit,
        Action::ReadTeamUsage,
        Action::ManageBudgets,
        Action::OperateNode,
    ] {
        for role in ROLES {
            let allowed = decide(&actor(&me, role), action, None).is_ok();
            assert_eq!(allowed, at_least(role, Role::Admin), "{role} {action:?}");
        }
    }
    for action in [Action::ManageOwnTokens, Action::LinkSelf, Action::ReadNode] {
        for role in ROLES {
            assert_eq!(
                decide(&actor(&me, role), action, None),
                Ok(()),
                "{role} {action:?}"
            );
        }
    }
}

#[test]
fn a_token_does_only_what_its_scopes_allow() {
    let me = PersonId::new("p");
    let own = Target {
        owner: &me,
        visibility: Visibility::Private,
    };
    let read_only = Actor {
        person: &me,
        role: Role::Owner,
        scopes: Scopes::of(&[TokenScope::Read]),
    };
    assert_eq!(decide(&read_only, Action::Read, Some(&own)), Ok(()));
    assert_eq!(
        decide(&read_only, Action::Write, Some(&own)),
        Err(Denied::Scope(TokenScope::Write))
    );
    assert_eq!(
        decide(&read_only, Action::Answer, Some(&own)),
        Err(Denied::Scope(TokenScope::Approve))
    );
    assert_eq!(
        decide(&read_only, Action::ManagePeople, None),
        Err(Denied::Scope(TokenScope::Admin))
    );
    // Hidden wins over a missing scope: the id says nothing.
    let other = PersonId::new("q");
    let theirs = Target {
        owner: &other,
        visibility: Visibility::Private,
    };
    let member = Actor {
        person: &me,
        role: Role::Member,
        scopes: Scopes::of(&[TokenScope::Read]),
    };
    assert_eq!(
        decide(&member, Action::Write, Some(&theirs)),
        Err(Denied::Hidden)
    );
}

#[test]
fn scopes_round_trip() {
    let s = Scopes::of(&[TokenScope::Approve, TokenScope::Read]);
    assert_eq!(s.list(), [TokenScope::Read, TokenScope::Approve]);
    assert_eq!(Scopes::of(TokenScope::ALL), Scopes::ALL);
    assert_eq!(Scopes::ALL.list(), TokenScope::ALL);
}

#[test]
fn an_action_on_a_conversation_needs_one() {
    let me = PersonId::new("p");
    assert_eq!(
        decide(&actor(&me, Role::Owner), Action::Write, None),
        Err(Denied::NoTarget)
    );
}

#[test]
fn only_the_owner_makes_admins_and_owners() {
    for (current, new) in [
        (Role::Member, Role::Admin),
        (Role::Admin, Role::Member),
        (Role::Viewer, Role::Owner),
    ] {
        assert!(may_set_role(Role::Owner, current, new));
        assert!(
            !may_set_role(Role::Admin, current, new),
            "{current} -> {new}"
        );
    }
    assert!(may_set_role(Role::Admin, Role::Viewer, Role::Member));
    assert!(may_set_role(Role::Admin, Role::Member, Role::Viewer));
    for role in [Role::Member, Role::Viewer] {
        assert!(!may_set_role(role, Role::Viewer, Role::Member));
    }
}

/// `allowed_on_any` says yes exactly when `decide` allows the action on every
/// conversation (own or another's, of every visibility), for every role, action and
/// scope set: only then may the row go unread.
#[test]
fn allowed_on_any_is_decide_over_every_conversation() {
    let (me, other) = (PersonId::new("p-me"), PersonId::new("p-other"));
    let scope_sets = [
        Scopes::ALL,
        Scopes::of(&[TokenScope::Read]),
        Scopes::of(&[TokenScope::Read, TokenScope::Write]),
    ];
    for role in ROLES {
        for scopes in scope_sets {
            let a = Actor {
                person: &me,
                role,
                scopes,
            };
            for action in Action::ALL.iter().copied() {
                let every = action.on_conversation()
                    && [&me, &other].iter().all(|owner| {
                        Visibility::ALL.iter().all(|v| {
                            let t = Target {
                                owner,
                                visibility: *v,
                            };
                            decide(&a, action, Some(&t)).is_ok()
                        })
                    });
                assert_eq!(
                    allowed_on_any(&a, action),
                    every,
                    "{role:?} {action:?} {scopes:?}"
                );
            }
        }
    }
}
