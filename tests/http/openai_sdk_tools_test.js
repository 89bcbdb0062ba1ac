// Tools (and n > 1) through the official OpenAI Node SDK, against umad serving the oracle model
// with Qwen 2.5's own chat template (its tool-call syntax: <tool_call>{"name", "arguments"}</tool_call>).
//   node openai_sdk_tools_test.js BASE_URL
// The oracle picks, among what the grammar allows, a fixed token, so a forced call is the same call
// every time; what it must be is what the schema allows.
'use strict';
// How long one request may take before it has hung (tests/e2e/daemon_harness.h's kHangGuard).
const kHangGuardMs = 120000;
const OpenAI = require('openai');
const assert = require('assert');

const { weather } = require('./weather_tool');
const clock = { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } };

function checkArguments(text) {
  const a = JSON.parse(text);
  assert.ok(['Paris', 'Rome'].includes(a.city), text);
  assert.ok(['c', 'f'].includes(a.unit), text);
  return a;
}

async function main() {
  const [baseURL] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey: 'not-needed', maxRetries: 0, timeout: kHangGuardMs });
  const chat = { model: 'oracle', messages: [{ role: 'user', content: 'Weather in Paris?' }], temperature: 0, max_tokens: 200 };

  // A forced call (named), one call: the reply is that call, its arguments valid for the schema.
  const forced = { ...chat, tools: [weather, clock], tool_choice: { type: 'function', function: { name: 'get_weather' } },
                   parallel_tool_calls: false };
  let r = await client.chat.completions.create(forced);
  const c = r.choices[0];
  assert.strictEqual(c.finish_reason, 'tool_calls');
  assert.strictEqual(c.message.content, null);
  assert.strictEqual(c.message.tool_calls.length, 1);
  const call = c.message.tool_calls[0];
  assert.strictEqual(call.type, 'function');
  assert.strictEqual(call.function.name, 'get_weather');
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  checkArguments(call.function.arguments);

  // Two choices, each its own call (its own id), the same arguments (the oracle).
  r = await client.chat.completions.create({ ...forced, n: 2 });
  assert.deepStrictEqual(r.choices.map((x) => [x.index, x.finish_reason, x.message.tool_calls.length]),
                         [[0, 'tool_calls', 1], [1, 'tool_calls', 1]]);
  assert.notStrictEqual(r.choices[0].message.tool_calls[0].id, r.choices[1].message.tool_calls[0].id);
  assert.strictEqual(r.choices[1].message.tool_calls[0].function.arguments, call.function.arguments);

  // Streamed with `required`: delta.tool_calls pieces (id and name first) that add up to the same call.
  const stream = await client.chat.completions.create({ ...forced, tool_choice: 'required', tools: [weather], stream: true });
  const calls = [];
  let finish = null, chunks = 0;
  for await (const ch of stream) {
    const d = ch.choices[0].delta;
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
    for (const t of d.tool_calls || []) {
      chunks++;
      if (!calls[t.index]) {
        assert.ok(t.id && t.function.name, 'a call starts with its id and name: ' + JSON.stringify(t));
        calls[t.index] = { id: t.id, name: t.function.name, arguments: '' };
      }
      calls[t.index].arguments += t.function.arguments || '';
    }
  }
  assert.strictEqual(finish, 'tool_calls');
  assert.strictEqual(calls.length, 1);
  assert.ok(chunks > 2, 'the arguments came in pieces');
  assert.strictEqual(calls[0].name, 'get_weather');
  assert.deepStrictEqual(checkArguments(calls[0].arguments), JSON.parse(call.function.arguments));

  // The SDK's own helper for streamed tool calls reads the same thing.
  const runner = client.beta && client.beta.chat && client.beta.chat.completions && client.beta.chat.completions.stream;
  if (runner) {
    const final = await client.beta.chat.completions.stream({ ...forced }).finalChatCompletion();
    assert.strictEqual(final.choices[0].message.tool_calls[0].function.name, 'get_weather');
    checkArguments(final.choices[0].message.tool_calls[0].function.arguments);
  }

  // The call's result goes back as a `tool` message; the model answers (the oracle: with text).
  r = await client.chat.completions.create({ ...chat, max_tokens: 8, tools: [weather], messages: [
    ...chat.messages, c.message, { role: 'tool', tool_call_id: call.id, content: '21 C, sunny' }] });
  assert.strictEqual(r.choices[0].finish_reason, 'length');
  assert.ok(r.usage.prompt_tokens > 0 && typeof r.choices[0].message.content === 'string');

  // tool_choice none: tools described, nothing constrained or parsed; auto: the same text (the
  // oracle never writes the call marker) through the family's parser, which drops leading blanks.
  const none = await client.chat.completions.create({ ...chat, max_tokens: 16, tools: [weather], tool_choice: 'none' });
  const auto = await client.chat.completions.create({ ...chat, max_tokens: 16, tools: [weather] });
  assert.strictEqual(none.choices[0].message.tool_calls, undefined);
  assert.strictEqual(auto.choices[0].message.tool_calls, undefined);
  assert.strictEqual(auto.choices[0].finish_reason, 'length');
  assert.strictEqual(auto.choices[0].message.content, none.choices[0].message.content.trimStart());

  await assert.rejects(client.chat.completions.create({ ...chat, tools: [weather],
    tool_choice: { type: 'function', function: { name: 'nope' } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');

  await anthropicTools(baseURL.replace(/\/v1$/, ''), call);
  await responsesTools(client, call);
  console.log('openai sdk tools: all checks passed');
}

// The same forced call through Anthropic's Messages API (tool_use blocks, input_json_delta) and
// the result back as a tool_result block; the oracle makes the same call as through chat.
async function anthropicTools(base, call) {
  const Anthropic = require('@anthropic-ai/sdk');
  const client = new Anthropic({ baseURL: base, apiKey: 'not-needed', maxRetries: 0, timeout: kHangGuardMs });
  const tool = { name: 'get_weather', description: weather.function.description, input_schema: weather.function.parameters };
  const req = { model: 'oracle', max_tokens: 200, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [tool],
                tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true } };
  const m = await client.messages.create(req);
  assert.strictEqual(m.stop_reason, 'tool_use', JSON.stringify(m));
  const use = m.content.find((b) => b.type === 'tool_use');
  assert.ok(use, JSON.stringify(m.content));
  assert.strictEqual(use.name, 'get_weather');
  assert.deepStrictEqual(use.input, JSON.parse(call.function.arguments), 'the same call as through chat');
  const streamed = await client.messages.stream(req).finalMessage();
  const suse = streamed.content.find((b) => b.type === 'tool_use');
  assert.deepStrictEqual(suse.input, use.input, 'streamed: input_json_delta pieces make the same input');
  assert.strictEqual(streamed.stop_reason, 'tool_use');
  const answered = await client.messages.create({ model: 'oracle', max_tokens: 8, tools: [tool], messages: [
    ...req.messages, { role: 'assistant', content: m.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '21 C, sunny' }] }] });
  assert.strictEqual(answered.stop_reason, 'max_tokens');
  assert.ok(answered.usage.input_tokens > 0);
}

