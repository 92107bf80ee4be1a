//! A minimal MCP client for the `mcp <tool> <json-args>` directive: starts the first
//! stdio MCP server the client gave the session (ACP `mcpServers`, with its env), runs
//! `initialize` and `notifications/initialized`, then the directive's `tools/call`s on
//! that one connection, and returns each result's text.

use std::process::Stdio;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

/// A stdio MCP server as the client described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerSpec {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// The stdio servers of ACP `session/new|load|resume` params (`mcpServers`).
pub fn parse_servers(params: &Value) -> Vec<McpServerSpec> {
    let Some(list) = params.get("mcpServers").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|s| {
            let command = s.get("command")?.as_str()?.to_owned();
            let strs = |v: Option<&Value>| -> Vec<String> {
                v.and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let env = s
                .get("env")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|e| {
                            Some((
                                e.get("name")?.as_str()?.to_owned(),
                                e.get("value")?.as_str()?.to_owned(),
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default();
            Some(McpServerSpec {
                name: s
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                command,
                args: strs(s.get("args")),
                env,
            })
        })
        .collect()
}

struct Conn {
    child: Child,
    stdin: ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Conn {
    async fn send(&mut self, msg: Value) -> Result<()> {
        let mut line = msg.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// Reads until the response to request `id`.
    async fn response(&mut self, id: i64) -> Result<Value> {
        while let Some(line) = self.lines.next_line().await? {
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if msg.get("id").and_then(Value::as_i64) == Some(id) && msg.get("method").is_none() {
                if let Some(err) = msg.get("error") {
                    bail!("MCP error: {err}");
                }
                return Ok(msg.get("result").cloned().unwrap_or(Value::Null));
            }
        }
        bail!("the MCP server closed its output")
    }
}

/// One connection to a stdio MCP server, initialized, for the calls of one `mcp`
/// directive. Like a real agent, which connects its MCP servers before it calls a tool,
/// it is opened before the first call is announced: a tool call the client sees is made
/// on a connection the server has already admitted.
pub struct Client {
    conn: Conn,
    next_id: i64,
}

impl Client {
    /// Starts `server` and runs `initialize` and `notifications/initialized`.
    pub async fn start(server: &McpServerSpec) -> Result<Client> {
        let mut cmd = Command::new(&server.command);
        cmd.args(&server.args)
            .envs(server.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting MCP server {}", server.command))?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut conn = Conn {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        };
        conn.send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "fake-agent", "version": env!("CARGO_PKG_VERSION")},
            }}),
        )
        .await?;
        conn.response(1).await?;
        conn.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(Client { conn, next_id: 2 })
    }

    /// Calls `tool` with `args`; the text blocks of the result, joined. `call_id` goes
    /// into `_meta` so the server can link the call to this tool call.
    pub async fn call(&mut self, tool: &str, args: Value, call_id: &str) -> Result<String> {
        let id = self.next_id;
        self.next_id += 1;
        self.conn
            .send(
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                    "name": tool,
                    "arguments": args,
                    "_meta": {"fake-agent/toolCallId": call_id},
                }}),
            )
            .await?;
        let result = self.conn.response(id).await?;
        let text: Vec<&str> = result
            .get("content")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|c| c.get("text").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        Ok(text.join("\n"))
    }

    /// Closes the server's input and lets it exit (killed after 2 s).
    pub async fn close(self) {
        let Conn {
            mut child, stdin, ..
        } = self.conn;
        drop(stdin);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), child.wait()).await;
        let _ = child.kill().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_acp_mcp_servers() {
        let params = json!({"cwd": "/", "mcpServers": [
            {"name": "tether", "command": "/bin/t", "args": ["mcp"],
             "env": [{"name": "A", "value": "1"}]},
            {"name": "http", "type": "http", "url": "http://x"},
        ]});
        let s = parse_servers(&params);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].name, "tether");
        assert_eq!(s[0].args, vec!["mcp".to_owned()]);
        assert_eq!(s[0].env, vec![("A".to_owned(), "1".to_owned())]);
        assert!(parse_servers(&json!({})).is_empty());
    }
}
