// An unforced tool call through the official `ollama` library: /api/chat with `tools` and no
// forcing, on a model whose own greedy reply is a call (oracle-tool-call.gguf, Qwen 2.5's syntax):
// the client sees message.tool_calls, whole and streamed; without tools the same reply is text.
//   node ollama_tools_test.js BASE_URL MODEL
'use strict';
const { Ollama } = require('ollama');
const assert = require('assert');

const { weather } = require('./weather_tool');
const call = { name: 'get_weather', arguments: { city: 'Paris', unit: 'c' } };

async function main() {
  const [base, model] = process.argv.slice(2);
  const ollama = new Ollama({ host: base });
  const request = { model, messages: [{ role: 'user', content: 'Weather in Paris?' }], options: { temperature: 0, num_predict: 32 } };

  const r = await ollama.chat({ ...request, tools: [weather] });
  assert.deepStrictEqual(r.message.tool_calls, [{ function: call }], JSON.stringify(r.message));
  assert.strictEqual(r.message.content, '');
  assert.strictEqual(r.done_reason, 'stop');

  const calls = [];
  let content = '', last = null;
  for await (const part of await ollama.chat({ ...request, tools: [weather], stream: true })) {
    calls.push(...(part.message.tool_calls || []));
    content += part.message.content;
    last = part;
  }
  assert.deepStrictEqual(calls, [{ function: call }], 'streamed: one call, whole');
  assert.strictEqual(content, '');
  assert.strictEqual(last.done, true);

  // The model's choice, not the server's: without tools its reply is the call's text.
  const text = await ollama.chat(request);
  assert.strictEqual(text.message.tool_calls, undefined);
  assert.ok(text.message.content.startsWith('<tool_call>') && text.message.content.includes('"get_weather"'), text.message.content);
  console.log('ollama tools: all passed');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
