//! A temporary home for running the `tether` binary's commands (`serve`, `doctor`,
//! `token`, `pair`) with a config file and a controlled environment.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use tether_testkit::{bin_path, within};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Variables of the test's own environment that would change what tether does.
const CLEARED: [&str; 7] = [
    "TETHER_HOME",
    "TETHER_TOKEN",
    "TETHER_LISTEN",
    "TETHER_DEFAULT_AGENT",
    "TETHER_CONFIG",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
];

pub fn toml_str(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

pub struct Home {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
}

impl Home {
    /// A home whose config has a data dir, a workspace root and the fake agent, plus
    /// `top` (top-level keys) and `tables`.
    pub fn new(top: &str, tables: &str) -> Home {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let config = dir.path().join("tether.toml");
        // A `top` that sets the roots replaces ours.
        let roots = if top.contains("workspace_roots") {
            String::new()
        } else {
            format!("workspace_roots = [{}]\n", toml_str(&work))
        };
        let text = format!(
            "data_dir = {}\ndefault_agent = \"fake\"\n{roots}{top}\n\n\
             [agents.fake]\ndriver = \"acp\"\ncommand = {}\nargs = [\"--state-dir\", {}]\n\n{tables}\n",
            toml_str(&dir.path().join("data")),
            toml_str(&bin_path("fake-agent")),
            toml_str(&dir.path().join("fake-state")),
        );
        std::fs::write(&config, text).unwrap();
        Home { dir, config }
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `tether [--config <ours>] <args>` with a clean tether environment plus `env`.
    pub fn command(&self, with_config: bool, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(bin_path("tether"));
        if with_config {
            cmd.arg("--config").arg(&self.config);
        }
        cmd.args(args)
            .env("HOME", self.dir.path())
            .env("TETHER_LOG", "info")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for key in CLEARED {
            cmd.env_remove(key);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs a command that must end by itself.
    pub async fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.run_with(true, args, env).await
    }

    pub async fn run_with(&self, with_config: bool, args: &[&str], env: &[(&str, &str)]) -> Output {
        let what = format!("tether {} ends", args.join(" "));
        within(&what, self.command(with_config, args, env).output())
            .await
            .unwrap()
    }

    /// Starts `tether serve <args>` and waits for its address line.
    pub async fn serve(&self, args: &[&str], env: &[(&str, &str)]) -> Served {
        let stderr_path = self
            .dir
            .path()
            .join(format!("serve-{}.stderr", rand_suffix()));
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut all = vec!["serve"];
        all.extend_from_slice(args);
        let mut child = self
            .command(true, &all, env)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let base = within("tether serve prints its address", async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.strip_prefix("tether listening on ") {
                    return rest.trim().to_string();
                }
            }
            panic!(
                "tether serve exited before listening: {}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        })
        .await;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Served {
            pid: child.id().unwrap(),
            child,
            base,
            stderr_path,
        }
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

/// A running `tether serve` (killed on drop).
pub struct Served {
    pub child: Child,
    pub pid: u32,
    pub base: String,
    stderr_path: PathBuf,
}

impl Served {
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// SIGKILL, then wait: no clean-up runs.
    pub async fn kill(mut self) {
        within("killed tether serve exits", self.child.kill())
            .await
            .unwrap();
    }

    /// SIGTERM, then wait: a clean exit.
    pub async fn stop(mut self) {
        let pid = rustix::process::Pid::from_raw(self.pid as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let status = within("tether serve exits on SIGTERM", self.child.wait())
            .await
            .unwrap();
        assert!(status.success(), "exit status {status}: {}", self.stderr());
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Unix permission bits of a path.
pub fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}
