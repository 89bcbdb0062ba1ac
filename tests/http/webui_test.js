// The web page at / in headless Chromium (puppeteer-core): it loads, asks for the key when the
// server wants one, streams a chat reply (the oracle's exact text), stops a stream, and its status
// view shows the requests. Usage: node webui_test.js BASE_URL EXPECTATIONS CHROMIUM SCREENSHOT_DIR KEY [SERVERS]
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
    if (key) {
      await page.waitForSelector("#keybox:not(.hidden)");
      check(true, "the page asks for the key");
      await page.type("#key", key);
      await page.click("#key-save");
    }
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
