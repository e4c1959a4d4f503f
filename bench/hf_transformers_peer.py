"""The peer for `vtllm bench latency --device cuda` on a BF16 checkpoint: Hugging Face
transformers, eager attention, greedy decoding with its KV cache, batch 1 and 16, on the
same random checkpoint (make_random_checkpoint --preset qwen3-0.6b --format bf16).

Run on the GPU machine: python3 bench/hf_transformers_peer.py CHECKPOINT_DIR [INPUT_LEN OUTPUT_LEN]
Prints the median decode step (ms) and decode tok/s over 3 runs per batch size, timed with
CUDA synchronization around each generate() call minus a run of the prefill alone.
"""
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main():
    ckpt = sys.argv[1]
    L = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    O = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16, attn_implementation="eager").cuda().eval()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, checkpoint {ckpt}, in {L}, out {O}")
    for B in (1, 16):
        ids = torch.randint(0, model.config.vocab_size, (B, L), device="cuda", generator=None)
        gen = dict(do_sample=False, pad_token_id=0, eos_token_id=None)

        def prefill():
            with torch.no_grad():
                model.generate(ids, max_new_tokens=1, min_new_tokens=1, **gen)

        def full():
            with torch.no_grad():
                model.generate(ids, max_new_tokens=O, min_new_tokens=O, **gen)

        prefill()  # warm-up
        steps = []
        for _ in range(3):
            steps.append((timed(full) - timed(prefill)) / (O - 1))
        step = sorted(steps)[1]
        print(f"batch {B}: decode step {step * 1e3:.2f} ms = {B / step:.1f} tok/s (median of 3)")


if __name__ == "__main__":
    main()
