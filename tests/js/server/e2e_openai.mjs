// End to end with the official `openai` npm client against `vtllm serve` on loopback: models,
// completions and chat (streaming and not), usage, greedy determinism, seeds, n > 1, several
// prompts, token-id prompts, logprobs in both shapes, echo, stop strings, the reasoning parser,
// tools, errors and 401, tokenize/detokenize, health, and a clean SIGTERM exit.
import { execFileSync } from 'node:child_process';
import OpenAI from 'openai';
import { parseArgs, makeModel, startServer, check, assert, assertEq, finish, postJson } from './harness.mjs';

const args = parseArgs();
const model = makeModel(args);
const srv = await startServer(args.vtllm, model, ['--reasoning-parser', 'qwen3', '--enable-auto-tool-choice', '--tool-call-parser', 'hermes']);
const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'unused', maxRetries: 0 });
const M = 'tiny';

async function greedy(prompt, max_tokens = 8, extra = {}) {
  return client.completions.create({ model: M, prompt, max_tokens, temperature: 0, ...extra });
}
async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

await check('models.list names the served model', async () => {
  const list = await client.models.list();
  assertEq(list.data.map((m) => m.id), [M]);
});

await check('completion: text, usage, finish_reason length, ids', async () => {
  const r = await greedy('Hello, my name is', 8);
  assert(r.id.startsWith('cmpl-'), r.id);
  assertEq(r.object, 'text_completion');
  assertEq(r.choices.length, 1);
  assertEq(r.choices[0].finish_reason, 'length');
  assert(typeof r.choices[0].text === 'string' && r.choices[0].text.length > 0);
  const tok = await postJson(srv.base, '/tokenize', { prompt: 'Hello, my name is' });
  assertEq(r.usage.prompt_tokens, tok.json.count, 'prompt_tokens');
  assertEq(r.usage.completion_tokens, 8);
  assertEq(r.usage.total_tokens, r.usage.prompt_tokens + 8);
  assert(r.usage.prompt_tokens_details && typeof r.usage.prompt_tokens_details.cached_tokens === 'number');
});

await check('greedy is deterministic and streaming gives the same text', async () => {
  const a = await greedy('The capital of France', 10);
  const b = await greedy('The capital of France', 10);
  assertEq(a.choices[0].text, b.choices[0].text);
  const chunks = await collect(await client.completions.create({ model: M, prompt: 'The capital of France', max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true } }));
  const text = chunks.map((c) => (c.choices[0] ? c.choices[0].text : '')).join('');
  assertEq(text, a.choices[0].text);
  const last = chunks[chunks.length - 1];
  assertEq(last.choices, []);
  assertEq(last.usage.completion_tokens, 10);
});

await check('seeded sampling repeats; n > 1 gives indexed choices', async () => {
  const req = { model: M, prompt: 'Once upon a time', max_tokens: 12, temperature: 1.0, seed: 1234 };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  assertEq(a.choices[0].text, b.choices[0].text, 'same seed, same text');
  const n = await client.completions.create({ ...req, n: 3 });
  assertEq(n.choices.map((c) => c.index), [0, 1, 2]);
  assertEq(n.usage.completion_tokens, 36);
});

