#!/bin/bash
# The whole pipeline on one GPU machine, after prepare_corpus.py has run:
#   bash run_device.sh CORPUS_DIR WORK_DIR OUT_DIR [train.py options...]
# WORK_DIR receives models/default/{bf16,fp8,heldout.txt}, train_log.json,
# scales.json and reference.json; OUT_DIR gets the logs, bf16.tar (as soon as
# training ends, so a later failure keeps it), fp8.tar and the JSON files:
# each under 16 MiB, what the device tool brings back. When WORK_DIR already
# holds models/default/bf16/model.safetensors, training is skipped and only
# quantization and the references run again.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
corpus=$1 work=$2 out=$3
shift 3
export PYTHONUNBUFFERED=1
mkdir -p "$work/models/default" "$out"
m=$work/models/default

python3 -c 'import torch, transformers, tokenizers, safetensors as s; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__, "tokenizers", tokenizers.__version__, "safetensors", s.__version__)'
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true

cp "$corpus/heldout.txt" "$m/heldout.txt"
if [ -f "$m/bf16/model.safetensors" ]; then
  echo "using the trained model in $m/bf16"
else
  python3 "$here/train.py" --corpus "$corpus" --out "$m/bf16" --log "$work/train_log.json" "$@" 2>&1 \
    | tee "$out/train.log" || { echo "train.py failed"; exit 1; }
  tar -C "$work" -cf "$out/bf16.tar" models/default/bf16 train_log.json
fi

python3 "$here/quantize_fp8.py" --bf16 "$m/bf16" --heldout "$m/heldout.txt" --out "$m/fp8" \
  --log "$work/scales.json" 2>&1 | tee "$out/quantize.log"
python3 "$here/reference.py" --bf16 "$m/bf16" --fp8 "$m/fp8" --heldout "$m/heldout.txt" \
  --out "$work/reference.json" 2>&1 | tee "$out/reference.log"

# Not part of the shipped numbers: transformers' own reading of the tokenizer
# files and chat template, and a few sampled texts from the bf16 model.
python3 - "$m/bf16" <<'EOF' 2>&1 | tee "$out/check.log"
import sys, torch
from transformers import AutoTokenizer, Qwen3ForCausalLM
d = sys.argv[1]
tok = AutoTokenizer.from_pretrained(d)
chat = [{"role": "user", "content": "The jury said"}]
print("template:", repr(tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)))
print("eos:", tok.eos_token, tok.eos_token_id, "pad:", tok.pad_token, tok.pad_token_id)
model = Qwen3ForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
torch.manual_seed(0)
prompts = ["The jury said", "She looked at him and", "In the morning"]
for p in prompts:
    ids = tok(p, return_tensors="pt").input_ids
    g = model.generate(ids, max_new_tokens=40, do_sample=True, temperature=0.8, top_p=0.95)
    print("sample:", repr(tok.decode(g[0], skip_special_tokens=False)))
ids = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
g = model.generate(ids, max_new_tokens=40, do_sample=False)
print("chat greedy:", repr(tok.decode(g[0][ids.shape[1]:], skip_special_tokens=False)))
EOF
tar -C "$work" -cf "$out/fp8.tar" models/default/fp8
cp "$work/scales.json" "$work/reference.json" "$out/"
ls -la "$out"
