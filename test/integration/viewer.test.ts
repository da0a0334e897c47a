/**
 * `rollout view` in a real browser (Debian's chromium through puppeteer-core): jobs, job, comparison and trial
 * pages render from job folders written by hand; a known trial's reward and error appear; filters, matrix links
 * and pagination work; the SVG charts of every page draw the expected marks; a 10,000-trial job is paginated and its
 * charts stay bounded; the --bundle static site works from file:// and holds the charts. Screenshots
 * go to test-artifacts/viewer/.
 */
import assert from 'node:assert/strict';
import { mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Browser, Page } from 'puppeteer-core';
import puppeteer from 'puppeteer-core';

import type { ViewServer } from '../../src/viewer/server';
import { startViewServer } from '../../src/viewer/server';
import { runCli, workspace } from '../support/cli';
import type { FixtureTrial } from '../support/job-folder';
import { writeJobFolder } from '../support/job-folder';
import { REPO_ROOT } from '../support/temporal';

const SHOTS = path.join(REPO_ROOT, 'test-artifacts', 'viewer');
const CHROMIUM = process.env.ROLLOUT_CHROMIUM ?? '/usr/bin/chromium';

const ATIF = {
  schema_version: 'ATIF-v1.6',
  session_id: 's-1',
  agent: { name: 'solver', version: '1.2.0', model_name: 'scripted-model' },
  steps: [
    { step_id: 1, source: 'user', message: 'Create hello.txt' },
    {
      step_id: 2,
      source: 'agent',
      model_name: 'scripted-model',
      message: 'I will list the folder first.',
      tool_calls: [{ tool_call_id: 'call-1', function_name: 'bash', arguments: { command: 'ls -la /app' } }],
      observation: { results: [{ source_call_id: 'call-1', content: 'total 0\nREADME-from-observation' }] },
      metrics: { prompt_tokens: 812, completion_tokens: 40, cached_tokens: 512, cost_usd: 0.0021 },
    },
  ],
  final_metrics: { total_prompt_tokens: 812, total_completion_tokens: 40, total_cost_usd: 0.0021 },
};
const LLM_CALLS = [
  {
    timestamps: { started_at: '2026-01-05T10:00:03Z', finished_at: '2026-01-05T10:00:04Z' },
    dialect: 'openai-chat',
    model: 'scripted-model',
    request: { messages: [{ role: 'user', content: 'Create hello.txt' }] },
    response: { choices: [{ message: { content: 'done-from-llm-call' } }] },
    status: 200,
    latency_ms: 930,
    usage: { input_tokens: 812, output_tokens: 40, cached_tokens: 512 },
  },
];

const timing = (from: number, to: number) => ({
  started_at: new Date(Date.UTC(2026, 0, 5, 10, 0, from)).toISOString(),
  finished_at: new Date(Date.UTC(2026, 0, 5, 10, 0, to)).toISOString(),
});
const MULTI_STEP_RESULTS = [
  { name: 'one', rewards: { reward: 1 }, error: null, agent_exit_code: 0, execute: timing(1, 2), verify: timing(2, 3) },
  {
    name: 'two',
    rewards: { reward: 0.25 },
    error: null,
    agent_exit_code: 0,
    execute: timing(3, 4),
    verify: timing(4, 5),
    below_min_reward: 'reward = 0.25 is below min_reward 0.5',
  },
];

