// How tool calls from the different agents are read for display (pure functions of the
// page, run in Node): ACP tool calls (the fake agent, Gemini), Codex items, Claude tools.

import { test } from "node:test";
import assert from "node:assert/strict";
import { commandOf, outputOf, exitCodeOf, pathsOf, reasonOf } from "../../crates/tether-server/assets/js/activity.js";

test("ACP: rawInput command, text content, locations, diffs, rawOutput exit code", () => {
  const d = {
    rawInput: { command: ["cargo", "test"], reason: "run the tests" },
    content: [{ type: "content", content: { type: "text", text: "ok" } }, { type: "diff", path: "/w/src/lib.rs", oldText: "a", newText: "b" }],
    locations: [{ path: "/w/src/main.rs" }],
    rawOutput: { exit_code: 101 },
  };
  assert.equal(commandOf(d), "cargo test");
  assert.equal(outputOf(d), "ok");
  assert.equal(exitCodeOf(d), 101);
  assert.deepEqual(pathsOf(d), ["/w/src/main.rs", "/w/src/lib.rs"]);
  assert.equal(reasonOf(d), "run the tests");
});

test("Codex items: command execution and file changes", () => {
  const cmd = { type: "commandExecution", command: "ls -l", cwd: "/w", aggregatedOutput: "a\n", exitCode: 0 };
  assert.equal(commandOf(cmd), "ls -l");
  assert.equal(outputOf(cmd), "a\n");
  assert.equal(exitCodeOf(cmd), 0);
  const edit = { type: "fileChange", changes: [{ path: "a.txt", kind: "add" }], paths: ["a.txt"] };
  assert.deepEqual(pathsOf(edit), ["a.txt"]);
  assert.equal(commandOf(edit), undefined);
  // An MCP result object is not text: the row falls back to the JSON detail.
  assert.equal(outputOf({ type: "mcpToolCall", result: { content: [{ type: "text", text: "x" }] } }), undefined);
});

test("Claude tools: input command or file path, output text", () => {
  assert.equal(commandOf({ tool: "Bash", input: { command: "npm test", description: "Run tests" } }), "npm test");
  assert.equal(reasonOf({ tool: "Bash", input: { command: "npm test", description: "Run tests" } }), "Run tests");
  assert.deepEqual(pathsOf({ tool: "Edit", input: { file_path: "/w/a.py" } }), ["/w/a.py"]);
  assert.equal(outputOf({ output: "a\nb", is_error: false }), "a\nb");
});

test("nothing known: no command, no output, no paths", () => {
  for (const d of [undefined, null, {}, { foo: 1 }]) {
    assert.equal(commandOf(d), undefined);
    assert.equal(outputOf(d), undefined);
    assert.equal(exitCodeOf(d), undefined);
    assert.deepEqual(pathsOf(d), []);
  }
});
