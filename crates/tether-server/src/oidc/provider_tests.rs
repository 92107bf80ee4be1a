//! The ID token's checks (issue 28: "forged, expired or wrong-audience ID tokens … a
//! replayed nonce"), against tokens signed here with test keys: a good token passes; one
//! signed by another key, for another audience, from another issuer, expired, with
//! another nonce, or without a verified email does not; a key the kept set lacks asks
//! for the provider's keys again (rotation).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use openidconnect::core::{
    CoreIdTokenClaims, CoreJsonWebKeySet, CoreJwsSigningAlgorithm, CoreResponseType,
    CoreRsaPrivateSigningKey, CoreSubjectIdentifierType,
};
use openidconnect::{
    Audience, AuthUrl, EmptyAdditionalClaims, EmptyAdditionalProviderMetadata, EndUserEmail,
    JsonWebKeyId, JsonWebKeySetUrl, PrivateSigningKey, ResponseTypes, StandardClaims,
    SubjectIdentifier,
};

/// Test keys only (made for this file, never used anywhere else).
const KEY_1: &str = "-----BEGIN RSA PRIVATE KEY-----
MIIEogIBAAKCAQEAswDllAWHYF38IAlDPDAXvNZ7l3LVrGmscAXPN9dsgXyRqH4a
XLAzwJ6mh5jjjWeYtGv/mbyNxCscOrUXfZMrtBf76rAY5+zQfq6/HaAiGtBO04fA
y3Qe1oJm+UD/Ymw839ORTlk4UJiQtdmvH0fUgOjtVwSmj42M/Vl+2bNqRA2Dq/IG
jPtb6UA5EL5zCnVwiRDawy3EmpJyqcn6r5qiuf50YnYfKPqisE61/+UM1n7TUCI0
i/L8J6ygh96avpLTy/IrroDNk67OzMvhiUqa7nJMs1qcTQlc+DaEvv7htzNIDgsG
QNGIpSUohjhVfi2sWDL5F7Za8eyhlUOIQM3+6wIDAQABAoIBAA/C2/QRGo7rJ5iA
iEmD6IspjX9TzqmcMmE4ubqufrDWEZM260ZPA3eJ4Jre5OZeAU2dlsdoGUl1DErF
CDj33OjCFd3fvImrSd5lr5FBuM8ImXA5q0mew1pa6As5ZGM7qY6Bt/EgnPtHu7Iv
ZSKJdhYVrFQ1ph7MtWXXW/p6ODienAcAeiYGOR1hqd9ksBiZeoxDrQJg4RGVjWHG
V1+wiir5bnwwcqOukdqp1ZpEJU/pivJb7eEs0utDtZk6i4X0/39YoIPn+Nh9Px5t
b1NyFdqZSp62A9sMoZBy/+jdloS21hfsmadeuhGiuSVqes7ybTaSkLYlxT+PgqcV
fVuGRVECgYEA8eyoH1CsCnerF+IKGrgfniSjTh8ynXhctHTaRBbYzisq2KqIUXv9
SDeFwGS7OezkO2+NUuoGhPTaf84dqC1aDeaxEUpllqq1G6CnXf9GhUDbgqlDkrX7
k0OyT1eOGTd5RntBgU32XnvLLcFHBJUDHIiz4kMgceSslkWrh/t5WXsCgYEAvWsQ
ch2driMAls9XoCfaksOfSn33aA+0eBNdjQbTtxPkBkvtxEPRCFgxC/X8nSnZSQZ+
6StxFhrb2Xr+vBxjrLQ0cYUGTt48PY6PkvX02syoxNlIuMG7ca8q9JKbPol4iLco
HwZQmQg+SMEZf992XzuCZ2Kdyh2b3gigvkeFXVECgYBaSOGtXiP2fBaEAT2YHyLd
l/rCCu6Oyf5+8iUKyCP9PSruVSYuksFBlEb8OBuPUJMUg1sQmHn6YI6yp691tgcn
rPJj64niIq8YMmqDr+MXk87YAmdPd0799IO1DI3hZ0yBOzqFER1iwXxgBQOF+D6D
BZlsVXTkTF0Eb9fGFdmBxQKBgDvyV1kWQGHtF/GimyPHmSgbmx0TMqqPVdkun8vT
Hkvxkpffjdcwc0ZFyvfzGMiQhwDSenXG1tpdE7kHcPkNrwnoWjSXGgD52mzM4mlr
R9u7K6po7dfzECSRgHG4uEMZdLkn5h2zfOyBrFyQKEbM7QSEq+eWUUO3DS4+4sh1
kCKRAoGANL8nFHNt6X5Dt5At+H9Po6D6vrU4Fsh8qwe1VeAxeFV1JVPNe5pEU+n/
Jf4ChSwU+kaW8/GocL+nrSdTkLTVH2r9UVXNMb6tEwEKuZFeKfJCNrgdof62GShW
jyAGZvtc1/QtZ78CQEEc2cdaGyBpWiFTsjlzJlDkO2N0azD4/sA=
-----END RSA PRIVATE KEY-----";
const KEY_2: &str = "-----BEGIN RSA PRIVATE KEY-----
MIIEpAIBAAKCAQEA3L1EMToclvFxVMe5FjofZp4zJdhT5BAVAHMvk1JUe3LLi50c
UxWIdBcxzpbUZWEqkkbYNhnqf+c9Dt0V36Mh9/QanB9N6UFZZdQ35TQf9ebY+W8q
ixqB2zlDGutWfW/rhzqHv9ZNi0g//WCsJFUFk6xTepYr7MNK217s1J1tsJOW5v59
nM1XgWagABI4gg3freb95H9bkAIOxCokRu/CT9keNh/LrHTirDqeBnlpBXV/43ag
ihckv56/lZcJ7C1lMrymd2D+2KYxCSjwwsgQrq1ekSD2CoiTgKvQBydAko6maI+8
qXgKezBI/AlxVdtAntFWelV6B45tx1y3DuCpUQIDAQABAoIBAAT5wi/+4JaZbiXM
U7R3zm3keoAromZ1Y1fNgODH/g4DTinBOpp31YnSXQXMWhDH8ir2bFi52FKWPobX
fm76USFy7+edgAbWOYLlV/YzaNYE5FapBhM5H3y2y3evntU4gN1dOSKenMRbNlAK
jg7KmNPVklMkz+woEcekmd+IBekxO8EcqiqszkL5ILy5j7Ovix3WNkfEVpeRxjzo
+p9MRHhT2wTdAjow4Gp7AFNt8aUnfoFOeydI02G/gH5IXm+vQbv4zWcb/mVlHwKM
gc7GFxw3u4277QUFPvZG0PMjRjumwNNFfpt6Bs+1Tg8QnoTIKyAG3m4ZYhTX2jAN
fF823E0CgYEA8yBgnbPEwb0l5TlYs80YJtB80xuT/ow0iph4l+jU2lXwzXvU0y84
9pzIYfIfwnHZb8dORN6vCNAzwfu/WOXIBSFvsdCalK0dzuxKkNI+6vxivpkm+OCS
0lzQTShpMsCs8j/8pcEzYt0Rg7cQYUil/cExsExsd+LnpkEDuZEFRX0CgYEA6G1t
WNrI6PyMrtgs/SW7fGfdIMfb69Nu7j0SdTph0vKdsfOa+VIyEbCrEM+io2WediDs
99lVXUxH5l+Ykv4LXNJud3YNxJshuPKJ1OiJ3EvFfMCRqio3nA0QdPicdQemGCU5
/lkEROKuePSerMVNMSfhrpb1lZP2L7wgKZqVa2UCgYAhVvBIz+0MUD7RFzMVvOsx
72cen+qEfn95/fyTgEcoBZ723qNJrnEWSFumKsi2JlyV2nPeN9cy0zI1yKrtqtzp
7zLc5Gk+OBsdVAPJpjsgiCmWT3QrrsgTdszNt9vtLMTKl4GyzTKZvQz4zfK+FHNG
v+ZrcZ9yNThk8Qdsu/lIFQKBgQCO3vzxOoN3XA6qR23YKkKGJV4zEUdpPe2ZemcH
Ml0Bi2tOAL2JdnIal6t/yPJjWErAuFqRu8GSeRpVTPv/lzOq2htXSXULHoTrKAN7
oXlkthruJX0kyZCnVwx/qnaaJZp+ixuL8nICWgj/hvamox1hEu/SHy9Uw7/39b8b
c89XVQKBgQDLCCJJfztyIi24rNl8pILNhBVBvUhst/IsHPkGteqXrKLA3VWB7es/
qf+YzPIZ2EEOVSCnt8voy5wVP1EvtNsazin5s5IkycvhCf6ug90I2bim1GVT/ou6
/9svylOs/RQPtY3hnQKro8fyduTI22wAGe8In42qzHM3/Of5T/Q1cg==
-----END RSA PRIVATE KEY-----";
const ISSUER: &str = "https://id.example.test";
const CLIENT: &str = "tether";

