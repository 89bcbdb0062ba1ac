// Images through the official clients, as their users send them, to umad with a vision projector:
// the OpenAI SDK (image_url parts with data URLs), the Anthropic SDK (image blocks with a base64
// source) and the `ollama` library (images as bytes, which it sends as base64).
//   node vision_clients_test.js BASE_URL MODEL IMAGE_TOKENS
'use strict';
const OpenAI = require('openai');
const Anthropic = require('@anthropic-ai/sdk');
const { Ollama } = require('ollama');
const zlib = require('zlib');
const assert = require('assert');

// A PNG of w x h pixels, each from pixel(x, y) -> [r, g, b].
function png(w, h, pixel) {
  const rows = Buffer.alloc((3 * w + 1) * h);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) rows.set(pixel(x, y), y * (3 * w + 1) + 1 + 3 * x);
  }
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (b) => { let c = 0xffffffff; for (const x of b) c = crcTable[(c ^ x) & 0xff] ^ (c >>> 8); return (c ^ 0xffffffff) >>> 0; };
  const chunk = (type, data) => {
    const body = Buffer.concat([Buffer.from(type), data]);
    const len = Buffer.alloc(4); len.writeUInt32BE(data.length);
    const sum = Buffer.alloc(4); sum.writeUInt32BE(crc(body));
    return Buffer.concat([len, body, sum]);
  };
  const ihdr = Buffer.alloc(13); ihdr.writeUInt32BE(w, 0); ihdr.writeUInt32BE(h, 4); ihdr.set([8, 2, 0, 0, 0], 8);
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr),
                        chunk('IDAT', zlib.deflateSync(rows)), chunk('IEND', Buffer.alloc(0))]);
}

async function main() {
  const [base, model, imageTokensArg] = process.argv.slice(2);
  const imageTokens = Number(imageTokensArg);
  const red = png(48, 32, () => [255, 0, 0]);
  const stripes = png(48, 32, (x) => (x % 8 < 4 ? [0, 0, 0] : [255, 255, 255]));
  const dataUrl = (b) => 'data:image/png;base64,' + b.toString('base64');

  const openai = new OpenAI({ baseURL: base + '/v1', apiKey: 'none' });
  const ask = (content) => openai.chat.completions.create({ model, messages: [{ role: 'user', content }], max_tokens: 4, temperature: 0 });
  const text = await ask('what is in the picture');
  const withImage = await ask([{ type: 'text', text: 'what is in the picture' }, { type: 'image_url', image_url: { url: dataUrl(red) } }]);
  assert.strictEqual(withImage.usage.prompt_tokens, text.usage.prompt_tokens + imageTokens, 'an image takes its embeddings\' places');
  const other = await ask([{ type: 'text', text: 'what is in the picture' }, { type: 'image_url', image_url: { url: dataUrl(stripes) } }]);
  assert.notStrictEqual(other.choices[0].message.content, withImage.choices[0].message.content, 'another image, another answer');
  let streamed = '';
  const stream = await openai.chat.completions.create({ model, stream: true, max_tokens: 4, temperature: 0,
    messages: [{ role: 'user', content: [{ type: 'text', text: 'what is in the picture' }, { type: 'image_url', image_url: { url: dataUrl(red) } }] }] });
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? '';
  assert.strictEqual(streamed, withImage.choices[0].message.content, 'streamed as whole');
  await assert.rejects(ask([{ type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }]),
                       (err) => err.status === 501, 'nothing is fetched');

  const anthropic = new Anthropic({ baseURL: base, apiKey: 'none' });
  const msg = await anthropic.messages.create({ model, max_tokens: 4, messages: [{ role: 'user', content: [
    { type: 'text', text: 'what is in the picture' },
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: red.toString('base64') } }] }] });
  assert.ok(msg.usage.input_tokens + (msg.usage.cache_read_input_tokens ?? 0) >= text.usage.prompt_tokens + imageTokens - 1, JSON.stringify(msg.usage));

  const ollama = new Ollama({ host: base });
  const chat = await ollama.chat({ model, messages: [{ role: 'user', content: 'what is in the picture', images: [red] }],
                                   options: { num_predict: 4, temperature: 0 } });
  assert.ok(chat.prompt_eval_count > imageTokens, JSON.stringify(chat));
  const gen = await ollama.generate({ model, prompt: 'what is in the picture', images: [stripes.toString('base64')],
                                      options: { num_predict: 4, temperature: 0 } });
  assert.ok(gen.prompt_eval_count > imageTokens, JSON.stringify(gen));
  const show = await ollama.show({ model });
  assert.ok(show.capabilities.includes('vision'), JSON.stringify(show.capabilities));
  console.log('vision clients: all passed');
}

main().catch((e) => { console.error(e); process.exit(1); });
