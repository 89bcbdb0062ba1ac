// The web page at / in headless Chromium (puppeteer-core): it loads, and when the server wants a
// key says so, shows a prompt refused without it, takes it, sends it on every call and keeps it;
// it streams a chat reply (the oracle's exact text), stops a stream, and its status view shows the
// requests. Usage: node webui_test.js BASE_URL EXPECTATIONS CHROMIUM SCREENSHOT_DIR KEY [SERVERS]
// KEY: "" when the server wants none. SERVERS: the umads whose metrics count a stopped request
// (comma-separated base URLs; by default BASE_URL itself; a gateway's agents behind it).
const puppeteer = require("puppeteer-core");
const fs = require("fs");

const [base, expPath, chromium, shots, key, servers] = process.argv.slice(2);
const exp = JSON.parse(fs.readFileSync(expPath, "utf8"));
const failures = [];
const check = (ok, what) => { if (!ok) failures.push(what); console.log((ok ? "ok   " : "FAIL ") + what); };

async function metric(name) {
  let sum = 0;
  for (const s of (servers || base).split(",")) {
    const r = await fetch(s + "/metrics", { headers: key ? { Authorization: "Bearer " + key } : {} });
    const m = new RegExp("^" + name + " (\\S+)$", "m").exec(await r.text());
    sum += m ? Number(m[1]) : 0;
  }
  return sum;
}

// With a key on the server: the page loads and says a key is wanted; a prompt without it is refused
// (401) and said; a wrong key is said to be refused; the right one is then entered, and the calls
// from there on are recorded in `auth`.
async function keyFlow(page, auth) {
  await page.waitForSelector("#keybox:not(.hidden)");
  const msg = await page.$eval("#key-msg", (e) => e.textContent);
  check(/401/.test(msg) && /API key/.test(msg), "the page says the server wants its key: " + JSON.stringify(msg));
  await page.type("#prompt", "hello");
  await page.click("#send");
  await page.waitForFunction(() => document.querySelector(".msg.assistant .err") && !document.querySelector("#send").disabled);
  const refused = await page.$eval(".msg.assistant .err", (e) => e.textContent);
  check(/401/.test(refused) && /API key/.test(refused), "a prompt without the key is refused and the page says so: " +
        JSON.stringify(refused));
  await page.type("#key", "not-the-key");
  await page.click("#key-save");
  await page.waitForFunction(() => /refused this API key/.test(document.querySelector("#key-msg").textContent) &&
                                   !document.querySelector("#keybox").classList.contains("hidden"));
  check(true, "a wrong key: the page says it was refused");
  page.on("request", (r) => {
    const u = new URL(r.url());
    if (u.pathname !== "/") auth.push([u.pathname, r.headers()["authorization"]]);
  });
  await page.$eval("#key", (e) => { e.value = ""; });
  await page.type("#key", key);
  await page.click("#key-save");
  await page.waitForSelector("#keybox.hidden");
  await page.click("#clear");
}

async function main() {
  const browser = await puppeteer.launch({ executablePath: chromium, headless: true,
                                           args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1100, height: 800 });
    page.setDefaultTimeout(60000);
    const res = await page.goto(base + "/", { waitUntil: "load" });
    check(res.status() === 200, "GET / is the page (" + res.status() + ")");
    check((await page.title()) === "UMA Serve", "its title");
    const auth = [];  // [path, Authorization] of every call the page makes once it has the key
    if (key) await keyFlow(page, auth);
    await page.waitForFunction(() => document.querySelectorAll("#model option").length > 0);
    check(true, "the model picker lists the model");

    // A chat turn, greedy: the oracle's exact continuation of the chatml-rendered prompt.
    await page.type("#system", exp.messages[0].content);
    await page.$eval("#temperature", (e) => { e.value = "0"; });
    await page.$eval("#max_tokens", (e, n) => { e.value = String(n); }, exp.n);
    await page.type("#prompt", exp.messages[1].content);
    await page.click("#send");
    await page.waitForFunction(() => document.querySelector(".msg.assistant") && !document.querySelector("#send").disabled);
    const reply = await page.$eval(".msg.assistant .content", (e) => e.textContent);
    check(reply === exp.chat, "the streamed reply is the oracle's text: " + JSON.stringify(reply));
    check(/tok\/s/.test(await page.$eval("#chat-stats", (e) => e.textContent)), "the reply's speed is shown");
    await page.screenshot({ path: shots + "/webui-chat.png" });

    // Stop: a long reply cut short; the server sees its client go.
    const cancelled = await metric("uma_requests_cancelled_total");
    await page.click("#clear");
    await page.$eval("#max_tokens", (e) => { e.value = "900"; });
    await page.type("#prompt", "count on");
    await page.click("#send");
    await page.waitForFunction(() => (document.querySelector(".msg.assistant .content") || {}).textContent);
    await page.click("#stop");
    await page.waitForFunction(() => !document.querySelector("#send").disabled);
    const cut = await page.$eval(".msg.assistant .content", (e) => e.textContent.length);
    let seen = false;
    for (let i = 0; i < 600 && !seen; ++i) {
      seen = (await metric("uma_requests_cancelled_total")) > cancelled;
      if (!seen) await new Promise((r) => setTimeout(r, 50));
    }
    check(seen, "Stop ends the request on the server (its reply cut at " + cut + " characters)");

    // The status view: the requests, the models, the first-token histogram.
    await page.click("#tab-status");
    await page.waitForFunction(() => /[1-9]\d* observed/.test(document.querySelector("#ttft-count").textContent));
    const figures = await page.$eval("#status-figures", (e) => e.innerText);
    const requests = Number((/(\d+)\s*requests/.exec(figures) || [])[1] || 0);
    check(requests >= 2, "the status view counts the requests (" + requests + ")");
    const models = await page.$$eval("#status-models tbody tr", (rows) => rows.length);
    check(models >= 1, "the status view lists the model");
    check((await page.$$eval("#ttft-hist .bars div", (b) => b.length)) > 0, "the first-token histogram is drawn");
    await page.screenshot({ path: shots + "/webui-status.png", fullPage: true });
    if (key) {
      const bare = auth.filter(([, a]) => a !== "Bearer " + key);
      check(auth.length >= 3 && bare.length === 0, "every call carries the key as a Bearer token (" + auth.length + " calls; without: " +
            JSON.stringify(bare) + ")");
      await page.reload({ waitUntil: "load" });
      await page.waitForFunction(() => document.querySelectorAll("#model option").length > 0);
      check(await page.$eval("#keybox", (e) => e.classList.contains("hidden")), "the key is kept: a reload does not ask again");
    }
  } finally {
    await browser.close();
  }
}

main().then(() => {
  console.log(failures.length ? failures.length + " failed" : "webui: all passed");
  process.exit(failures.length ? 1 : 0);
}, (e) => {
  console.log("webui: " + (e && e.stack || e));
  process.exit(1);
});
