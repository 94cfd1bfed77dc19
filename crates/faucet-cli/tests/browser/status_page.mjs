// Drives Debian's chromium (headless, through playwright-core) against a running
// `faucet serve`, for crates/faucet-cli/tests/status_page.rs:
//
//   node status_page.mjs URL TOKEN KEY HOSTILE_KEY OUT_DIR
//
// Loads the status page, waits for the pipeline KEY with its state and owner, checks that
// the error of HOSTILE_KEY (which holds HTML) shows as text, clicks KEY's pause button,
// gives a wrong token (refused, asked again) and then TOKEN, and waits for PAUSED. Prints
// one JSON line of what it saw; on failure also saves OUT_DIR/status_page_failure.png and
// names it, and exits 1.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const [url, token, key, hostileKey, outDir] = process.argv.slice(2);
const CHROMIUM = '/usr/bin/chromium';
const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'faucet-status-chromium-'));
const seen = { dialogs: [], consoleErrors: [] };
let context;
let page;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(20000);
  page.on('console', (m) => { if (m.type() === 'error') seen.consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => seen.consoleErrors.push(String(e)));
  // A JavaScript dialog would mean a value ran as code (or the page used prompt()).
  page.on('dialog', (d) => { seen.dialogs.push(d.message()); d.dismiss(); });

  await page.goto(url);
  const row = page.locator(`tr[data-key="${key}"]`);
  const state = row.locator('[data-field="state"]');
  await state.filter({ hasText: /SCHEDULED|RUNNING/ }).waitFor();
  seen.stateBefore = (await state.textContent()).trim();
  seen.owner = (await row.locator('[data-field="owner"]').textContent()).trim();
  seen.progress = (await row.locator('[data-field="progress"]').textContent()).trim();
  seen.member = (await page.locator('#member').textContent()).trim();
  const member = page.locator('tr[data-member="m1"]');
  seen.draining = (await member.locator('[data-field="draining"]').textContent()).trim();

  const hostile = page.locator(`tr[data-key="${hostileKey}"] [data-field="error"]`);
  await hostile.filter({ hasText: '<img' }).waitFor();
  seen.hostileError = (await hostile.textContent()).trim();
  seen.imagesInTable = await page.locator('#pipelines img').count();
  seen.title = await page.title();

  // Pause: the page asks for the token; a wrong one is refused and asked for again.
  await row.locator('button[data-action="pause"]').click();
  await page.locator('#token-dialog').waitFor({ state: 'visible' });
  await page.fill('#token-input', 'not-the-token-0123456789');
  await page.click('#token-ok');
  await page.locator('#token-why').filter({ hasText: 'refused' }).waitFor();
  await page.locator('#token-dialog').waitFor({ state: 'visible' });
  await page.fill('#token-input', token);
  await page.click('#token-ok');
  await state.filter({ hasText: 'PAUSED' }).waitFor();
  seen.stateAfter = (await state.textContent()).trim();
  seen.tokenKept = await page.evaluate(() => sessionStorage.getItem('faucet.apiToken') !== null);
  seen.problem = (await page.locator('#problem').textContent()).trim();
  console.log(JSON.stringify({ ok: true, ...seen }));
} catch (e) {
  const screenshot = path.join(outDir, 'status_page_failure.png');
  fs.mkdirSync(outDir, { recursive: true });
  if (page) await page.screenshot({ path: screenshot, fullPage: true }).catch(() => {});
  const html = page ? await page.content().catch(() => '') : '';
  console.log(JSON.stringify({ ok: false, error: String(e), screenshot, html, ...seen }));
  process.exitCode = 1;
} finally {
  if (context) await context.close().catch(() => {});
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