function demoTrials(): FixtureTrial[] {
  const trials: FixtureTrial[] = [];
  for (const task of ['alpha', 'beta', 'gamma', 'delta'])
    for (let attempt = 1; attempt <= 3; attempt++) {
      trials.push({
        task,
        agent: 'solver',
        attempt,
        rewards: { reward: task === 'delta' && attempt < 3 ? 0 : 1 },
        extra: {
          // A multi-step task's trial (task.toml [[steps]]).
          ...(task === 'alpha' && attempt === 2 ? { step_results: MULTI_STEP_RESULTS } : {}),
          usage: {
            n_llm_calls: 1,
            input_tokens: 812,
            output_tokens: 40,
            cached_tokens: 512,
            cost_usd: 0.0021,
            // The first attempt at each task met a 429 the gateway waited out.
            n_retried_calls: attempt === 1 ? 1 : 0,
            waited_ms: attempt === 1 ? 5_000 : 0,
          },
          agent: { name: 'solver', version: '1.2.0', model: 'scripted-model' },
        },
        files: {
          'agent/execute.txt': `solving ${task}\n`,
          'verifier/test-stdout.txt': 'PASS\n',
          'trial.log': '[verify] rewards\n',
          ...(task === 'alpha' && attempt === 2
            ? {
                'steps/one/verifier/test-stdout.txt': 'step one PASS\n',
                'steps/two/verifier/test-stdout.txt': 'FAIL\n',
              }
            : {}),
          ...(task === 'alpha' && attempt === 1
            ? {
                'agent/trajectory.json': JSON.stringify(ATIF),
                'agent/llm-calls.jsonl': LLM_CALLS.map((c) => JSON.stringify(c)).join('\n') + '\n',
                'agent/big.txt': 'x'.repeat(200 * 1024),
              }
            : {}),
        },
      });
      trials.push(
        task === 'beta' && attempt === 2
          ? {
              task,
              agent: 'guesser',
              attempt,
              rewards: null,
              error: { type: 'AgentTimeoutError', message: 'agent exceeded 60 s', step: 'execute' },
            }
          : { task, agent: 'guesser', attempt, rewards: { reward: task === 'alpha' ? 1 : 0 } }
      );
    }
  trials.push({
    task: 'epsilon',
    agent: 'guesser',
    attempt: 1,
    rewards: null,
    error: { type: 'InfrastructureError', message: 'docker went away', step: 'start' },
  });
  return trials;
}

let root: string;
let server: ViewServer;
let browser: Browser;
let page: Page;

/** A viewer over `dir` and a browser page. */
async function open(dir: string): Promise<void> {
  server = await startViewServer(dir);
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 1000 });
}

async function close(): Promise<void> {
  await browser?.close();
  await server?.close();
}

async function visit(url: string, shot?: string): Promise<void> {
  const response = await page.goto(url, { waitUntil: 'load' });
  assert.equal(response?.status(), 200, url);
  if (shot) await page.screenshot({ path: path.join(SHOTS, `${shot}.png`), fullPage: true });
}

const texts = (selector: string) =>
  page.$$eval(selector, (elements) =>
    // innerText: the text as rendered, with cells and blocks apart (textContent runs them together).
    elements.map((e) => (e as unknown as { innerText: string }).innerText.replace(/\s+/g, ' ').trim())
  );

/** Text of SVG elements (which have no innerText). */
const svgTexts = (selector: string) => page.$$eval(selector, (elements) => elements.map((e) => e.textContent ?? ''));
const count = (selector: string) => page.$$eval(selector, (elements) => elements.length);
const attribute = (selector: string, name: string) => page.$eval(selector, (e, n) => e.getAttribute(n), name);

/** The chart is drawn (a visible SVG of some size) and says what it is (title and description). */
async function assertChart(id: string): Promise<void> {
  const box = await page.$eval(`#${id} svg`, (svg) => {
    const rect = svg.getBoundingClientRect();
    return { width: rect.width, height: rect.height, role: svg.getAttribute('role') };
  });
  assert.ok(box.width > 100 && box.height > 50, `${id}: ${JSON.stringify(box)}`);
  assert.equal(box.role, 'img');
  assert.ok((await svgTexts(`#${id} svg > title`))[0], `${id} has a title`);
  assert.ok((await svgTexts(`#${id} svg > desc`))[0], `${id} has a description`);
}