fn key(pem: &str, kid: &str) -> CoreRsaPrivateSigningKey {
    CoreRsaPrivateSigningKey::from_pem(pem, Some(JsonWebKeyId::new(kid.to_owned()))).unwrap()
}

fn provider() -> Provider {
    Provider::new(crate::OidcConfig {
        issuer: ISSUER.to_owned(),
        client_id: CLIENT.to_owned(),
        client_secret: Some("secret".to_owned()),
        redirect_url: None,
        allowed_domains: Vec::new(),
        role_claim: Some("groups".to_owned()),
        roles: Default::default(),
        default_role: tether_proto::Role::Member,
        session_ttl: std::time::Duration::from_secs(3600),
        secure_cookies: false,
    })
    .unwrap()
}

/// The provider's metadata, publishing the keys `published`.
fn metadata(published: &[&CoreRsaPrivateSigningKey]) -> CoreProviderMetadata {
    CoreProviderMetadata::new(
        IssuerUrl::new(ISSUER.to_owned()).unwrap(),
        AuthUrl::new(format!("{ISSUER}/auth")).unwrap(),
        JsonWebKeySetUrl::new(format!("{ISSUER}/jwks")).unwrap(),
        vec![ResponseTypes::new(vec![CoreResponseType::Code])],
        vec![CoreSubjectIdentifierType::Public],
        vec![CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256],
        EmptyAdditionalProviderMetadata {},
    )
    .set_jwks(CoreJsonWebKeySet::new(
        published.iter().map(|k| k.as_verification_key()).collect(),
    ))
}

