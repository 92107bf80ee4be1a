//! Files in from the channels, end to end: Telegram photos and documents through the fake
//! Bot API (`getFile` and the file download path) reach the agent (the fake agent takes no
//! images, so as files under `.tether/attachments/`) with the caption as the text; a file
//! that cannot be fetched or is too large is refused on the chat with its stable code,
//! while the caption still goes; a hostile document name is made harmless. Feishu image,
//! file and post messages through the fake Open API's message resources likewise.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use tether_testkit::fake_feishu::{Events, FakeFeishu, Sealed};
use tether_testkit::fake_telegram::{FakeTelegram, private_chat};
use tether_testkit::uploads::PNG_1X1;
use tether_testkit::{Daemon, DaemonOptions, within};

const ANN: (i64, &str) = (111, "Ann");

async fn start() -> (FakeTelegram, Daemon) {
    let tg = FakeTelegram::start().await;
    let d = Daemon::start(DaemonOptions {
        extra_config: format!(
            "{}\n[attachments]\nmax_file_mb = 1\n",
            tg.config(&[ANN.0], "")
        ),
        ..Default::default()
    })
    .await;
    (tg, d)
}

fn message(tg: &FakeTelegram, id: i64, fields: Value) -> Value {
    let mut m = json!({
        "message_id": id,
        "date": 0,
        "chat": private_chat(ANN.0),
        "from": {"id": ANN.0, "is_bot": false, "first_name": ANN.1},
    });
    for (k, v) in fields.as_object().unwrap() {
        m[k] = v.clone();
    }
    tg.make_update("message", m)
}

fn attachments_dir(d: &Daemon) -> std::path::PathBuf {
    d.work_dir().join(".tether/attachments")
}