await check('several prompts: choices indexed prompt * n + i', async () => {
  const r = await client.completions.create({ model: M, prompt: ['A', 'B'], n: 2, max_tokens: 3, temperature: 0 });
  assertEq(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  const a = await greedy('A', 3), b = await greedy('B', 3);
  assertEq(r.choices[0].text, a.choices[0].text);
  assertEq(r.choices[1].text, a.choices[0].text);  // greedy: both children alike
  assertEq(r.choices[2].text, b.choices[0].text);
});

await check('token-id prompts equal their text prompts', async () => {
  const tok = await postJson(srv.base, '/tokenize', { prompt: 'Hello world' });
  const a = await greedy(tok.json.tokens, 6);
  const b = await greedy('Hello world', 6);
  assertEq(a.choices[0].text, b.choices[0].text);
  const det = await postJson(srv.base, '/detokenize', { tokens: tok.json.tokens });
  assertEq(det.json.prompt, 'Hello world');
});

await check('completion logprobs and echo', async () => {
  const r = await greedy('Hi there', 4, { logprobs: 2 });
  const lp = r.choices[0].logprobs;
  assertEq(lp.tokens.length, 4);
  assertEq(lp.token_logprobs.length, 4);
  assertEq(lp.text_offset.length, 4);
  assert(lp.tokens.join('') === r.choices[0].text, 'tokens join to the text');
  for (const t of lp.top_logprobs) assert(Object.keys(t).length >= 1 && Object.keys(t).length <= 3);
  for (const l of lp.token_logprobs) assert(l <= 0);
  const e = await greedy('Hi there', 2, { echo: true, logprobs: 1 });
  assert(e.choices[0].text.startsWith('Hi there'), e.choices[0].text);
  const ptoks = (await postJson(srv.base, '/tokenize', { prompt: 'Hi there' })).json.count;
  assertEq(e.choices[0].logprobs.tokens.length, ptoks + 2);
  assertEq(e.choices[0].logprobs.token_logprobs[0], null);
});

await check('stop strings cut the text and are reported', async () => {
  // A random model: find a prompt whose greedy output has a visible token past the start.
  let prompt = null, stop = null, text = null;
  for (const p of ['Hello, my name is', 'The capital of France', 'Once upon a time', 'Counting: one two']) {
    const full = await greedy(p, 12, { logprobs: 0 });
    const s = full.choices[0].logprobs.tokens.slice(3).find((t) => t.trim().length > 0);
    if (s) { prompt = p; stop = s; text = full.choices[0].text; break; }
  }
  assert(stop, 'a prompt with a visible token to stop at');
  const r = await greedy(prompt, 12, { stop: [stop] });
  assertEq(r.choices[0].text, text.slice(0, text.indexOf(stop)));
  assertEq(r.choices[0].finish_reason, 'stop');
  assertEq(r.choices[0].stop_reason, stop);
  const incl = await greedy(prompt, 12, { stop: [stop], include_stop_str_in_output: true });
  assertEq(incl.choices[0].text, text.slice(0, text.indexOf(stop) + stop.length));
});

await check('chat: message, usage, stream equals non-stream, logprobs', async () => {
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }];
  const r = await client.chat.completions.create({ model: M, messages, max_tokens: 6, temperature: 0, chat_template_kwargs: { enable_thinking: false } });
  assert(r.id.startsWith('chatcmpl-'));
  assertEq(r.object, 'chat.completion');
  assertEq(r.choices[0].message.role, 'assistant');
  assertEq(r.usage.completion_tokens, 6);
  const tok = await postJson(srv.base, '/tokenize', { messages, chat_template_kwargs: { enable_thinking: false } });
  assertEq(r.usage.prompt_tokens, tok.json.count);
  const chunks = await collect(await client.chat.completions.create({ model: M, messages, max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true }, chat_template_kwargs: { enable_thinking: false } }));
  assertEq(chunks[0].choices[0].delta.role, 'assistant');
  const content = chunks.map((c) => (c.choices[0] && c.choices[0].delta.content) || '').join('');
  const reasoning = chunks.map((c) => (c.choices[0] && c.choices[0].delta.reasoning) || '').join('');
  assertEq(content, r.choices[0].message.content ?? '');
  assertEq(reasoning, r.choices[0].message.reasoning ?? '');
  assertEq(chunks[chunks.length - 1].usage.completion_tokens, 6);
  const lp = await client.chat.completions.create({ model: M, messages, max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 3 });
  assertEq(lp.choices[0].logprobs.content.length, 3);
  for (const e of lp.choices[0].logprobs.content) {
    assertEq(e.top_logprobs.length, 3);
    assert(Array.isArray(e.bytes));
  }
});

await check('reasoning parser: a prompt-opened <think> block splits at </think>', async () => {
  // A random model says nothing sensible; allowed_token_ids makes it emit "</think>" or "Hi".
  const close = (await postJson(srv.base, '/tokenize', { prompt: '</think>' })).json.tokens;
  const hi = (await postJson(srv.base, '/tokenize', { prompt: 'Hi' })).json.tokens;
  assertEq(close.length, 1);
  const messages = [{ role: 'user', content: 'Think.' }, { role: 'assistant', content: '<think>\nhmm' }];
  const body = { model: M, messages, max_tokens: 6, temperature: 1, seed: 3, allowed_token_ids: [close[0], hi[0]], continue_final_message: true, add_generation_prompt: false };
  const r = await client.chat.completions.create(body);
  const prompt = (await postJson(srv.base, '/tokenize', { messages, continue_final_message: true, add_generation_prompt: false })).json.tokens;
  const raw = (await client.completions.create({ model: M, prompt, max_tokens: 6, temperature: 1, seed: 3, allowed_token_ids: [close[0], hi[0]] })).choices[0].text;
  const at = raw.indexOf('</think>');
  const m = r.choices[0].message;
  if (at < 0) {
    assertEq(m.reasoning, raw);
  } else {
    assertEq(m.reasoning ?? '', raw.slice(0, at));
    assertEq(m.content ?? '', raw.slice(at + '</think>'.length));
  }
});