struct Mint<'a> {
    key: &'a CoreRsaPrivateSigningKey,
    issuer: &'a str,
    audience: &'a str,
    expires_in_secs: i64,
    nonce: &'a str,
    email_verified: bool,
}

impl Default for Mint<'_> {
    fn default() -> Self {
        Mint {
            key: Box::leak(Box::new(key(KEY_1, "k1"))),
            issuer: ISSUER,
            audience: CLIENT,
            expires_in_secs: 300,
            nonce: "n-1",
            email_verified: true,
        }
    }
}

fn mint(m: Mint<'_>) -> CoreIdToken {
    let now = chrono::Utc::now();
    let claims = CoreIdTokenClaims::new(
        IssuerUrl::new(m.issuer.to_owned()).unwrap(),
        vec![Audience::new(m.audience.to_owned())],
        now + chrono::Duration::seconds(m.expires_in_secs),
        now - chrono::Duration::seconds(600),
        StandardClaims::new(SubjectIdentifier::new("alice".to_owned()))
            .set_email(Some(EndUserEmail::new("Alice@Example.com".to_owned())))
            .set_email_verified(Some(m.email_verified)),
        EmptyAdditionalClaims {},
    )
    .set_nonce(Some(Nonce::new(m.nonce.to_owned())));
    CoreIdToken::new(
        claims,
        m.key,
        CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
        None,
        None,
    )
    .unwrap()
}

#[test]
fn a_good_token_gives_its_verified_email() {
    let k1 = key(KEY_1, "k1");
    let token = mint(Mint {
        key: &k1,
        ..Mint::default()
    });
    let claims = provider().verify(&metadata(&[&k1]), &token, "n-1").unwrap();
    assert_eq!(claims.email, "alice@example.com");
}

#[test]
fn forged_expired_foreign_or_replayed_tokens_are_refused() {
    let (k1, k2) = (key(KEY_1, "k1"), key(KEY_2, "k1"));
    let p = provider();
    let m = metadata(&[&k1]);
    let bad = |t: CoreIdToken, nonce: &str| match p.verify(&m, &t, nonce) {
        Err(Retry::Bad(e)) => e,
        other => panic!("not refused as bad: {other:?}"),
    };
    // Signed by another key under the same key id: a forgery.
    let e = bad(
        mint(Mint {
            key: &k2,
            ..Mint::default()
        }),
        "n-1",
    );
    assert!(e.to_lowercase().contains("signature"), "{e}");
    // Another audience, another issuer, expired.
    bad(
        mint(Mint {
            key: &k1,
            audience: "someone-else",
            ..Mint::default()
        }),
        "n-1",
    );
    bad(
        mint(Mint {
            key: &k1,
            issuer: "https://evil.example.test",
            ..Mint::default()
        }),
        "n-1",
    );
    bad(
        mint(Mint {
            key: &k1,
            expires_in_secs: -60,
            ..Mint::default()
        }),
        "n-1",
    );
    // A token minted for another sign-in (its nonce) is not this one's.
    bad(
        mint(Mint {
            key: &k1,
            ..Mint::default()
        }),
        "n-2",
    );
    // No verified email: refused too.
    let t = mint(Mint {
        key: &k1,
        email_verified: false,
        ..Mint::default()
    });
    assert!(matches!(p.verify(&m, &t, "n-1"), Err(Retry::NoEmail)));
}

#[test]
fn a_key_the_kept_set_lacks_asks_for_the_keys_again() {
    let (k1, rotated) = (key(KEY_1, "k1"), key(KEY_2, "k2"));
    let p = provider();
    let t = mint(Mint {
        key: &rotated,
        ..Mint::default()
    });
    assert!(matches!(
        p.verify(&metadata(&[&k1]), &t, "n-1"),
        Err(Retry::NewKeys(_))
    ));
    let claims = p.verify(&metadata(&[&k1, &rotated]), &t, "n-1").unwrap();
    assert_eq!(claims.email, "alice@example.com");
}

#[test]
fn role_claims_are_read_as_a_string_or_a_list() {
    use base64::Engine as _;
    let jwt = |payload: &str| {
        let b = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(payload);
        format!("h.{b}.s")
    };
    assert_eq!(
        claim_values(&jwt(r#"{"groups":["a","b",3]}"#), "groups"),
        ["a", "b"]
    );
    assert_eq!(claim_values(&jwt(r#"{"role":"admin"}"#), "role"), ["admin"]);
    assert!(claim_values(&jwt(r#"{"groups":{}}"#), "groups").is_empty());
    assert!(claim_values("not a jwt", "groups").is_empty());
}
