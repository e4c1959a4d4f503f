"""The peer for cuda_attention_bench: PyTorch's scaled_dot_product_attention on the same
shapes (Qwen3-8B heads: 32 query heads, 8 KV heads, head size 128, BF16), by each backend
that takes them: cuDNN (the SDPA of cuDNN 9 that PyTorch links), FlashAttention-2 and the
memory-efficient kernel. Keys and values are contiguous [S, 8, ctx, 128] tensors (PyTorch's
SDPA has no paged cache); grouped-query heads by enable_gqa where the backend takes it,
else the keys and values repeated to 32 heads first (outside the timing; the kernel then
reads 4x the bytes, marked 'x4').

Each case: 20 calls captured into one CUDA graph and replayed, per call (median of 9
replays), as cuda_attention_bench times vtllm's kernels.
Run on the GPU machine: python3 bench/torch_sdpa_peer.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HQ, HK, D = 32, 8, 128
CHAIN, REPS = 20, 9
BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def graph_us(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(CHAIN):
            fn()
    for _ in range(2):
        g.replay()
    times = []
    for _ in range(REPS):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1000.0 / CHAIN)
    return sorted(times)[len(times) // 2]


def run(backend, q, k, v, causal):
    """Per-call microseconds and a mark ('' or 'x4'), or the reason it does not run."""
    for gqa in (True, False):
        kk = k if gqa else k.repeat_interleave(HQ // HK, dim=1)
        vv = v if gqa else v.repeat_interleave(HQ // HK, dim=1)
        try:
            with sdpa_kernel([backend]):
                def fn():
                    return F.scaled_dot_product_attention(q, kk, vv, is_causal=causal, enable_gqa=gqa)
                fn()
                torch.cuda.synchronize()
                return graph_us(fn), "" if gqa else "x4"
        except Exception as e:  # noqa: BLE001 - a backend refusing a shape is a result here
            err = str(e).splitlines()[0][:60] if str(e) else type(e).__name__
    return None, err


def main():
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cudnn {torch.backends.cudnn.version()}")
    print(f"{'case':8s} {'S':>4s} {'ctx/L':>6s} " + " ".join(f"{n:>14s}" for n, _ in BACKENDS))
    cases = [("decode", s, c) for s in (1, 16, 64) for c in (160, 1024, 4096)] + \
            [("prefill", 1, 1024), ("prefill", 1, 4096)]
    for kind, s, c in cases:
        rows = 1 if kind == "decode" else c
        q = torch.randn(s, HQ, rows, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(s, HK, c, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(s, HK, c, D, device="cuda", dtype=torch.bfloat16)
        cols = []
        for _, b in BACKENDS:
            us, mark = run(b, q, k, v, kind == "prefill")
            cols.append(f"{us:11.2f} {mark:2s}" if us is not None else f"{'-':>11s}   ")
            if us is None:
                print(f"  ({kind} S={s} {c}: {_} refused: {mark})")
        print(f"{kind:8s} {s:4d} {c:6d} " + " ".join(f"{x:>14s}" for x in cols))


if __name__ == "__main__":
    main()
