"""The bus a work-memory budget's hosted caches use (issue 46; session 37's overlap came out 1.47x where ~1.1-1.2x
was predicted from ~50 GB/s a direction): pinned host <-> device copy rates alone, both directions at once, and each
beside a bf16 GEMM that keeps the SMs busy (what the decode's copies run next to). One line per case, GB/s.
    python3 dev/pcie_probe.py"""
import time
import torch

def rate(fn, nbytes, reps=5):
    fn(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps): fn()
    torch.cuda.synchronize()
    return nbytes * reps / (time.perf_counter() - t) / 1e9

n = 1 << 30
h_in = torch.empty(n, dtype=torch.uint8).pin_memory()
h_out = torch.empty(n, dtype=torch.uint8).pin_memory()
d_in = torch.empty(n, dtype=torch.uint8, device="cuda")
d_out = torch.empty(n, dtype=torch.uint8, device="cuda")
s_in, s_out, s_mm = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

def h2d():
    with torch.cuda.stream(s_in): d_in.copy_(h_in, non_blocking=True)
def d2h():
    with torch.cuda.stream(s_out): h_out.copy_(d_out, non_blocking=True)
def both():
    h2d(); d2h()
def gemm(k):
    with torch.cuda.stream(s_mm):
        for _ in range(k): a @ a

# how many GEMMs take about as long as one 1 GiB copy
t = time.perf_counter(); gemm(10); torch.cuda.synchronize(); per = (time.perf_counter() - t) / 10
k = max(1, int(0.03 / per))
print(f"gemm 8192^3 bf16: {per * 1e3:.2f} ms ({2 * 8192 ** 3 / per / 1e12:.0f} TFLOP/s); {k} beside each copy")
print(f"H2D pinned alone: {rate(h2d, n):.1f} GB/s")
print(f"D2H pinned alone: {rate(d2h, n):.1f} GB/s")
print(f"H2D + D2H at once: {rate(both, 2 * n):.1f} GB/s both together")
print(f"H2D beside GEMMs: {rate(lambda: (gemm(k), h2d()), n):.1f} GB/s")
print(f"H2D + D2H beside GEMMs: {rate(lambda: (gemm(k), both()), 2 * n):.1f} GB/s both together")
