"""The peer for cuda_fp8_bench's M = 1 rows: torch._scaled_mm (cuBLASLt FP8 as PyTorch
calls it, the figure the CUDA issue quotes), timed the same ways on the same shapes.

Run on the GPU machine: python3 bench/torch_scaled_mm_peer.py
Weights rotate through copies totalling >= 256 MiB (streamed from HBM, not L2); 'chain' is
the median over 5 batches of 20 back-to-back calls, 'graph' the same 20 calls replayed
from a CUDA graph (median of 9 replays), both per call.
"""
import torch

SHAPES = [("qkv/gate_up-like 4096->12288", 12288, 4096), ("down-like 12288->4096", 4096, 12288),
          ("o_proj-like 4096->4096", 4096, 4096), ("qkv-like 4096->6144", 6144, 4096)]


def per_call_us(fn, batches, calls):
    times = []
    for r in range(batches):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for i in range(calls):
            fn(r * calls + i)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1000.0 / calls)
    return sorted(times)[len(times) // 2]


def main():
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'shape':30s} {'M':>2s} {'chain_us':>9s} {'weightGB/s':>10s} {'graph_us':>9s} {'graphGB/s':>9s}")
    for name, n, k in SHAPES:
        copies = max(2, (256 << 20) // (n * k) + 1)
        # Codes 0x00-0x6F and their negatives: finite e4m3 values (|x| < 2^6).
        ws = [(torch.randint(0, 0x70, (n, k), dtype=torch.uint8, device="cuda") |
               (torch.randint(0, 2, (n, k), dtype=torch.uint8, device="cuda") << 7)).view(torch.float8_e4m3fn)
              for _ in range(copies)]
        a = torch.randn(1, k, device="cuda").to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        out = torch.empty(1, n, dtype=torch.bfloat16, device="cuda")

        def call(i):
            torch._scaled_mm(a, ws[i % copies].t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, out=out)

        for i in range(3):
            call(i)
        torch.cuda.synchronize()
        chain = per_call_us(call, 5, 20)
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            with torch.cuda.graph(graph, stream=stream):
                for i in range(20):
                    call(i)
        torch.cuda.synchronize()
        graph_us = per_call_us(lambda _: graph.replay(), 9, 1) / 20
        wb = n * k
        print(f"{name:30s} {1:2d} {chain:9.2f} {wb / chain / 1e3:10.0f} {graph_us:9.2f} {wb / graph_us / 1e3:9.0f}")


if __name__ == "__main__":
    main()