describe('rollout view in a browser', () => {
  before(async () => {
    await mkdir(SHOTS, { recursive: true });
    root = await workspace();
    await writeJobFolder(root, { name: 'demo', trials: demoTrials(), metrics: ['mean', 'max'] });
    const spent = { cost_usd: 0.0213, tokens: 9100, llm_calls: 8, unpriced_tokens: 0, unpriced_models: [] };
    await writeJobFolder(root, {
      name: 'baseline',
      trials: ['alpha', 'beta', 'gamma', 'delta'].map((task) => ({
        task,
        agent: 'solver',
        attempt: 1,
        rewards: { reward: task === 'gamma' ? 0 : 1 },
      })),
      status: 'budget_exhausted',
      budget: {
        limits: { cost_usd: 0.02 },
        spent,
        spent_by_agent: { solver: spent },
        exhausted: 'cost_usd 0.0213 of 0.02',
      },
    });
    await writeJobFolder(root, {
      name: 'steered',
      trials: [
        { task: 'alpha', agent: 'pilot', attempt: 1, rewards: { reward: 1 } },
        { task: 'beta', agent: 'pilot', attempt: 1, rewards: null, unfinished: true },
      ],
      control: { paused: true, concurrency: 2 },
    });
    await open(root);
  });
  after(close);

  it('shows live control of a running job: paused, and the concurrency in force', async () => {
    await visit(`${server.url}jobs/steered`);
    assert.match(
      (await texts('#control'))[0] ?? '',
      /paused \(no trial starts; rollout ctl … resume\) · concurrency 2/
    );
    await visit(`${server.url}jobs/demo`);
    assert.equal(await count('#control'), 0, 'a finished job shows no control');
  });

  it('lists jobs with status, progress, counts and errors by type', async () => {
    await visit(server.url, 'jobs');
    const rows = await texts('#jobs tbody tr');
    const demo = rows.find((row) => row.startsWith('demo '));
    assert.ok(demo, rows.join('\n'));
    assert.match(demo, /completed 25\/25 23 1 1 0 AgentTimeoutError ×1 InfrastructureError ×1/);
    assert.match(demo, /guesser|solver/);
    // Mean reward per job and agent: solver in both jobs, guesser in demo.
    await assertChart('chart-history');
    assert.equal(await count('#chart-history g.point[data-agent=solver]'), 2);
    assert.equal(await count('#chart-history g.point[data-agent=guesser]'), 1);
    assert.match(
      (await svgTexts('#chart-history g.point[data-job=baseline] title'))[0] ?? '',
      /baseline · solver: mean 0\.750/
    );
  });

  it("shows a job's spend against its budget, per agent, and that it ran out", async () => {
    await visit(`${server.url}jobs/baseline`);
    const budget = (await texts('#budget p'))[0] ?? '';
    assert.match(budget, /spent \$0\.0213 of 0\.0200 \(106\.5%\) · 9100 tokens · 8 calls/);
    assert.match(budget, /Budget spent \(cost_usd 0\.0213 of 0\.02\): no new trial starts/);
    assert.deepEqual(await texts('#budget tbody tr'), ['solver 0.0213 9100 8 0']);
    assert.match((await texts('h1 .status'))[0] ?? '', /budget_exhausted/);
  });

  it('shows a job: n, mean, interval and pass@k per key, errors apart, usage, and the task × agent matrix', async () => {
    await visit(`${server.url}jobs/demo`, 'job');
    const header = (await texts('#metrics thead th')).join(' ');
    assert.match(header, /n trials errors mean 95% CI max pass@1 pass@2 pass@3/);
    const metrics = await texts('#metrics tbody tr');
    assert.ok(
      metrics.some((row) => /^solver tasks reward 12 12 0 0\.833 \[0\.321, 0\.981\]/.test(row)),
      metrics.join('\n')
    );
    // guesser: 12 scored (the infrastructure error is not), pass@3 over 4 tasks.
    assert.ok(
      metrics.some((row) => /^guesser tasks reward 12 13 2 0\.250 /.test(row)),
      metrics.join('\n')
    );
    assert.match((await texts('#errors .errors.task'))[0] ?? '', /AgentTimeoutError ×1/);
    assert.match((await texts('#errors .errors.infrastructure'))[0] ?? '', /InfrastructureError ×1/);
    assert.match((await texts('#usage thead tr'))[0] ?? '', /LLM calls retried waited \(s\) input tokens/);
    assert.match((await texts('#usage tbody tr'))[0] ?? '', /solver scripted-model 12 12 4 20 9744 6144 480 0\.0252/);
    const matrix = await texts('#matrix tbody tr');
    assert.deepEqual(matrix[1], 'beta 0!1 3/3 1 3/3');
  });

  it('draws the job: rewards per agent, pass@k against k, progress over time, tokens and cost', async () => {
    for (const id of ['chart-rewards', 'chart-pass-at-k', 'chart-progress', 'chart-tokens', 'chart-cost'])
      await assertChart(id);
    // 0/1 rewards: two bins per agent; solver scored 10 of its 12 trials 1.
    assert.equal(await count('#chart-rewards rect.bar'), 4);
    assert.equal(await attribute('#chart-rewards rect[data-agent=solver][data-bin="1"]', 'data-count'), '10');
    assert.equal(await attribute('#chart-rewards rect[data-agent=guesser][data-bin="0"]', 'data-count'), '9');
    assert.equal(await count('#chart-pass-at-k circle.point'), 6, 'k = 1, 2, 3 for two agents');
    assert.match((await svgTexts('#chart-pass-at-k circle.point title')).join('|'), /solver: pass@3 = 1\|/);
    assert.equal(await attribute('#chart-progress path[data-series=finished]', 'data-final'), '25');
    assert.equal(await attribute('#chart-progress path[data-series=errors]', 'data-final'), '2');
    assert.equal(await attribute('#chart-tokens rect[data-kind=input]', 'data-value'), '9744');
    assert.equal(await count('#chart-cost rect.bar'), 1, 'only solver used the gateway');
  });

  it('filters trials by error type, agent and reward, and links matrix cells to their trials', async () => {
    await page.select('#filters select[name=error]', 'AgentTimeoutError');
    await Promise.all([page.waitForNavigation(), page.click('#filters button[type=submit]')]);
    assert.match(page.url(), /error=AgentTimeoutError/);
    assert.deepEqual(await texts('#trial-table tbody tr td:first-child'), ['beta__guesser__2']);
    await page.screenshot({ path: path.join(SHOTS, 'job-filtered.png'), fullPage: true });

    await visit(`${server.url}jobs/demo?agent=solver&min=1`);
    assert.equal((await texts('#trial-table tbody tr')).length, 10);
    await visit(`${server.url}jobs/demo?q=gamma__g`);
    assert.deepEqual(await texts('#trial-table tbody tr td:first-child'), [
      'gamma__guesser__1',
      'gamma__guesser__2',
      'gamma__guesser__3',
    ]);

    await visit(`${server.url}jobs/demo`);
    await Promise.all([page.waitForNavigation(), page.click('#matrix tbody tr:nth-child(3) td:nth-child(3) a')]);
    assert.match(page.url(), /task=delta&agent=solver/);
    assert.deepEqual(await texts('#trial-table tbody tr td:first-child'), [
      'delta__solver__1',
      'delta__solver__2',
      'delta__solver__3',
    ]);
  });

  it('sorts tables with tablesort', async () => {
    await visit(`${server.url}jobs/demo`);
    await page.click('#trial-table thead th:nth-child(6)'); // reward
    await page.click('#trial-table thead th:nth-child(6)');
    const rewards = await texts('#trial-table tbody tr td:nth-child(6)');
    const numbers = rewards.map((r) => (r === '–' ? -1 : Number(r)));
    assert.deepEqual(
      numbers,
      [...numbers].sort((a, b) => b - a),
      rewards.join()
    );
  });

  it('compares two agents task by task, the tasks where they differ first, with a paired interval', async () => {
    await visit(`${server.url}compare/demo/guesser/demo/solver`, 'compare');
    const rows = await texts('#compare-table tbody tr');
    assert.deepEqual(
      rows.map((row) => row.split(' ')[0]),
      // Differences first (largest first), then tasks only one side ran, then ties.
      ['beta', 'gamma', 'delta', 'epsilon', 'alpha']
    );
    assert.match(rows[0]!, /^beta 0 1 \+1$/);
    assert.match(
      (await texts('#compare-summary'))[0] ?? '',
      /4 tasks both ran · B better on 3, A better on 0, equal on 1.*no interval: fewer than 10 tasks both ran/
    );
    await assertChart('chart-differences');
    assert.deepEqual(
      await page.$$eval('#chart-differences rect.bar', (bars) => bars.map((bar) => bar.getAttribute('data-diff'))),
      ['1', '1', '0.333', '0'],
      'one bar per task both ran, sorted'
    );
    assert.equal(await count('#chart-differences rect.ci'), 0, 'no interval band with four tasks');
    // Across jobs, through the form's redirect.
    await visit(
      `${server.url}compare?a=${encodeURIComponent('baseline/solver')}&b=${encodeURIComponent('demo/solver')}`
    );
    assert.match(page.url(), /\/compare\/baseline\/solver\/demo\/solver$/);
    assert.match((await texts('#compare-table tbody tr'))[0] ?? '', /^gamma 0 1 \+1$/);
  });

  it('shows a trial: reward, error and step, timeline, instruction-less facts, logs in part with downloads', async () => {
    await visit(`${server.url}jobs/demo/trials/beta__guesser__2`, 'trial-errored');
    assert.equal((await texts('#rewards'))[0], 'none');
    assert.match((await texts('#error'))[0] ?? '', /^AgentTimeoutError in execute agent exceeded 60 s$/);
    assert.equal((await texts('#timeline tbody tr')).length, 8);
    const link = await page.$eval('#temporal-link', (a) => a.getAttribute('href'));
    assert.match(link ?? '', /\/namespaces\/default\/workflows\/demo%2Fbeta__guesser__2$/);

    await visit(`${server.url}jobs/demo/trials/alpha__solver__1`, 'trial');
    assert.equal((await texts('#rewards'))[0], 'reward 1');
    // The lifecycle and the model call on one time axis, and the call's tokens.
    await assertChart('chart-timeline');
    await assertChart('chart-call-tokens');
    assert.equal(await count('#chart-timeline rect.step'), 8);
    assert.match(
      (await svgTexts('#chart-timeline rect.call title'))[0] ?? '',
      /call 1 \(scripted-model\): 930 ms, 812 in, 40 out/
    );
    assert.equal(await count('#chart-call-tokens rect.tokens'), 2, 'input and output of one call');
    assert.match(
      (await texts('#usage'))[0] ?? '',
      /1 LLM calls · 812 input tokens \(512 cached\) · 40 output tokens · \$0\.0021 · 1 retried · waited 5 s at the gateway/
    );
    const body = (await texts('main'))[0] ?? '';
    assert.match(body, /solver 1\.2\.0 scripted-model/);
    assert.match(body, /showing the first 64\.0 KiB of 200\.0 KiB/);
    const download = await page.$eval('a[href$="/files/agent/big.txt"]', (a) => a.getAttribute('href'));
    const file = await fetch(new URL(download!, server.url));
    assert.equal((await file.text()).length, 200 * 1024);
  });

  it('shows the trajectory: messages, tool calls with their outputs, tokens per call', async () => {
    const trajectory = (await texts('#trajectory'))[0] ?? '';
    assert.match(trajectory, /Create hello\.txt/);
    assert.match(trajectory, /bash\(\{ "command": "ls -la \/app" \}\)/);
    assert.match(trajectory, /README-from-observation/);
    assert.match(trajectory, /812 in \(512 cached\) · 40 out · \$0\.0021/);
    assert.match(
      (await texts('#llm-calls tbody tr'))[0] ?? '',
      /^1 2026-01-05T10:00:03Z openai-chat scripted-model 200 930 812 512 40/
    );
  });

  it("shows a multi-step task's steps: a timeline row for each step's execute and verify, and their rewards", async () => {
    await visit(`${server.url}jobs/demo/trials/alpha__solver__2`, 'trial-multi-step');
    const rows = await texts('#timeline tbody tr th');
    assert.deepEqual(
      rows.filter((row) => /^(execute|verify)/.test(row)),
      ['execute · one', 'execute · two', 'verify · one', 'verify · two']
    );
    assert.deepEqual(await texts('#task-steps tbody tr'), [
      'one {"reward":1}',
      'two {"reward":0.25} stopped: reward = 0.25 is below min_reward 0.5',
    ]);
  });

  it('answers a missing page with 404', async () => {
    const response = await page.goto(`${server.url}jobs/nope`);
    assert.equal(response?.status(), 404);
    assert.match((await texts('main'))[0] ?? '', /no job "nope"/);
  });

  it('writes a static bundle whose pages and links work from file://', async () => {
    const out = path.join(root, 'bundle');
    const run = await runCli(['view', root, '--bundle', out], { cwd: root });
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /bundle: \d+ pages in /);
    await visit(`file://${out}/index.html`);
    await Promise.all([page.waitForNavigation(), page.click('#jobs a[href*="demo"]')]);
    assert.match(page.url(), /jobs\/demo\/index\.html$/);
    assert.equal((await texts('#trial-table tbody tr')).length, 25, 'a bundle lists every trial');
    await Promise.all([page.waitForNavigation(), page.click('#compare a')]);
    assert.match((await texts('#compare-table tbody tr'))[0] ?? '', /^beta 0 1 \+1$/);
    await assertChart('chart-differences');
    for (const [file, ids] of [
      ['index.html', ['chart-history']],
      ['jobs/demo/index.html', ['chart-rewards', 'chart-pass-at-k', 'chart-progress', 'chart-tokens', 'chart-cost']],
      ['jobs/demo/trials/alpha__solver__1/index.html', ['chart-timeline', 'chart-call-tokens']],
    ] as const) {
      const html = await readFile(path.join(out, file), 'utf8');
      for (const id of ids) assert.match(html, new RegExp(`<figure class="chart" id="${id}"><svg`), `${file}: ${id}`);
    }
    await visit(`file://${out}/jobs/demo/trials/beta__guesser__2/index.html`, 'bundle-trial');
    assert.match((await texts('#error'))[0] ?? '', /^AgentTimeoutError in execute/);
    const log = await readFile(
      // Raw files end in .txt in a bundle (a hosted bundle serves no agent-written file as a page).
      path.join(out, 'jobs', 'demo', 'trials', 'alpha__solver__1', 'files', 'agent', 'execute.txt.txt'),
      'utf8'
    );
    assert.equal(log, 'solving alpha\n');
  });
});

