// The server's texts against Hugging Face transformers: the random tiny Qwen3 (real Qwen3
// tokenizer) as a BF16 checkpoint, served with float32 activations, must give the greedy
// texts that transformers gave for the same weights (tests/fixtures/server_texts/reference.json,
// made by tools/oracle/server_text_oracle.py: chat template -> ids -> float32 greedy -> text).
// Each case stops before its first near-tie, so float32 summation order cannot flip a token.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { parseArgs, makeModel, startServer, check, assert, assertEq, finish, postJson } from './harness.mjs';

const args = parseArgs();
const fixtures = path.join(args.sourceDir, 'tests/fixtures/server_texts');
// Each reference and the checkpoint it was made from: the random tiny Qwen3 with the real
// Qwen3 tokenizer (regenerated here by make_random_checkpoint, so its hash is checked), and
// the trained default model's BF16 copy in the repository.
const runs = [
  { file: 'qwen3_tiny_vocab.json', model: () => makeModel(args, 'bf16'), flags: [] },
  { file: 'default_model.json', model: () => path.join(args.sourceDir, 'models/default/bf16'), flags: ['--max-model-len', '512'] },
];
const M = 'tiny';

for (const run of runs) {
  const ref = JSON.parse(fs.readFileSync(path.join(fixtures, run.file), 'utf8'));
  const model = run.model();
  const srv = await startServer(args.vtllm, model, ['--dtype', 'float32', ...run.flags]);
  const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'unused', maxRetries: 0 });

  await check(`${run.file}: the checkpoint is the one transformers ran`, async () => {
    const sha = crypto.createHash('sha256').update(fs.readFileSync(path.join(model, 'model.safetensors'))).digest('hex');
    assertEq(sha, ref.checkpoint.model_safetensors_sha256, 'model.safetensors sha256');
  });
  // A case whose first step is a near-tie has no tokens to compare; enough others must.
  const usable = (cases) => cases.filter((c) => c.max_tokens >= 1);
  assert(usable(ref.completions).length >= 3 && usable(ref.chats).length >= 2, `${run.file}: too few cases with tokens`);
  for (const [i, c] of usable(ref.completions).entries()) {
    await check(`${run.file}: completion ${i} ${JSON.stringify(c.prompt)}, ${c.completion_ids.length} tokens`, async () => {
      const tok = await postJson(srv.base, '/tokenize', { prompt: c.prompt, add_special_tokens: false });
      assertEq(tok.json.tokens, c.prompt_ids, 'prompt ids');
      const r = await client.completions.create({ model: M, prompt: c.prompt, max_tokens: c.max_tokens, temperature: 0 });
      assertEq(r.choices[0].text, c.text, 'text');
      assertEq(r.choices[0].finish_reason, c.finish_reason, 'finish_reason');
    });
  }
  for (const [i, c] of usable(ref.chats).entries()) {
    await check(`${run.file}: chat ${i} (${c.messages.length} messages), ${c.completion_ids.length} tokens`, async () => {
      const r = await client.chat.completions.create({ model: M, messages: c.messages, max_tokens: c.max_tokens, temperature: 0 });
      assertEq(r.usage.prompt_tokens, c.prompt_ids.length, 'prompt tokens (the template rendered as transformers renders it)');
      assertEq(r.choices[0].message.content, c.text, 'content');
      assertEq(r.choices[0].finish_reason, c.finish_reason, 'finish_reason');
    });
  }
  await srv.stop();
}
finish();