#[tokio::test]
async fn a_telegram_photo_and_document_reach_the_agent_with_their_captions() {
    let (tg, d) = start().await;
    tg.add_file("ph-big", PNG_1X1);
    tg.push(message(
        &tg,
        7,
        json!({"caption": "what is on it?", "photo": [
            {"file_id": "ph-small", "width": 1, "height": 1},
            {"file_id": "ph-big", "width": 1, "height": 1, "file_size": PNG_1X1.len()},
        ]}),
    ));
    let shown = tg.wait_shown(ANN.0, "echo: what is on it?").await;
    assert!(
        shown.text().contains(".tether/attachments/"),
        "{}",
        shown.text()
    );
    let photo = d
        .attachment_copies()
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with("-photo-7"))
        .expect("the photo's copy");
    assert_eq!(std::fs::read(photo).unwrap(), PNG_1X1);
    // The largest size was fetched, through getFile.
    let asked: Vec<Value> = tg.calls("getFile").iter().map(|c| c.body.clone()).collect();
    assert_eq!(asked, [json!({"file_id": "ph-big"})]);

    tg.add_file("doc-1", b"line one\n");
    tg.push(message(
        &tg,
        8,
        json!({"caption": "read the log", "document": {"file_id": "doc-1",
            "file_name": "../../etc/app.log", "mime_type": "text/plain", "file_size": 9}}),
    ));
    let shown = tg.wait_shown(ANN.0, "echo: read the log").await;
    assert!(shown.text().contains("-app.log"), "{}", shown.text());
    let copied = d.attachment_copies();
    assert!(
        copied
            .iter()
            .any(|n| n.to_string_lossy().ends_with("-app.log")),
        "{copied:?}"
    );
    assert!(!d.home.path().join("etc").exists());

    let convs = d.get_ok("/api/v1/conversations").await;
    let c = convs[0]["id"].as_str().unwrap();
    let history = d
        .get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await;
    let names: Vec<String> = history
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["attachments"].as_array().cloned().unwrap_or_default())
        .map(|a| a["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["photo-7", "app.log"]);
}

#[tokio::test]
async fn a_file_that_cannot_be_fetched_or_is_too_large_is_refused_and_the_caption_goes() {
    let (tg, d) = start().await;
    tg.add_file("gone", b"never served");
    tg.break_download("gone");
    tg.push(message(
        &tg,
        9,
        json!({"caption": "still read this", "document": {"file_id": "gone",
            "file_name": "a.txt"}}),
    ));
    let refused = tg.wait_shown(ANN.0, "attachment_unavailable").await;
    assert!(refused.text().contains("a.txt"), "{}", refused.text());
    tg.wait_shown(ANN.0, "echo: still read this").await;

    tg.push(message(
        &tg,
        10,
        json!({"document": {"file_id": "huge", "file_name": "huge.bin",
            "file_size": 5 * 1024 * 1024}}),
    ));
    let refused = tg.wait_shown(ANN.0, "attachment_too_large").await;
    assert!(refused.text().contains("huge.bin"), "{}", refused.text());
    // Refused from the declared size: never asked for.
    assert!(
        tg.calls("getFile")
            .iter()
            .all(|c| c.body["file_id"] != "huge")
    );
    assert!(!attachments_dir(&d).exists());
    assert!(
        std::fs::read_dir(d.data_dir().join("attachments"))
            .map(|mut r| r.all(|e| e.unwrap().file_name() == "tmp"))
            .unwrap_or(true)
    );
}

const ALICE: &str = "ou_alice";

async fn feishu_post(d: &Daemon, sealed: &Sealed) {
    let mut req = d
        .client
        .post(d.url("/hooks/feishu"))
        .header("content-type", "application/json")
        .body(sealed.body.clone());
    for (k, v) in &sealed.headers {
        req = req.header(*k, v);
    }
    let resp = within("POST /hooks/feishu", req.send()).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}

#[tokio::test]
async fn feishu_images_files_and_images_in_posts_reach_the_agent() {
    let fs = FakeFeishu::start().await;
    let ev = Events::new("verification-token-1", Some("encrypt-key-1"));
    let d = Daemon::start(DaemonOptions {
        extra_config: fs.config(&ev, &[ALICE], ""),
        ..Default::default()
    })
    .await;
    let chat = "oc_files";

    let (image, id) = ev.media_message(chat, ALICE, "image", &json!({"image_key": "img_1"}));
    fs.add_resource(&id, "img_1", PNG_1X1);
    feishu_post(&d, &ev.seal(&image)).await;
    fs.wait_shown(chat, "-image-img_1").await;

    let post = json!({"title": "", "content": [
        [{"tag": "text", "text": "see this page"}],
        [{"tag": "img", "image_key": "img_2"}],
    ]});
    let (post, id) = ev.media_message(chat, ALICE, "post", &post);
    fs.add_resource(&id, "img_2", PNG_1X1);
    feishu_post(&d, &ev.seal(&post)).await;
    let shown = fs.wait_shown(chat, "echo: see this page").await;
    assert!(shown.text().contains("-image-img_2"), "{}", shown.text());

    let file = json!({"file_key": "file_1", "file_name": "report.pdf"});
    let (file, _) = ev.media_message(chat, ALICE, "file", &file);
    // Not added: the resource 404s.
    feishu_post(&d, &ev.seal(&file)).await;
    let refused = fs.wait_shown(chat, "attachment_unavailable").await;
    assert!(refused.text().contains("report.pdf"), "{}", refused.text());

    let copied = d.attachment_copies();
    assert_eq!(copied.len(), 2, "{copied:?}");
    for f in &copied {
        assert_eq!(std::fs::read(f).unwrap(), PNG_1X1);
    }
}

#[tokio::test]
async fn file_sends_a_working_directory_file_as_a_telegram_document_and_stays_inside() {
    let (tg, d) = start().await;
    std::fs::create_dir_all(d.work_dir().join("out")).unwrap();
    std::fs::write(d.work_dir().join("out/report.txt"), b"all green\n").unwrap();
    std::fs::write(d.work_dir().join("chart.png"), PNG_1X1).unwrap();
    let secret = d.home.path().join("secret.txt");
    std::fs::write(&secret, "not yours").unwrap();
    std::os::unix::fs::symlink(&secret, d.work_dir().join("link.txt")).unwrap();

    tg.push(message(&tg, 20, json!({"text": "/file out/report.txt"})));
    let sent = tg
        .wait("the document", |tg| tg.sent_files(ANN.0).first().cloned())
        .await;
    assert_eq!(
        (sent.method.as_str(), sent.name.as_str()),
        ("sendDocument", "report.txt")
    );
    assert_eq!(sent.bytes, b"all green\n");
    // An image goes as a photo.
    tg.push(message(&tg, 21, json!({"text": "/file chart.png"})));
    let photo = tg
        .wait("the photo", |tg| tg.sent_files(ANN.0).get(1).cloned())
        .await;
    assert_eq!(
        (photo.method.as_str(), photo.bytes.as_slice()),
        ("sendPhoto", PNG_1X1)
    );

    for path in ["../secret.txt", "link.txt"] {
        tg.push(message(&tg, 22, json!({"text": format!("/file {path}")})));
    }
    tg.wait("two refusals", |tg| {
        (tg.count_shown(ANN.0, "the path contains `..`") == 1
            && tg.count_shown(ANN.0, "link.txt cannot be sent") == 1)
            .then_some(())
    })
    .await;
    assert_eq!(tg.sent_files(ANN.0).len(), 2);
}

#[tokio::test]
async fn file_sends_a_working_directory_file_as_a_feishu_file_or_image_message() {
    let fs = FakeFeishu::start().await;
    let ev = Events::new("verification-token-1", Some("encrypt-key-1"));
    let d = Daemon::start(DaemonOptions {
        extra_config: fs.config(&ev, &[ALICE], ""),
        ..Default::default()
    })
    .await;
    std::fs::write(d.work_dir().join("report.txt"), b"all green\n").unwrap();
    std::fs::write(d.work_dir().join("chart.png"), PNG_1X1).unwrap();
    let chat = "oc_out";
    for text in ["/file report.txt", "/file chart.png"] {
        let m = ev.message(chat, "p2p", ALICE, text, false);
        feishu_post(&d, &ev.seal(&m)).await;
    }
    let file = fs
        .wait("a file message", |fs| {
            fs.shown(chat).into_iter().find(|m| m.msg_type == "file")
        })
        .await;
    let (name, bytes) = fs
        .uploaded(file.content["file_key"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        (name.as_str(), bytes.as_slice()),
        ("report.txt", &b"all green\n"[..])
    );
    let image = fs
        .wait("an image message", |fs| {
            fs.shown(chat).into_iter().find(|m| m.msg_type == "image")
        })
        .await;
    let (_, bytes) = fs
        .uploaded(image.content["image_key"].as_str().unwrap())
        .unwrap();
    assert_eq!(bytes, PNG_1X1);
}
