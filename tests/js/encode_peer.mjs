// JS tokenizer peer for vtllm's tokenizer tests and benchmark (@lenml/tokenizers, a port of
// transformers.js). Reads a request JSON and writes a response JSON:
//
//   node encode_peer.mjs REQUEST.json RESPONSE.json
//
// request: {"tokenizer_json": path, "tokenizer_config": path,
//           "mode": "encode" | "bench",
//           "texts": [...],                      // encode: strings to encode
//           "add_special_tokens": bool,          // encode
//           "decode": bool,                      // encode: also decode the ids (with and without
//                                                //   skip_special_tokens, no space clean-up)
//           "text_file": path, "repeats": n}     // bench: time encoding this file's lines
// response (encode): {"count": n, "ids": [[...], ...], "decoded": [...], "decoded_skip": [...]}
// response (bench):  {"bytes": n, "seconds": [...per repeat...]}
import { readFileSync, writeFileSync } from "node:fs";
import { TokenizerLoader } from "@lenml/tokenizers";

const [reqPath, outPath] = process.argv.slice(2);
if (!reqPath || !outPath) {
  console.error("usage: node encode_peer.mjs REQUEST.json RESPONSE.json");
  process.exit(2);
}
const req = JSON.parse(readFileSync(reqPath, "utf8"));
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(req.tokenizer_json, "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(req.tokenizer_config, "utf8")),
});

if (req.mode === "bench") {
  const text = readFileSync(req.text_file, "utf8");
  const lines = text.split(/(?<=\n)/);  // keep the newlines, encode line by line
  const seconds = [];
  let tokens = 0;
  for (let r = 0; r < (req.repeats ?? 3); ++r) {
    const t0 = process.hrtime.bigint();
    tokens = 0;
    for (const line of lines) tokens += tokenizer.encode(line, { add_special_tokens: false }).length;
    seconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  writeFileSync(outPath, JSON.stringify({ bytes: Buffer.byteLength(text, "utf8"), tokens, seconds }));
} else {
  const ids = [];
  const decoded = [];
  const decodedSkip = [];
  for (const t of req.texts) {
    const e = tokenizer.encode(t, { add_special_tokens: !!req.add_special_tokens });
    ids.push(e);
    if (req.decode && e.length === 0) {
      decoded.push("");
      decodedSkip.push("");
    } else if (req.decode) {
      decoded.push(tokenizer.decode(e, { skip_special_tokens: false, clean_up_tokenization_spaces: false }));
      decodedSkip.push(tokenizer.decode(e, { skip_special_tokens: true, clean_up_tokenization_spaces: false }));
    }
  }
  writeFileSync(outPath, JSON.stringify({ count: ids.length, ids, decoded, decoded_skip: decodedSkip }));
}