await check('tools: auto is accepted, a named tool must exist', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
  const r = await client.chat.completions.create({ model: M, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, max_tokens: 4, temperature: 0 });
  assert(['length', 'stop', 'tool_calls'].includes(r.choices[0].finish_reason));
  assert(Array.isArray(r.choices[0].message.tool_calls));
  let status = 0;
  try {
    await client.chat.completions.create({ model: M, messages: [{ role: 'user', content: 'x' }], tools, tool_choice: { type: 'function', function: { name: 'nope' } } });
  } catch (e) { status = e.status; }
  assertEq(status, 400);
});

await check('errors: 400 with param, 404 model, context overflow', async () => {
  for (const [req, st, param] of [[{ model: M, prompt: 'x', temperature: -1 }, 400, 'temperature'],
                                  [{ model: 'other', prompt: 'x' }, 404, 'model'],
                                  [{ model: M, prompt: 'x', max_tokens: 5000 }, 400, 'max_tokens']]) {
    let err = null;
    try { await client.completions.create(req); } catch (e) { err = e; }
    assert(err, 'an error for ' + JSON.stringify(req));
    assertEq(err.status, st);
    assertEq(err.error?.param ?? err.param, param);
  }
});

await check('health, ping, version, metrics', async () => {
  assertEq((await fetch(srv.base + '/health')).status, 200);
  assertEq((await fetch(srv.base + '/ping')).status, 200);
  assert((await (await fetch(srv.base + '/version')).json()).version.length > 0);
  const m = await (await fetch(srv.base + '/metrics')).text();
  for (const name of ['vllm:num_requests_running', 'vllm:generation_tokens_total', 'vllm:time_to_first_token_seconds_bucket', 'vllm:request_success_total{finished_reason="length"'])
    assert(m.includes(name), name);
});

await check('vtllm bench serve runs against it', async () => {
  const out = execFileSync(args.vtllm, ['bench', 'serve', '--base-url', srv.base, '--random-input-len', '16', '--random-output-len', '4',
                                        '--num-prompts', '6', '--max-concurrency', '3', '--request-rate', '50', '--ignore-eos', '--json']).toString();
  const r = JSON.parse(out);
  assertEq([r.successful_requests, r.failed_requests, r.total_output_tokens], [6, 0, 24]);
  for (const k of ['mean_ttft_ms', 'median_tpot_ms', 'p99_itl_ms', 'mean_e2el_ms', 'request_throughput', 'output_throughput', 'total_token_throughput'])
    assert(r[k] > 0, k);
});

await check('SIGTERM exits 0', async () => {
  assertEq(await srv.stop(), 0);
});

// A second server with --api-key: /v1 needs the bearer token, /health and /metrics do not.
const keyed = await startServer(args.vtllm, model, ['--api-key', 'sekrit']);
await check('api key: 401 without or with a wrong key, 200 with it', async () => {
  for (const key of ['wrong', '']) {
    let err = null;
    try { await new OpenAI({ baseURL: keyed.base + '/v1', apiKey: key || 'x', maxRetries: 0 }).models.list(); } catch (e) { err = e; }
    assert(err, 'rejected');
    assertEq(err.status, 401);
  }
  const raw = await fetch(keyed.base + '/v1/models');
  assertEq(raw.status, 401);
  assertEq((await raw.json()).error.code, 401);
  const ok = await new OpenAI({ baseURL: keyed.base + '/v1', apiKey: 'sekrit', maxRetries: 0 }).completions.create({ model: M, prompt: 'x', max_tokens: 2 });
  assertEq(ok.choices.length, 1);
  assertEq((await fetch(keyed.base + '/health')).status, 200);
  assertEq((await fetch(keyed.base + '/metrics')).status, 200);
});
await check('keyed server exits 0', async () => assertEq(await keyed.stop(), 0));
finish();
