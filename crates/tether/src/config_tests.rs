use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use tether_agents::DriverKind;

use super::*;

fn env_from(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| map.get(k).cloned()
}

fn home_env() -> impl Fn(&str) -> Option<String> {
    env_from(&[("HOME", "/home/me")])
}

fn resolve(text: &str, env: &Env) -> Result<Settings> {
    Settings::resolve(
        parse(text)?,
        Some(PathBuf::from("/etc/tether/config.toml")),
        None,
        env,
    )
}

#[test]
fn empty_config_gives_defaults() {
    let s = resolve("", &home_env()).unwrap();
    assert_eq!(s.listen.to_string(), "127.0.0.1:7878");
    assert_eq!(s.data_dir, PathBuf::from("/home/me/.local/share/tether"));
    assert_eq!(s.default_agent, "codex");
    assert_eq!(s.workspace_roots, vec![PathBuf::from("/home/me")]);
    assert_eq!(s.default_cwd, PathBuf::from("/home/me"));
    assert_eq!(s.approval_timeout, Duration::from_secs(1800));
    assert_eq!(s.queue_cap, 16);
    assert_eq!(s.start_timeout, Duration::from_secs(30));
    assert_eq!(s.turn_timeout, None);
    assert_eq!(s.token_override, None);
    let names: Vec<_> = s.agents.keys().cloned().collect();
    assert_eq!(names, ["claude", "codex", "gemini"]);
    assert_eq!(s.agents["codex"].args, ["app-server"]);
    assert_eq!(s.agents["gemini"].driver, DriverKind::Acp);
    assert_eq!(s.agents["claude"].driver, DriverKind::Claude);
    assert!(
        s.agents["claude"]
            .args
            .contains(&"--permission-prompt-tool".to_owned())
    );
}

#[test]
fn full_config_is_read() {
    let text = r#"
        listen = "0.0.0.0:9000"
        data_dir = "data"
        default_agent = "fake"
        workspace_roots = ["/srv/work", "~/code"]
        default_cwd = "/srv/work/app"
        approval_timeout_secs = 60
        queue_cap = 4
        start_timeout_secs = 5
        turn_timeout_secs = 600

        [agents.fake]
        driver = "acp"
        command = "/opt/fake-agent"
        args = ["acp"]
        env = { FAKE_MODE = "1" }

        [agents.codex]
        command = "/opt/codex"
    "#;
    let s = resolve(text, &home_env()).unwrap();
    assert_eq!(s.listen.to_string(), "0.0.0.0:9000");
    assert_eq!(s.data_dir, PathBuf::from("/etc/tether/data"));
    assert_eq!(s.default_agent, "fake");
    assert_eq!(
        s.workspace_roots,
        [PathBuf::from("/srv/work"), PathBuf::from("/home/me/code")]
    );
    assert_eq!(s.default_cwd, PathBuf::from("/srv/work/app"));
    assert_eq!(s.turn_timeout, Some(Duration::from_secs(600)));
    let fake = &s.agents["fake"];
    assert_eq!((fake.name.as_str(), fake.driver), ("fake", DriverKind::Acp));
    assert_eq!(fake.env["FAKE_MODE"], "1");
    // Overriding a built-in keeps what the file does not say.
    let codex = &s.agents["codex"];
    assert_eq!(
        (codex.command.as_str(), codex.driver),
        ("/opt/codex", DriverKind::Codex)
    );
    assert_eq!(codex.args, ["app-server"]);

    let rc = s.runtime_config("n1");
    assert_eq!(rc.default_agent, "fake");
    assert_eq!(rc.queue_cap, 4);
    assert_eq!(rc.agents.len(), 4);
}

