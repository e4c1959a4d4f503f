// Load: N concurrent streaming clients (64; env CLIENTS overrides) through the openai client,
// a third of them hanging up mid-stream. Every other one must get exactly its greedy reference
// text, and afterwards /metrics must show nothing running or waiting and an empty KV cache
// (aborted requests freed their blocks).
import OpenAI from 'openai';
import { parseArgs, makeModel, startServer, check, assert, assertEq, finish } from './harness.mjs';

const args = parseArgs();
const model = makeModel(args);
const N = Number(process.env.CLIENTS || 64);
const MAX_TOKENS = Number(process.env.MAX_TOKENS || 48);
const srv = await startServer(args.vtllm, model, ['--max-num-seqs', String(Math.max(64, N)), '--http-threads', String(Math.max(512, 2 * N)),
                                                  '--shutdown-timeout', '1']);
const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'x', maxRetries: 0, timeout: 600000 });
const prompts = ['Tell me a story', 'List three colors', 'What is 2 + 2?', 'Translate hello'];
const base = { model: 'tiny', max_tokens: MAX_TOKENS, temperature: 0, ignore_eos: true };

const reference = [];
for (const p of prompts) reference.push((await client.completions.create({ ...base, prompt: p })).choices[0].text);

// The value of the sample `name{...}` whose labels include `label` (e.g. 'finished_reason="abort"').
async function metric(name, label = '') {
  const text = await (await fetch(srv.base + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(name + '{') && l.includes(label));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : NaN;
}

await check(`${N} concurrent streams, a third hang up mid-stream`, async () => {
  const t0 = Date.now();
  let firstChunks = 0, allFirstAt = 0;
  const runs = [];
  for (let i = 0; i < N; ++i) {
    const hangUp = i % 3 === 0;
    const p = i % prompts.length;
    runs.push((async () => {
      const stream = await client.completions.create({ ...base, prompt: prompts[p], stream: true });
      let text = '', chunks = 0;
      for await (const c of stream) {
        if (chunks++ === 0 && ++firstChunks === N) allFirstAt = Date.now() - t0;
        text += c.choices[0] ? c.choices[0].text : '';
        if (hangUp && chunks === 4) {
          stream.controller.abort();
          return { hangUp, ok: true };
        }
      }
      return { hangUp, ok: text === reference[p], text, want: reference[p] };
    })().catch((e) => ({ hangUp: i % 3 === 0, ok: i % 3 === 0 && e.name === 'AbortError', error: String(e) })));
  }
  const results = await Promise.all(runs);
  const bad = results.filter((r) => !r.ok);
  assertEq(bad.length, 0, 'clients with a wrong text or an error: ' + JSON.stringify(bad.slice(0, 2)));
  console.log(`  ${N} streams done in ${Date.now() - t0} ms; all ${N} had their first chunk after ${allFirstAt} ms`);
});

await check('afterwards: 0 running, 0 waiting, KV usage 0, aborts counted', async () => {
  let running, waiting, kv;
  for (let t = 0; t < 50; ++t) {
    [running, waiting, kv] = [await metric('vllm:num_requests_running'), await metric('vllm:num_requests_waiting'), await metric('vllm:kv_cache_usage_perc')];
    if (running === 0 && waiting === 0 && kv === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assertEq([running, waiting, kv], [0, 0, 0], 'running, waiting, kv usage');
  const aborted = await metric('vllm:request_success_total', 'finished_reason="abort"');
  assert(aborted >= 1, `aborted requests counted: ${aborted}`);
});

await check('a non-streaming client that hangs up: its request is aborted, not run to the end', async () => {
  const [abort0, length0] = [await metric('vllm:request_success_total', 'finished_reason="abort"'),
                             await metric('vllm:request_success_total', 'finished_reason="length"')];
  const ctl = new AbortController();
  // 900 tokens take seconds here; the client gives up once the request is running.
  const pending = fetch(srv.base + '/v1/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: ctl.signal,
    body: JSON.stringify({ ...base, prompt: prompts[0], max_tokens: 900 }),
  }).catch((e) => e);
  for (let t = 0; t < 100 && (await metric('vllm:num_requests_running')) !== 1; ++t) await new Promise((r) => setTimeout(r, 20));
  ctl.abort();
  assertEq((await pending).name, 'AbortError');
  let running = NaN;
  for (let t = 0; t < 100 && running !== 0; ++t) {
    running = await metric('vllm:num_requests_running');
    if (running !== 0) await new Promise((r) => setTimeout(r, 50));
  }
  assertEq(running, 0, 'running after the hang-up');
  const [abort1, length1] = [await metric('vllm:request_success_total', 'finished_reason="abort"'),
                             await metric('vllm:request_success_total', 'finished_reason="length"')];
  assertEq([abort1 - abort0, length1 - length0], [1, 0], 'aborted / ran to max_tokens');
});

await check('the server still answers', async () => {
  const r = await client.completions.create({ ...base, prompt: prompts[0] });
  assertEq(r.choices[0].text, reference[0]);
});

await check('SIGTERM with streams running: they end (abort) with [DONE], exit 0', async () => {
  const long = [];
  for (let i = 0; i < 4; ++i) {
    long.push((async () => {
      const stream = await client.completions.create({ ...base, prompt: prompts[i], max_tokens: 900, stream: true });
      let finish = null, chunks = 0;
      for await (const c of stream) {
        ++chunks;
        if (c.choices[0] && c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
      }
      return { finish, chunks };
    })());
  }
  await new Promise((r) => setTimeout(r, 500));
  const code = await srv.stop();
  const ends = await Promise.all(long);
  assertEq(code, 0, 'exit code');
  for (const e of ends) assert(e.finish === 'abort' || e.finish === 'length', JSON.stringify(e));
});
finish();
