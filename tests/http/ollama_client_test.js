// Drives umad's Ollama API with the official `ollama` JavaScript library, as Ollama's clients do.
//   node ollama_client_test.js BASE_URL EXPECTATIONS.json MODEL [gateway]
// (gateway: uma-gw in front: chat, generate, embeddings and show run on its agents; its model
// listings are the cluster's, so their details are left out)
// The expectations come from the oracle model (tests/e2e/openai_sdk_run.cc computes them): a raw
// prompt's continuation, and the chatml prompt of a system and a user message.
'use strict';
const { Ollama } = require('ollama');
const fs = require('fs');
const assert = require('assert');

async function main() {
  const [base, expPath, model, mode] = process.argv.slice(2);
  const gateway = mode === 'gateway';
  const exp = JSON.parse(fs.readFileSync(expPath, 'utf8'));
  const ollama = new Ollama({ host: base });
  const options = { num_predict: exp.n, temperature: 0 };

  // Chat, whole and streamed: the model's template around the messages.
  let r = await ollama.chat({ model, messages: exp.messages, options });
  assert.strictEqual(r.message.role, 'assistant');
  assert.strictEqual(r.message.content, exp.chat, 'chat text');
  assert.strictEqual(r.done, true);
  assert.strictEqual(r.done_reason, 'length');
  assert.deepStrictEqual([r.prompt_eval_count, r.eval_count], [exp.chat_prompt_tokens, exp.n]);
  assert.ok(r.total_duration > 0 && r.eval_duration > 0, JSON.stringify(r));
  let text = '', parts = 0, last = null;
  for await (const part of await ollama.chat({ model, messages: exp.messages, options, stream: true })) {
    text += part.message.content;
    parts += 1;
    last = part;
  }
  assert.strictEqual(text, exp.chat, 'streamed chat text');
  assert.ok(parts > 2, 'several lines');
  assert.strictEqual(last.done, true);
  assert.strictEqual(last.eval_count, exp.n);

  // Generate: the template around system and prompt, or with raw the prompt as it is.
  r = await ollama.generate({ model, system: exp.messages[0].content, prompt: exp.messages[1].content, options });
  assert.strictEqual(r.response, exp.chat, 'generate text');
  assert.ok(Array.isArray(r.context));
  r = await ollama.generate({ model, prompt: exp.prompt, raw: true, options });
  assert.strictEqual(r.response, exp.completion, 'raw generate text');
  text = '';
  for await (const part of await ollama.generate({ model, prompt: exp.prompt, raw: true, options, stream: true })) text += part.response;
  assert.strictEqual(text, exp.completion, 'streamed raw generate text');
  // An empty prompt only asks for the model.
  r = await ollama.generate({ model, prompt: '' });
  assert.deepStrictEqual([r.done, r.done_reason], [true, 'load']);

  // format: a schema the reply must match.
  const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] };
  r = await ollama.chat({ model, messages: exp.messages, format: schema, options: { num_predict: 64, temperature: 0 } });
  assert.strictEqual(typeof JSON.parse(r.message.content).ok, 'boolean', r.message.content);

  // A pull of a model served here: done at once, streamed or not; one nobody has: not found.
  assert.deepStrictEqual(await ollama.pull({ model, stream: false }), { status: 'success' });
  const statuses = [];
  for await (const part of await ollama.pull({ model, stream: true })) statuses.push(part.status);
  assert.strictEqual(statuses[statuses.length - 1], 'success', statuses.join(', '));
  await assert.rejects(ollama.pull({ model: 'no-such-model' }), (err) => err.status_code === 404 && /no-such-model/.test(err.error));

  // Embeddings, one input and several; the older endpoint.
  const e = await ollama.embed({ model, input: ['hello world', 'goodbye'] });
  assert.strictEqual(e.embeddings.length, 2);
  assert.ok(e.embeddings[0].length > 0 && e.embeddings[0].length === e.embeddings[1].length);
  const old = await ollama.embeddings({ model, prompt: 'hello world' });
  assert.deepStrictEqual(old.embedding.map((x) => x.toFixed(5)), e.embeddings[0].map((x) => x.toFixed(5)));
  // What the server (through a gateway: the agent) tells about its model.
  const show = await ollama.show({ model });
  assert.ok(show.capabilities.includes('completion'), JSON.stringify(show.capabilities));
  assert.ok(show.model_info['general.embedding_length'] === e.embeddings[0].length, JSON.stringify(show.model_info));
  // Errors: Ollama's {"error": ...} with their status.
  await assert.rejects(ollama.show({ model: 'no-such-model' }), (err) => err.status_code === 404 && /no-such-model/.test(err.error));
  // A gateway routes by the name (a single model's umad embeds whatever the name, as with chat).
  if (gateway) await assert.rejects(ollama.embed({ model: 'no-such-model', input: 'x' }), (err) => err.status_code === 404);

  if (gateway) {
    // The agents' names (a file's, which `model` finds by its stem).
    const names = (await ollama.list()).models.map((m) => m.name);
    assert.ok(names.some((n) => n === model || n.startsWith(model + '.')), JSON.stringify(names));
    console.log('ollama client: all passed');
    return;
  }
  const list = await ollama.list();
  assert.deepStrictEqual(list.models.map((m) => m.name), [model]);
  const ps = await ollama.ps();
  assert.strictEqual(ps.models[0].name, model);
  assert.strictEqual(typeof (await ollama.version()).version, 'string');
  await assert.rejects(ollama.push({ model }), (err) => err.status_code === 501);
  await assert.rejects(ollama.chat({ model, messages: [{ role: 'user', content: 'hi', images: ['aGk='] }] }),
                       (err) => err.status_code === 501 && /images/.test(err.error));
  console.log('ollama client: all passed');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