describe('rollout view on a job of 10,000 trials', () => {
  let bigRoot: string;
  before(async () => {
    bigRoot = await workspace();
    const trials: FixtureTrial[] = [];
    for (let task = 0; task < 2500; task++)
      for (const agent of ['a', 'b'])
        for (let attempt = 1; attempt <= 2; attempt++)
          trials.push({
            task: `task-${String(task).padStart(4, '0')}`,
            agent,
            attempt,
            rewards: { reward: (task + attempt) % 3 === 0 ? 1 : 0 },
          });
    await writeJobFolder(bigRoot, { name: 'big', trials });
    await open(bigRoot);
  });
  after(close);

  it('sends one page of trials and of the matrix, and pages through the rest', async () => {
    const started = Date.now();
    const response = await fetch(`${server.url}jobs/big`);
    const html = await response.text();
    console.error(`  job page of 10,000 trials: ${Date.now() - started} ms cold, ${html.length} bytes`);
    const warm = Date.now();
    await (await fetch(`${server.url}jobs/big`)).text();
    console.error(`  warm: ${Date.now() - warm} ms`);
    assert.ok(html.length < 600_000, `page stays small: ${html.length} bytes`);
    await visit(`${server.url}jobs/big?page=37`, 'job-10k');
    assert.equal((await texts('#trial-table tbody tr')).length, 100);
    assert.match((await texts('#trial-count'))[0] ?? '', /^10000 of 10000 trials · page 37 of 100$/);
    assert.equal((await texts('#trial-table tbody tr td:first-child'))[0], 'task-0900__a__1');
    assert.equal((await texts('#matrix tbody tr')).length, 200);
    await Promise.all([page.waitForNavigation(), page.click('#trial-pager a:last-child')]);
    assert.match(page.url(), /page=38/);
    assert.match((await texts('#metrics tbody tr'))[0] ?? '', /^a tasks reward 5000 5000 0 0\.333 /);
  });

  it('draws bounded pictures of 10,000 trials: binned, sampled, and 2,500 tasks in 300 columns', async () => {
    await visit(`${server.url}jobs/big`);
    for (const id of ['chart-rewards', 'chart-pass-at-k', 'chart-progress']) await assertChart(id);
    const marks = await count('#job-charts svg *');
    assert.ok(marks < 400, `${marks} SVG elements for 10,000 trials`);
    assert.equal(await attribute('#chart-progress path[data-series=finished]', 'data-final'), '10000');
    await visit(`${server.url}compare/big/a/big/b`, 'compare-10k');
    await assertChart('chart-differences');
    assert.equal(await count('#chart-differences rect.bar'), 300);
    assert.equal(await count('#chart-differences rect.ci'), 1, '2,500 tasks: an interval');
    assert.match((await texts('#compare-summary'))[0] ?? '', /2500 tasks both ran.*95% CI/);
  });
});
