//! Where things live: the data dir (`$TETHER_HOME`, else `$XDG_DATA_HOME/tether`, else
//! `~/.local/share/tether`) and the default config file
//! (`$XDG_CONFIG_HOME/tether/config.toml`, else `~/.config/tether/config.toml`).
//!
//! The environment is passed in as a function so that tests never touch the process's.

use std::path::{Component, Path, PathBuf};

use anyhow::{Result, anyhow};

/// Reads an environment variable; unset and empty are both `None`.
pub type Env = dyn Fn(&str) -> Option<String>;

/// The process environment.
pub fn process_env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

pub fn home_dir(env: &Env) -> Option<PathBuf> {
    env("HOME").map(PathBuf::from).filter(|p| p.is_absolute())
}

/// An XDG base directory variable; relative values are ignored as the spec says.
fn xdg(env: &Env, key: &str) -> Option<PathBuf> {
    env(key).map(PathBuf::from).filter(|p| p.is_absolute())
}

/// The data dir when neither `TETHER_HOME` nor the config file chooses one.
pub fn default_data_dir(env: &Env) -> Result<PathBuf> {
    if let Some(dir) = xdg(env, "XDG_DATA_HOME") {
        return Ok(dir.join("tether"));
    }
    home_dir(env)
        .map(|home| home.join(".local/share/tether"))
        .ok_or_else(|| anyhow!("cannot find a data directory: set TETHER_HOME (or HOME)"))
}

/// Where the config file is looked for when `--config` / `TETHER_CONFIG` is not given.
pub fn default_config_file(env: &Env) -> Option<PathBuf> {
    let dir = xdg(env, "XDG_CONFIG_HOME").or_else(|| home_dir(env).map(|h| h.join(".config")))?;
    Some(dir.join("tether").join("config.toml"))
}

/// `~` and `~/x` → under `$HOME`.
pub fn expand_tilde(path: &Path, env: &Env) -> PathBuf {
    let Ok(rest) = path.strip_prefix("~") else {
        return path.to_path_buf();
    };
    match home_dir(env) {
        Some(home) => home.join(rest),
        None => path.to_path_buf(),
    }
}

pub fn current_dir() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
}

/// `path` made absolute against `base`, with `.` and `..` removed lexically.
pub fn absolutize(path: &Path, base: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    let mut out = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn data_dir_prefers_xdg_then_home() {
        let env = env_of(&[("HOME", "/home/me"), ("XDG_DATA_HOME", "/xdg/data")]);
        assert_eq!(
            default_data_dir(&env).unwrap(),
            PathBuf::from("/xdg/data/tether")
        );
        let env = env_of(&[("HOME", "/home/me"), ("XDG_DATA_HOME", "relative")]);
        assert_eq!(
            default_data_dir(&env).unwrap(),
            PathBuf::from("/home/me/.local/share/tether")
        );
        let env = env_of(&[]);
        assert!(default_data_dir(&env).is_err());
    }

    #[test]
    fn config_file_location() {
        let env = env_of(&[("HOME", "/home/me")]);
        assert_eq!(
            default_config_file(&env),
            Some(PathBuf::from("/home/me/.config/tether/config.toml"))
        );
        let env = env_of(&[("HOME", "/home/me"), ("XDG_CONFIG_HOME", "/cfg")]);
        assert_eq!(
            default_config_file(&env),
            Some(PathBuf::from("/cfg/tether/config.toml"))
        );
        assert_eq!(default_config_file(&env_of(&[])), None);
    }

    #[test]
    fn tilde_and_relative_paths() {
        let env = env_of(&[("HOME", "/home/me")]);
        assert_eq!(
            expand_tilde(Path::new("~/x"), &env),
            PathBuf::from("/home/me/x")
        );
        assert_eq!(
            expand_tilde(Path::new("~"), &env),
            PathBuf::from("/home/me")
        );
        assert_eq!(expand_tilde(Path::new("/a/~"), &env), PathBuf::from("/a/~"));
        assert_eq!(
            absolutize(Path::new("a/../b/./c"), Path::new("/base")),
            Path::new("/base/b/c")
        );
        assert_eq!(
            absolutize(Path::new("/abs"), Path::new("/base")),
            Path::new("/abs")
        );
    }
}