#[test]
fn unknown_keys_are_named() {
    let err = format!(
        "{:#}",
        resolve("lisen = \"127.0.0.1:1\"", &home_env()).unwrap_err()
    );
    assert!(err.contains("lisen"), "{err}");
    let err = format!(
        "{:#}",
        resolve("[agents.codex]\ncmd = \"x\"", &home_env()).unwrap_err()
    );
    assert!(err.contains("cmd"), "{err}");
    let err = format!(
        "{:#}",
        resolve("[agents.x]\ndriver = \"gpt\"", &home_env()).unwrap_err()
    );
    assert!(err.contains("gpt"), "{err}");
}

#[test]
fn new_agent_needs_driver_and_command() {
    let err = resolve("[agents.x]\ncommand = \"x\"", &home_env())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("[agents.x]") && err.contains("driver"),
        "{err}"
    );
    let err = resolve("[agents.x]\ndriver = \"acp\"", &home_env())
        .unwrap_err()
        .to_string();
    assert!(err.contains("command"), "{err}");
}

#[test]
fn default_agent_must_be_configured() {
    let err = resolve("default_agent = \"nope\"", &home_env())
        .unwrap_err()
        .to_string();
    assert!(err.contains("nope") && err.contains("codex"), "{err}");
}

#[test]
fn listen_must_parse() {
    let err = format!(
        "{:#}",
        resolve("listen = \"banana\"", &home_env()).unwrap_err()
    );
    assert!(err.contains("banana"), "{err}");
    assert!(err.contains("`listen` in /etc/tether/config.toml"), "{err}");
    assert_eq!(
        parse_listen("localhost:80").unwrap().to_string(),
        "127.0.0.1:80"
    );
    assert_eq!(parse_listen("[::1]:0").unwrap().to_string(), "[::1]:0");
}

#[test]
fn default_cwd_must_lie_under_a_root() {
    let text = "workspace_roots = [\"/srv\"]\ndefault_cwd = \"/etc\"";
    let err = resolve(text, &home_env()).unwrap_err().to_string();
    assert!(err.contains("default_cwd"), "{err}");
    // `..` cannot escape lexically either.
    let text = "workspace_roots = [\"/srv\"]\ndefault_cwd = \"/srv/../etc\"";
    assert!(resolve(text, &home_env()).is_err());
}

#[test]
fn zero_timeouts_are_rejected_except_turn() {
    assert!(resolve("approval_timeout_secs = 0", &home_env()).is_err());
    assert!(resolve("start_timeout_secs = 0", &home_env()).is_err());
    assert_eq!(
        resolve("turn_timeout_secs = 0", &home_env())
            .unwrap()
            .turn_timeout,
        None
    );
}

#[test]
fn environment_overrides_the_file_and_flags_override_both() {
    let env = env_from(&[
        ("HOME", "/home/me"),
        ("TETHER_LISTEN", "127.0.0.1:1111"),
        ("TETHER_HOME", "/var/tether"),
        ("TETHER_DEFAULT_AGENT", "claude"),
        ("TETHER_TOKEN", "tok"),
    ]);
    let text = "listen = \"127.0.0.1:2222\"\ndata_dir = \"/d\"\ndefault_agent = \"gemini\"";
    let s = resolve(text, &env).unwrap();
    assert_eq!(s.listen.to_string(), "127.0.0.1:1111");
    assert_eq!(s.data_dir, PathBuf::from("/var/tether"));
    assert_eq!(s.default_agent, "claude");
    assert_eq!(s.token_override.as_deref(), Some("tok"));
    let s = Settings::resolve(parse(text).unwrap(), None, Some("127.0.0.1:0"), &env).unwrap();
    assert_eq!(s.listen.to_string(), "127.0.0.1:0");
}

#[test]
fn data_dir_falls_back_to_xdg() {
    let env = env_from(&[("HOME", "/home/me"), ("XDG_DATA_HOME", "/xdg")]);
    assert_eq!(
        resolve("", &env).unwrap().data_dir,
        PathBuf::from("/xdg/tether")
    );
}

