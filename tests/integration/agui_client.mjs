// Runs an agent through AG-UI with the official TypeScript client (`HttpAgent` from
// @ag-ui/client), which validates every event and checks the protocol's ordering rules.
//
//   node tests/integration/agui_client.mjs <agent-url> <token> [threadId] [message]
//
// Prints one JSON object per line: {"kind": "event", "event": ...} for every event the
// client received, then {"kind": "result", "newMessages": [...], "messages": [...]} with
// the conversation the client built, or {"kind": "error", "message": ...} (exit code 1).
import { HttpAgent } from "@ag-ui/client";

const [url, token, threadId = `thread-${Date.now()}`, message = "Why does payments.internal.example.com fail TLS handshakes?"] =
  process.argv.slice(2);
if (!url || !token) {
  console.error("usage: node agui_client.mjs <agent-url> <token> [threadId] [message]");
  process.exit(2);
}

const agent = new HttpAgent({
  url,
  headers: { Authorization: `Bearer ${token}` },
  threadId,
  initialMessages: [{ id: "user-1", role: "user", content: message }],
});

const print = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

try {
  const result = await agent.runAgent({}, {
    onEvent: ({ event }) => print({ kind: "event", event }),
  });
  print({ kind: "result", newMessages: result.newMessages, messages: agent.messages });
} catch (error) {
  print({ kind: "error", message: String(error?.message ?? error) });
  process.exitCode = 1;
}
