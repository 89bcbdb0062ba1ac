// Drives umad's HTTP API with the official OpenAI Node SDK as a real client.
//   node openai_sdk_test.js BASE_URL EXPECTATIONS.json
// The expectations come from the oracle model (tests/e2e/umad_http_test.cc computes them).
'use strict';
// How long one request may take before it has hung (tests/e2e/daemon_harness.h's kHangGuard).
const kHangGuardMs = 120000;
const OpenAI = require('openai');
const fs = require('fs');
const assert = require('assert');

async function collect(stream, pick) {
  let text = '', finish = null, usage = null, role = null;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    const c = ch.choices && ch.choices[0];
    if (!c) continue;
    const part = pick(c);
    if (part.role) role = part.role;
    if (part.text) text += part.text;
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, finish, usage, role };
}

async function main() {
  const [baseURL, expFile] = process.argv.slice(2);
  const exp = JSON.parse(fs.readFileSync(expFile, 'utf8'));
  const client = new OpenAI({ baseURL, apiKey: 'not-needed', maxRetries: 0, timeout: kHangGuardMs });
  const base = { model: 'oracle', prompt: exp.prompt, max_tokens: exp.n, temperature: 0 };

  let r = await client.completions.create(base);
  assert.strictEqual(r.object, 'text_completion');
  assert.strictEqual(r.choices[0].text, exp.completion, 'completion text');
  assert.strictEqual(r.choices[0].finish_reason, 'length');
  assert.deepStrictEqual([r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens],
                         [exp.prompt_tokens, exp.n, exp.prompt_tokens + exp.n]);

  let s = await collect(await client.completions.create({ ...base, stream: true, stream_options: { include_usage: true } }),
                        (c) => ({ text: c.text }));
  assert.strictEqual(s.text, exp.completion, 'streamed completion text');
  assert.strictEqual(s.finish, 'length');
  assert.strictEqual(s.usage.completion_tokens, exp.n, 'include_usage');

  r = await client.completions.create({ ...base, stop: [exp.stop] });
  assert.strictEqual(r.choices[0].text, exp.before_stop, 'text before the stop string');
  assert.strictEqual(r.choices[0].finish_reason, 'stop');

  const chat = { model: 'oracle', messages: exp.messages, max_tokens: exp.n, temperature: 0 };
  r = await client.chat.completions.create(chat);
  assert.strictEqual(r.object, 'chat.completion');
  assert.strictEqual(r.choices[0].message.role, 'assistant');
  assert.strictEqual(r.choices[0].message.content, exp.chat, 'chat reply');
  s = await collect(await client.chat.completions.create({ ...chat, stream: true }),
                    (c) => ({ text: c.delta && c.delta.content, role: c.delta && c.delta.role }));
  assert.strictEqual(s.text, exp.chat, 'streamed chat reply');
  assert.strictEqual(s.role, 'assistant');
  assert.strictEqual(s.finish, 'length');

  // A predicted output (drafts to verify where the reply follows it) changes nothing in the reply;
  // usage says how many of its tokens were accepted and rejected.
  r = await client.chat.completions.create({ ...chat, prediction: { type: 'content', content: exp.chat } });
  assert.strictEqual(r.choices[0].message.content, exp.chat, 'the reply with a prediction');
  const details = r.usage.completion_tokens_details;
  assert.ok(details && Number.isInteger(details.accepted_prediction_tokens) && Number.isInteger(details.rejected_prediction_tokens),
            JSON.stringify(r.usage));

  // n = 2: two choices of the same prompt (the oracle: the same text twice), usage counting both.
  r = await client.completions.create({ ...base, n: 2 });
  assert.deepStrictEqual(r.choices.map((c) => [c.index, c.text, c.finish_reason]),
                         [[0, exp.completion, 'length'], [1, exp.completion, 'length']]);
  assert.deepStrictEqual([r.usage.prompt_tokens, r.usage.completion_tokens], [exp.prompt_tokens, 2 * exp.n]);
  r = await client.chat.completions.create({ ...chat, n: 2 });
  assert.deepStrictEqual(r.choices.map((c) => [c.index, c.message.content]), [[0, exp.chat], [1, exp.chat]]);
  const perChoice = ['', ''], finishes = [null, null];
  for await (const ch of await client.chat.completions.create({ ...chat, n: 2, stream: true })) {
    for (const c of ch.choices) {
      perChoice[c.index] += (c.delta && c.delta.content) || '';
      if (c.finish_reason) finishes[c.index] = c.finish_reason;
    }
  }
  assert.deepStrictEqual(perChoice, [exp.chat, exp.chat], 'streamed choices, each by its index');
  assert.deepStrictEqual(finishes, ['length', 'length']);
  await assert.rejects(client.completions.create({ ...base, n: 17 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
  // Any max_tokens the context can hold is served; past it, a 400 naming the field, as OpenAI does.
  await assert.rejects(client.completions.create({ ...base, max_tokens: 1000000 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens' && /context/.test(e.message));

  // Structured output: JSON that matches the schema (the oracle's pick among what the grammar
  // allows); a bounded schema ends with stop.
  const schema = { type: 'object', properties: { c: { enum: ['x', 'y'] } }, required: ['c'], additionalProperties: false };
  r = await client.chat.completions.create({ ...chat, max_tokens: 64,
    response_format: { type: 'json_schema', json_schema: { name: 'pick', schema, strict: true } } });
  assert.strictEqual(r.choices[0].finish_reason, 'stop', 'a bounded schema ends with stop');
  assert.ok(['x', 'y'].includes(JSON.parse(r.choices[0].message.content).c), r.choices[0].message.content);
  s = await collect(await client.chat.completions.create({ ...chat, max_tokens: 64, stream: true,
    response_format: { type: 'json_schema', json_schema: { name: 'pick', schema } } }), (c) => ({ text: c.delta && c.delta.content }));
  assert.strictEqual(s.text, r.choices[0].message.content, 'streamed the same JSON');
  // json_object: an object, however long its strings run (whole when it stopped).
  r = await client.chat.completions.create({ ...chat, max_tokens: 64, response_format: { type: 'json_object' } });
  const text = r.choices[0].message.content;
  if (r.choices[0].finish_reason === 'stop') assert.strictEqual(typeof JSON.parse(text), 'object', text);
  else assert.ok(text.trimStart().startsWith('{'), text);

  // logprobs: one entry per generated token, whose bytes make up the text; greedy picks the most
  // likely token, so it heads its own alternatives.
  const joined = (entries) => Buffer.concat(entries.map((e) => Buffer.from(e.bytes))).toString('utf8');
  r = await client.chat.completions.create({ ...chat, logprobs: true, top_logprobs: 2 });
  let lp = r.choices[0].logprobs.content;
  assert.strictEqual(lp.length, exp.n, 'an entry per token');
  assert.strictEqual(joined(lp), exp.chat, 'the entries spell the reply');
  for (const e of lp) {
    assert.ok(e.logprob <= 0 && e.top_logprobs.length === 2, JSON.stringify(e));
    assert.strictEqual(e.top_logprobs[0].token, e.token);
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
  }
  const streamed = [];
  for await (const c of await client.chat.completions.create({ ...chat, logprobs: true, stream: true })) {
    if (c.choices.length && c.choices[0].logprobs) streamed.push(...c.choices[0].logprobs.content);
  }
  assert.strictEqual(joined(streamed), exp.chat, 'streamed entries spell the reply');
  r = await client.completions.create({ ...base, logprobs: 1 });
  assert.strictEqual(r.choices[0].logprobs.token_logprobs.length, exp.n);
  assert.strictEqual(r.choices[0].logprobs.tokens.length, exp.n);

  // A field umad does not implement is a 400 naming it, never a silent ignore.
  await assert.rejects(client.chat.completions.create({ ...chat, web_search_options: {} }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'web_search_options');
  await assert.rejects(client.completions.create({ ...base, echo: true }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'echo');

  const models = await client.models.list();
  assert.strictEqual(models.data.length, 1);
  console.log('openai sdk: all checks passed');
}

main().catch((e) => { console.error(e); process.exit(1); });