#[test]
fn load_reads_an_explicit_file_and_requires_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tether.toml");
    std::fs::write(&path, "queue_cap = 3\ndata_dir = \"d\"").unwrap();
    let s = Settings::load(Some(&path), None, &home_env()).unwrap();
    assert_eq!(s.queue_cap, 3);
    assert_eq!(s.data_dir, dir.path().join("d"));
    assert_eq!(s.config_path.as_deref(), Some(path.as_path()));
    let missing = dir.path().join("missing.toml");
    let err = format!(
        "{:#}",
        Settings::load(Some(&missing), None, &home_env()).unwrap_err()
    );
    assert!(err.contains("missing.toml"), "{err}");
}

#[test]
fn load_uses_the_default_location_only_when_present() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().to_str().unwrap().to_owned();
    let env = move |k: &str| match k {
        "HOME" => Some("/home/me".to_owned()),
        "XDG_CONFIG_HOME" => Some(cfg.clone()),
        _ => None,
    };
    let s = Settings::load(None, None, &env).unwrap();
    assert_eq!(s.config_path, None);
    std::fs::create_dir_all(dir.path().join("tether")).unwrap();
    std::fs::write(dir.path().join("tether/config.toml"), "queue_cap = 7").unwrap();
    let s = Settings::load(None, None, &env).unwrap();
    assert_eq!(s.queue_cap, 7);
    assert!(s.config_path.is_some());
}

#[test]
fn errors_from_the_environment_name_the_variable() {
    let err = |pairs: &[(&str, &str)]| {
        let mut all = vec![("HOME", "/home/me")];
        all.extend_from_slice(pairs);
        format!("{:#}", resolve("", &env_from(&all)).unwrap_err())
    };
    let e = err(&[("TETHER_LISTEN", "banana")]);
    assert!(
        e.starts_with("TETHER_LISTEN: ") && e.contains("banana"),
        "{e}"
    );
    let e = err(&[("TETHER_DEFAULT_AGENT", "nobody")]);
    assert!(e.starts_with("TETHER_DEFAULT_AGENT: "), "{e}");
    let e = err(&[("TETHER_TOKEN", " \t ")]);
    assert!(e.contains("TETHER_TOKEN") && e.contains("blank"), "{e}");
    let e = format!(
        "{:#}",
        resolve("default_agent = \"nobody\"", &home_env()).unwrap_err()
    );
    assert!(
        e.contains("default_agent in /etc/tether/config.toml"),
        "{e}"
    );
    let s = resolve("", &env_from(&[("HOME", "/h"), ("TETHER_TOKEN", " tok ")])).unwrap();
    assert_eq!(s.token_override.as_deref(), Some("tok"));
}

#[test]
fn missing_directories_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let text = format!("workspace_roots = [{root:?}]\ndefault_cwd = \"{root}/gone\"");
    let s = resolve(&text, &home_env()).unwrap();
    let e = s.check_directories().unwrap_err().to_string();
    assert!(
        e.starts_with("default_cwd: ") && e.contains("does not exist"),
        "{e}"
    );
    let s = resolve(&format!("workspace_roots = [{root:?}]"), &home_env()).unwrap();
    s.check_directories().unwrap();
}

#[test]
fn attachment_limits_default_to_the_platforms_and_can_be_set() {
    let s = resolve("", &home_env()).unwrap();
    assert_eq!(s.attachments.max_file_bytes, 20 * 1024 * 1024);
    assert_eq!(s.attachments.max_message_bytes, 50 * 1024 * 1024);
    let s = resolve(
        "[attachments]\nmax_file_mb = 5\nmax_message_mb = 8\n",
        &home_env(),
    )
    .unwrap();
    assert_eq!(s.attachments.max_file_bytes, 5 * 1024 * 1024);
    assert_eq!(
        s.runtime_config("n1").attachments.max_message_bytes,
        8 * 1024 * 1024
    );
    assert!(resolve("[attachments]\nmax_file_mb = 0\n", &home_env()).is_err());
    assert!(resolve("[attachments]\nmax_file_mb = 5000\n", &home_env()).is_err());
    assert!(resolve("[attachments]\nmax_mb = 5\n", &home_env()).is_err());
}

