// Drives umad's Anthropic Messages API with the official Anthropic Node SDK, and its Responses API
// with the official OpenAI Node SDK, as real clients.
//   node anthropic_responses_sdk_test.js BASE_URL EXPECTATIONS.json [gateway]
// (gateway: uma-gw in front, which has no count_tokens: it needs the model's vocabulary there)
// BASE_URL without /v1 (each SDK adds its own path). The expectations come from the oracle model
// (tests/e2e/openai_sdk_run.cc computes them): the chatml prompt of a system and a user message.
'use strict';
// How long one request may take before it has hung (tests/e2e/daemon_harness.h's kHangGuard).
const kHangGuardMs = 120000;
const Anthropic = require('@anthropic-ai/sdk');
const OpenAI = require('openai');
const fs = require('fs');
const assert = require('assert');

async function anthropic(base, exp, gateway) {
  const client = new Anthropic({ baseURL: base, apiKey: 'not-needed', maxRetries: 0, timeout: kHangGuardMs });
  const req = { model: 'oracle', max_tokens: exp.n, system: 'be brief', messages: [{ role: 'user', content: 'hello world' }] };

  let m = await client.messages.create(req);
  assert.strictEqual(m.type, 'message');
  assert.strictEqual(m.role, 'assistant');
  assert.strictEqual(m.content.length, 1);
  assert.strictEqual(m.content[0].type, 'text');
  assert.strictEqual(m.content[0].text, exp.chat, 'messages text');
  assert.strictEqual(m.stop_reason, 'max_tokens');
  assert.deepStrictEqual([m.usage.input_tokens, m.usage.output_tokens], [exp.chat_prompt_tokens, exp.n]);

  // Streamed: the SDK assembles the same message from the events.
  const stream = client.messages.stream(req);
  const types = [];
  let startUsage = null;
  stream.on('streamEvent', (e) => {
    types.push(e.type);
    if (e.type === 'message_start') startUsage = e.message.usage;
  });
  const final = await stream.finalMessage();
  assert.strictEqual(final.content[0].text, exp.chat, 'streamed messages text');
  assert.strictEqual(final.stop_reason, 'max_tokens');
  assert.strictEqual(final.usage.output_tokens, exp.n);
  // message_start tells the prompt's tokens already (those the cache gave apart).
  assert.strictEqual(startUsage.input_tokens + (startUsage.cache_read_input_tokens || 0), exp.chat_prompt_tokens,
                     JSON.stringify(startUsage));
  assert.deepStrictEqual([types[0], types[1], types[types.length - 2], types[types.length - 1]],
                         ['message_start', 'content_block_start', 'message_delta', 'message_stop'], types.join(','));

  // Content blocks and a stop sequence the client gave.
  m = await client.messages.create({ ...req, messages: [{ role: 'user', content: [{ type: 'text', text: 'hello ' }, { type: 'text', text: 'world' }] }],
                                     stop_sequences: [exp.chat_stop] });
  assert.strictEqual(m.content[0].text, exp.chat_before_stop);
  assert.strictEqual(m.stop_reason, 'stop_sequence');
  assert.strictEqual(m.stop_sequence, exp.chat_stop);

  if (!gateway) {
    const count = await client.messages.countTokens({ model: 'oracle', system: 'be brief', messages: req.messages });
    assert.strictEqual(count.input_tokens, exp.chat_prompt_tokens, 'count_tokens');
  }

  await assert.rejects(client.messages.create({ model: 'oracle', messages: req.messages }),
                       (e) => e instanceof Anthropic.BadRequestError && e.error.type === 'error' &&
                              e.error.error.type === 'invalid_request_error' && /max_tokens/.test(e.message));
  await assert.rejects(client.messages.create({ ...req, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }),
                       (e) => e instanceof Anthropic.BadRequestError);
}

async function responses(base, exp) {
  const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'not-needed', maxRetries: 0, timeout: kHangGuardMs });
  const req = { model: 'oracle', instructions: 'be brief', input: 'hello world', max_output_tokens: exp.n };
  let r = await client.responses.create(req);
  assert.strictEqual(r.object, 'response');
  assert.strictEqual(r.output_text, exp.chat, 'responses text');
  assert.strictEqual(r.status, 'incomplete');
  assert.strictEqual(r.incomplete_details.reason, 'max_output_tokens');
  assert.deepStrictEqual([r.usage.input_tokens, r.usage.output_tokens], [exp.chat_prompt_tokens, exp.n]);

  // The same as input items.
  r = await client.responses.create({ ...req, instructions: undefined,
    input: [{ role: 'developer', content: 'be brief' }, { role: 'user', content: [{ type: 'input_text', text: 'hello world' }] }] });
  assert.strictEqual(r.output_text, exp.chat, 'input items');

  let text = '', last = null, seq = -1, done = '';
  for await (const e of await client.responses.create({ ...req, stream: true })) {
    assert.ok(e.sequence_number > seq, 'sequence numbers grow');
    seq = e.sequence_number;
    if (e.type === 'response.output_text.delta') text += e.delta;
    if (e.type === 'response.output_text.done') done = e.text;
    last = e;
  }
  assert.strictEqual(text, exp.chat, 'streamed deltas');
  assert.strictEqual(done, exp.chat, 'output_text.done');
  assert.strictEqual(last.type, 'response.incomplete');
  assert.strictEqual(last.response.output[0].content[0].text, exp.chat);

  await assert.rejects(client.responses.create({ ...req, previous_response_id: 'resp_1' }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id');
  await assert.rejects(client.responses.create({ ...req, store: true }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'store');
}

async function main() {
  const [base, expFile, mode] = process.argv.slice(2);
  const exp = JSON.parse(fs.readFileSync(expFile, 'utf8'));
  await anthropic(base, exp, mode === 'gateway');
  await responses(base, exp);
  console.log('all checks passed');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
