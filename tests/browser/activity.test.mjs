// How tool calls from the different agents are read for display (pure functions of the
// page, run in Node): ACP tool calls (the fake agent, Gemini), Codex items, Claude tools.

import { test } from "node:test";
import assert from "node:assert/strict";
import { commandOf, outputOf, exitCodeOf, pathsOf, reasonOf, diffsOf } from "../../crates/tether-server/assets/js/activity.js";

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

test("diffs: a Codex unified diff, an ACP diff block, Claude Edit, MultiEdit and Write", () => {
  const codex = { type: "fileChange", changes: [{ path: "a.txt", kind: { type: "update" }, diff: "@@ -1 +1 @@\n-old\n+new" }], paths: ["a.txt"] };
  assert.deepEqual(diffsOf(codex), [{ path: "a.txt", text: "@@ -1 +1 @@\n-old\n+new" }]);
  const acp = {
    content: [{ type: "diff", path: "/w/lib.rs", oldText: "a\nb\n", newText: "a\nc\n" }],
    // claude-code-acp also sends Claude's input as rawInput: shown once.
    rawInput: { file_path: "/w/lib.rs", old_string: "b", new_string: "c" },
  };
  assert.deepEqual(diffsOf(acp), [{ path: "/w/lib.rs", text: "-a\n-b\n+a\n+c" }]);
  assert.deepEqual(diffsOf({ input: { file_path: "/w/a.py", old_string: "x = 1", new_string: "x = 2" } }),
    [{ path: "/w/a.py", text: "-x = 1\n+x = 2" }]);
  assert.deepEqual(diffsOf({ input: { file_path: "/w/a.py", edits: [{ old_string: "a", new_string: "b" }, { old_string: "c", new_string: "" }] } }),
    [{ path: "/w/a.py", text: "-a\n+b" }, { path: "/w/a.py", text: "-c" }]);
  assert.deepEqual(diffsOf({ input: { file_path: "/w/new.md", content: "# hi\n" } }), [{ path: "/w/new.md", text: "+# hi" }]);
  // A new file over ACP has no old text.
  assert.deepEqual(diffsOf({ content: [{ type: "diff", path: "n.txt", oldText: null, newText: "x" }] }), [{ path: "n.txt", text: "+x" }]);
  for (const d of [undefined, null, {}, { changes: [{ path: "a.txt", kind: "add" }] }, { input: { command: "ls" } }]) {
    assert.deepEqual(diffsOf(d), []);
  }
});