#[test]
fn cluster_settings_are_read_and_checked() {
    let s = resolve("", &home_env()).unwrap();
    let rc = s.runtime_config("n1");
    assert_eq!(rc.cluster.node_id, "n1");
    assert_eq!(rc.cluster.lease_ttl, Duration::from_secs(10));
    assert_eq!(rc.cluster.max_live_per_node, 0);
    assert_eq!(rc.cluster.attachments_dir, None);
    assert!(rc.cluster.notices);

    let s = resolve(
        "[cluster]\nlease_ttl_secs = 3\nmax_live_per_node = 40\nattachments_dir = \"/srv/shared/att\"\nnotices = false\n",
        &home_env(),
    )
    .unwrap();
    let rc = s.runtime_config("n2");
    assert_eq!(rc.cluster.lease_ttl, Duration::from_secs(3));
    assert_eq!(rc.cluster.max_live_per_node, 40);
    assert!(!rc.cluster.notices);
    assert_eq!(
        rc.cluster.attachments_dir,
        Some(PathBuf::from("/srv/shared/att"))
    );

    let err = resolve("[cluster]\nattachments_dir = \"rel/dir\"\n", &home_env()).unwrap_err();
    assert!(
        err.to_string()
            .contains("attachments_dir must be an absolute path"),
        "{err}"
    );
    let err = resolve("[cluster]\nlease_ttl_secs = 0\n", &home_env()).unwrap_err();
    assert!(err.to_string().contains("lease_ttl_secs"), "{err}");
}

#[test]
fn claude_spare_defaults_to_a_claude_default_agent() {
    let env = home_env();
    assert!(
        !resolve("", &env).unwrap().pool.claude_spare,
        "codex by default"
    );
    let claude = "default_agent = \"claude\"";
    assert!(resolve(claude, &env).unwrap().pool.claude_spare);
    let off = format!("{claude}\n[pool]\nclaude_spare = false");
    assert!(!resolve(&off, &env).unwrap().pool.claude_spare);
    let on = "[pool]\nclaude_spare = true";
    assert!(resolve(on, &env).unwrap().pool.claude_spare);
}

/// Issue 24, first use 2: a configured agent gets its driver's defaults unless given.
#[test]
fn configured_agents_get_their_drivers_defaults() {
    let file: FileConfig = parse(
        "[agents.mine]\ndriver = \"claude\"\ncommand = \"/opt/claude\"\npass_env = [\"EXTRA\"]\n\n\
         [agents.cx]\ndriver = \"acp\"\ncommand = \"/usr/local/bin/codex-acp\"\n\n\
         [agents.own]\ndriver = \"codex\"\ncommand = \"codex\"\nargs = [\"app-server\", \"-c\", \"x=1\"]\n\n\
         [agents.other]\ndriver = \"acp\"\ncommand = \"my-agent\"\n",
    )
    .unwrap();
    let agents = merge_agents(file.agents).unwrap();
    let mine = &agents["mine"];
    assert_eq!(mine.args.first().map(String::as_str), Some("-p"));
    assert!(mine.args.iter().any(|a| a == "stream-json"));
    assert!(mine.pass_env.iter().any(|v| v == "ANTHROPIC_API_KEY"));
    assert!(mine.pass_env.iter().any(|v| v == "EXTRA"));
    let cx = &agents["cx"];
    assert!(cx.args.is_empty());
    assert!(
        cx.pass_env.iter().any(|v| v == "OPENAI_API_KEY"),
        "{:?}",
        cx.pass_env
    );
    assert_eq!(
        agents["own"].args,
        ["app-server", "-c", "x=1"],
        "given args replace the defaults"
    );
    let other = &agents["other"];
    assert!(
        other.args.is_empty() && other.pass_env.is_empty(),
        "{other:?}"
    );
}