// And through the Responses API: a function_call item, and its output sent back.
async function responsesTools(client, call) {
  const tool = { type: 'function', name: 'get_weather', description: weather.function.description,
                 parameters: weather.function.parameters };
  const req = { model: 'oracle', input: 'Weather in Paris?', tools: [tool], max_output_tokens: 200,
                tool_choice: { type: 'function', name: 'get_weather' }, parallel_tool_calls: false };
  const r = await client.responses.create(req);
  const fc = r.output.find((o) => o.type === 'function_call');
  assert.ok(fc, JSON.stringify(r.output));
  assert.strictEqual(fc.name, 'get_weather');
  assert.deepStrictEqual(JSON.parse(fc.arguments), JSON.parse(call.function.arguments));
  let args = '';
  for await (const e of await client.responses.create({ ...req, stream: true })) {
    if (e.type === 'response.function_call_arguments.delta') args += e.delta;
  }
  assert.deepStrictEqual(JSON.parse(args), JSON.parse(fc.arguments), 'streamed arguments');
  const next = await client.responses.create({ model: 'oracle', tools: [tool], max_output_tokens: 8,
    input: [{ role: 'user', content: 'Weather in Paris?' }, { type: 'function_call', call_id: fc.call_id, name: fc.name, arguments: fc.arguments },
            { type: 'function_call_output', call_id: fc.call_id, output: '21 C, sunny' }] });
  assert.strictEqual(next.status, 'incomplete');
}

main().catch((e) => { console.error(e); process.exit(1); });
