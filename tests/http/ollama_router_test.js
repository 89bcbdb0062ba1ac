// The official `ollama` library against umad with several models (its model router): the listings
// from the router's table, a generate that loads its model, keep_alive 0 that unloads it (Ollama's
// "unload" answer), an empty generate that loads it again ("load"), and a pull (the files are here:
// done at once, nothing loaded).
//   node ollama_router_test.js BASE_URL MODEL OTHER_MODEL
'use strict';
const { Ollama } = require('ollama');
const assert = require('assert');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, pred) {
  for (let i = 0; i < 1200; ++i) {
    if (await pred()) return;
    await sleep(50);
  }
  throw new Error('never: ' + what);
}

async function main() {
  const [base, model, other] = process.argv.slice(2);
  const ollama = new Ollama({ host: base });
  const names = (r) => r.models.map((m) => m.name).sort();
  assert.deepStrictEqual(names(await ollama.list()), [model, other].sort(), 'tags: every model');
  assert.deepStrictEqual(names(await ollama.ps()), [], 'ps: none loaded yet');
  assert.match((await ollama.version()).version, /^\d+\.\d+/);
  // A pull of a model whose file is here: done, streamed or not, and it loads nothing.
  assert.deepStrictEqual(await ollama.pull({ model, stream: false }), { status: 'success' });
  const statuses = [];
  for await (const part of await ollama.pull({ model: other, stream: true })) statuses.push(part.status);
  assert.strictEqual(statuses[statuses.length - 1], 'success', statuses.join(', '));
  assert.deepStrictEqual(names(await ollama.ps()), [], 'a pull loads nothing');
  await assert.rejects(ollama.pull({ model: 'no-such-model', stream: false }), /no-such-model/);

  let r = await ollama.generate({ model, prompt: 'hello world', options: { num_predict: 4, temperature: 0 } });
  assert.strictEqual(r.done, true);
  assert.strictEqual(r.eval_count, 4);
  let ps = await ollama.ps();
  assert.deepStrictEqual(names(ps), [model], 'ps: the model the generate loaded');
  assert.ok(Date.parse(ps.models[0].expires_at) > Date.now(), 'it expires later: ' + ps.models[0].expires_at);

  // keep_alive 0 and no prompt: Ollama's unload.
  r = await ollama.generate({ model, prompt: '', keep_alive: 0 });
  assert.strictEqual(r.done_reason, 'unload', JSON.stringify(r));
  assert.strictEqual(r.response, '');
  await until('the model unloaded', async () => names(await ollama.ps()).length === 0);
  // The chat form, on a model not loaded: answered, and nothing is loaded for it.
  r = await ollama.chat({ model: other, messages: [], keep_alive: 0 });
  assert.strictEqual(r.done_reason, 'unload', JSON.stringify(r));
  assert.deepStrictEqual(r.message, { role: 'assistant', content: '' });
  assert.deepStrictEqual(names(await ollama.ps()), [], 'an unload loads nothing');

  // An empty prompt otherwise loads the model (Ollama's "load").
  r = await ollama.generate({ model, prompt: '' });
  assert.strictEqual(r.done_reason, 'load', JSON.stringify(r));
  assert.deepStrictEqual(names(await ollama.ps()), [model]);
  // A request with keep_alive 0 runs, and its model goes once it is idle.
  r = await ollama.generate({ model: other, prompt: 'hello world', keep_alive: 0, options: { num_predict: 2 } });
  assert.strictEqual(r.eval_count, 2);
  await until('the other model gone after its request', async () => !names(await ollama.ps()).includes(other));
  console.log('ollama router: all passed');
}

main().catch((e) => {
  console.error(e && e.stack || e);
  process.exit(1);
});
