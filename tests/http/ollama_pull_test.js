// The official `ollama` library's pull through uma-gw: a catalog model that no loader holds comes
// from the model store's remote tier to a loader's local tier, its progress streamed as Ollama's;
// pulled again it is done at once; a model outside the catalog is not found.
//   node ollama_pull_test.js GATEWAY_URL MODEL BYTES
'use strict';
const { Ollama } = require('ollama');
const assert = require('assert');

async function main() {
  const [base, model, bytes] = process.argv.slice(2);
  const ollama = new Ollama({ host: base });
  const parts = [];
  for await (const part of await ollama.pull({ model, stream: true })) parts.push(part);
  const statuses = parts.map((p) => p.status);
  assert.strictEqual(statuses[0], 'pulling manifest', statuses.join(', '));
  assert.strictEqual(statuses[statuses.length - 1], 'success', statuses.join(', '));
  const progress = parts.filter((p) => p.total !== undefined);
  assert.ok(progress.length >= 1, 'progress lines: ' + JSON.stringify(parts));
  for (let i = 0; i < progress.length; ++i) {
    assert.strictEqual(progress[i].total, Number(bytes), JSON.stringify(progress[i]));
    assert.ok(progress[i].completed <= progress[i].total, JSON.stringify(progress[i]));
    if (i > 0) assert.ok(progress[i].completed >= progress[i - 1].completed, 'never backwards: ' + JSON.stringify(progress));
  }
  assert.strictEqual(progress[progress.length - 1].completed, Number(bytes), 'whole at the end');
  // Held by a loader now: done at once.
  assert.deepStrictEqual(await ollama.pull({ model, stream: false }), { status: 'success' });
  await assert.rejects(ollama.pull({ model: 'no-such-model', stream: false }),
                       (err) => err.status_code === 404 && /no-such-model/.test(err.error));
  console.log('ollama pull: all passed');
}

main().catch((e) => {
  console.error(e && e.stack || e);
  process.exit(1);
});
