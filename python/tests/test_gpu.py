"""GPU tests of the wan22vae package (skipped without torch, a CUDA GPU or the library's CUDA backend):

- the seed protocol (prepare / run) under the harness's own checks, on the library's synthetic TI2V-5B weights:
  out NaN-filled at a fresh 256-byte-aligned address every call, z and the weights unchanged (fingerprints), no
  thread started, every call's video equal to the first's, the first within the allowance of diffusers' fp32
  decode; run() launches no kernel but the library's (torch.profiler) and calls no ATen op;
- diffusers' AutoencoderKLWan (TI2V-5B config, the same weights) decoding the same latents with and without
  wan22vae.diffusers.enable, within the allowance: max|d| <= min(2, 3 x bf16 max|d|), rms <= 3 x bf16 rms, the bf16
  figures being diffusers' own bf16 decode against its fp32 decode (TF32 off); for float32, bfloat16 and float16
  VAEs (weights converted once to bf16, the video in the VAE's dtype), and allow_fp32=False keeping diffusers' decode;
- the Decoder of issue 31: device="auto", subfolder=, batches, torch_dtype, progress, a decode stopped by the progress
  callable and by Ctrl-C (SIGINT, in a subprocess);
- every fallback of enable() taken when it should be, with its reason said once;
- to_uint8_frames against diffusers' postprocess (PIL), in one device-to-host copy;
- Decoder.frames on CUDA latents (w22_decode_device_frames): the batches put together are dec(z) (bf16) and
  to_uint8_frames(dec(z)) (uint8, converted on the GPU), on a stream of the caller's too; stopping early; an exception
  of the conversion raised in the reader; the C call's contract (frame0, n, the stream synchronized, a stop).
The diffusers tests need diffusers (0.42.1) and skip without it."""
import glob
import math
import os
import random
import re
import threading
import warnings

import numpy as np
import pytest

import wan22vae
import wan22vae.diffusers  # the module the diffusers tests use (not imported by the package itself)

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible to torch"),
    pytest.mark.skipif(not wan22vae.cuda_available(),
                       reason=f"libwan22vae cannot use a GPU here: {wan22vae.cuda_unavailable_reason()}"),
]

T, H, W = 2, 4, 6          # the latents of these tests: video [1, 3, 5, 64, 96]
SEED_W, SEED_Z = 0, 1
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TI2V = dict(base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
            temperal_downsample=[False, True, True], is_residual=True, in_channels=12, out_channels=12,
            patch_size=2, scale_factor_temporal=4, scale_factor_spatial=16)


# ---- fixtures ----
@pytest.fixture(scope="module")
def device():
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="module")
def state_f32():
    """The library's synthetic TI2V-5B weights as float32 torch CPU tensors, in diffusers' order."""
    w = wan22vae.synthetic_weights(None, SEED_W)
    try:
        return w.state_dict("f32")
    finally:
        w.free()


@pytest.fixture(scope="module")
def weights_bf16(state_f32, device):
    """The protocol's weights: the 110 tensors in bf16 on the GPU, in diffusers' order."""
    return [t.to(device, torch.bfloat16) for t in state_f32.values()]


@pytest.fixture(scope="module")
def z_bf16(device):
    return torch.from_numpy(wan22vae.synthetic_latents(None, SEED_Z, T, H, W)).to(device, torch.bfloat16)


def _vae(state, dtype, device):
    diffusers = pytest.importorskip("diffusers")
    with torch.device(device):
        vae = diffusers.AutoencoderKLWan(**TI2V)
    missing, unexpected = vae.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith(("encoder.", "quant_conv.")) for k in missing)
    return vae.to(device, dtype).eval()


@pytest.fixture(scope="module")
def vae32(state_f32, device):
    return _vae(state_f32, torch.float32, device)


@pytest.fixture(scope="module")
def ref(vae32, z_bf16):
    """diffusers' fp32 decode (TF32 off) of the bf16 latents, and diffusers' own bf16 decode's error against it:
    (ref, allowed max |d|, allowed rms)."""
    tf = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.no_grad():
            r = vae32.decode(z_bf16.float()).sample
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf
    vae16 = _vae(vae32.state_dict(), torch.bfloat16, r.device)
    with torch.no_grad():
        b = vae16.decode(z_bf16).sample
    del vae16
    d = b.float() - r
    bf_max, bf_rms = float(d.abs().max()), float(d.square().mean().sqrt())
    assert bf_rms > 0
    return r, min(2.0, 3 * bf_max), 3 * bf_rms


@pytest.fixture()
def vae16(vae32, device):
    """A bf16 AutoencoderKLWan with the synthetic weights (fresh for each test: enable() changes it)."""
    vae = _vae(vae32.state_dict(), torch.bfloat16, device)
    yield vae
    wan22vae.diffusers.disable(vae)


def within(out, ref_allow):
    r, max_ok, rms_ok = ref_allow
    assert out.shape == r.shape, (out.shape, r.shape)
    x = out.float()
    assert torch.isfinite(x).all() and x.abs().max() <= 1
    d = x - r
    mx, rms = float(d.abs().max()), float(d.square().mean().sqrt())
    assert mx <= max_ok and rms <= rms_ok, f"max|d| {mx:.4g} (allowed {max_ok:.4g}), rms {rms:.4g} " \
                                           f"(allowed {rms_ok:.4g})"
    return mx, rms


# ---- the harness's helpers, as it has them ----
class Pool:
    """Each call's buffer at a fresh address, shifted by multiples of 256 bytes (the harness's Pool)."""
    ALIGN, MAX_SHIFT = 256, 2048

    def __init__(self, shape, dtype, device, calls, seed):
        rng = random.Random(seed)
        self.offsets = [0]
        for _ in range(calls - 1):
            self.offsets.append(self.offsets[-1] + rng.randint(1, self.MAX_SHIFT // self.ALIGN))
        self.shape, self.numel = tuple(shape), math.prod(shape)
        self.block = max(1, self.ALIGN // torch.empty(0, dtype=dtype).element_size())
        self.buffer = torch.empty(self.numel + self.offsets[-1] * self.block, dtype=dtype, device=device)
        self.calls = 0

    def next(self):
        start = self.offsets[self.calls] * self.block
        self.calls += 1
        return self.buffer[start:start + self.numel].view(self.shape)


def fingerprint(tensors):
    out = []
    for t in tensors:
        raw = t.detach().contiguous().view(-1).view(torch.uint8)
        try:
            raw = raw.view(torch.int32)
        except RuntimeError:
            pass
        out.append(int(raw.sum(dtype=torch.int64)))
    return out


# ---- the protocol ----
def test_protocol_under_harness_checks(weights_bf16, z_bf16, ref):
    calls = 4
    got = wan22vae.prepare(weights_bf16, 0, 1, None)
    assert got is weights_bf16
    marks = fingerprint(got)
    zpool = Pool(z_bf16.shape, torch.bfloat16, z_bf16.device, calls, 1)
    opool = Pool(ref[0].shape, torch.bfloat16, z_bf16.device, calls, 2)
    threads = threading.active_count()
    first = None
    for i in range(calls):
        z = zpool.next()
        z.copy_(z_bf16)
        zmark = fingerprint([z])
        out = opool.next()
        out.fill_(float("nan"))
        assert out.data_ptr() % 256 == 0 and z.data_ptr() % 256 == 0
        torch.cuda.synchronize()
        wan22vae.run(z, got, 0, 1, None, out)
        torch.cuda.synchronize()
        assert fingerprint([z]) == zmark, "run() wrote z"
        assert torch.isfinite(out.float()).all(), f"call {i} left {int((~torch.isfinite(out.float())).sum())} NaN"
        if first is None:
            mx, rms = within(out, ref)
            print(f"protocol: max|d| {mx:.4g}, rms {rms:.4g} (allowed {ref[1]:.4g}, {ref[2]:.4g})")
            first = out.clone()
        else:
            assert torch.equal(out, first), f"call {i} differs from the first: " \
                                            f"max {float((out.float() - first.float()).abs().max())}"
    assert fingerprint(got) == marks, "run() wrote its weights"
    assert threading.active_count() == threads, "run() started threads"


def test_run_without_prepare_and_bad_arguments(weights_bf16, z_bf16, ref):
    fresh = [t.clone() for t in weights_bf16]          # other addresses: no prepared decoder for them
    out = torch.full(ref[0].shape, float("nan"), dtype=torch.bfloat16, device=z_bf16.device)
    wan22vae.run(z_bf16, fresh, 0, 1, None, out)       # opens the decoder itself
    within(out, ref)
    with pytest.raises(wan22vae.Error, match="out"):
        wan22vae.run(z_bf16, fresh, 0, 1, None, out.float())
    with pytest.raises(wan22vae.Error, match="z"):
        wan22vae.run(z_bf16.float(), fresh, 0, 1, None, out)
    with pytest.raises(wan22vae.Error, match="contiguous"):
        wan22vae.run(z_bf16.transpose(3, 4).contiguous().transpose(3, 4), fresh, 0, 1, None, out)
    del fresh
    wan22vae.protocol.release()


def _our_kernel_names():
    """The __global__ functions of the library's CUDA sources (when the repo is here), and the w22_ prefix."""
    names = set()
    for path in glob.glob(os.path.join(REPO, "src", "cuda", "*.cu")):
        with open(path) as f:
            text = f.read()
        names |= set(re.findall(r"__global__\s+(?:void\s+)?(?:__launch_bounds__\([^)]*\)\s*)?(?:void\s+)?(\w+)\s*\(",
                                text))
    return names


def _is_ours(name, ours):
    return name.startswith("w22_") or re.search(r"\bw22_\w+", name) is not None or \
        any(re.search(rf"\b{re.escape(k)}\b", name) for k in ours)


def test_run_launches_no_aten_kernel(weights_bf16, z_bf16, ref):
    from torch.profiler import ProfilerActivity, profile
    wan22vae.prepare(weights_bf16, 0, 1, None)
    out = torch.empty(ref[0].shape, dtype=torch.bfloat16, device=z_bf16.device)
    wan22vae.run(z_bf16, weights_bf16, 0, 1, None, out)  # warm
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        wan22vae.run(z_bf16, weights_bf16, 0, 1, None, out)
        torch.cuda.synchronize()
    events = prof.events()
    aten = sorted({e.name for e in events if e.name.startswith("aten::")})
    assert not aten, f"run() called ATen ops: {aten}"
    kernels = [e.name for e in events if e.device_type.name == "CUDA"]
    copies = [k for k in kernels if k.startswith(("Memcpy", "Memset"))]
    ours = _our_kernel_names()
    foreign = sorted({k for k in kernels if k not in copies and not _is_ours(k, ours)})
    print(f"run(): {len(kernels) - len(copies)} kernels, {len(copies)} copies/sets; not ours: {foreign}")
    assert kernels, "the profiler saw no kernel at all (CUPTI missing?)"
    assert not foreign, f"run() launched kernels that are not the library's: {foreign[:10]}"


# ---- the Decoder class on the GPU ----
def test_exact_arithmetic(z_bf16, ref):
    """exact=True (w22_decoder_params.exact): every conv direct. Within the allowance, other bits than the default's
    Winograd path (the 3x3x3 convs of 256 channels up), and no farther from float32 in rms (Winograd F(4x4)'s error is
    about 1.3-1.4x the direct conv's: dev/winograd_f4_probe.py)."""
    w = wan22vae.synthetic_weights(None, SEED_W)
    try:
        wino = wan22vae.Decoder(w, device=z_bf16.device)(z_bf16)
        with wan22vae.Decoder(w, device=z_bf16.device, exact=True) as d:
            exact = d(z_bf16)
    finally:
        w.free()
    _, rms_w = within(wino, ref)
    _, rms_e = within(exact, ref)
    assert not torch.equal(wino, exact), "exact=True gave the Winograd path's bits"
    assert rms_e <= rms_w * 1.05, f"exact rms {rms_e:.4g} against Winograd's {rms_w:.4g}"


def test_memory_budget_on_gpu(z_bf16):
    """memory_budget= (issue 46) on the GPU: at the test's size a budget at the floor's need (every causal cache in
    pinned host memory: read from the failure of a 64M budget) gives the default plan's video bit for bit, twice; the
    failing decoder stays usable at a smaller size. tests/cuda_budget.c does 704x1280 under 2.5 GiB."""
    w = wan22vae.synthetic_weights(None, SEED_W)
    try:
        default = wan22vae.Decoder(w, device=z_bf16.device)(z_bf16)
        with wan22vae.Decoder(w, device=z_bf16.device, memory_budget="64M") as d:
            with pytest.raises(wan22vae.Error) as e:
                d(z_bf16)
        m = re.search(r"needs for latents \d+x\d+: [0-9.]+ GiB \((\d+) bytes;", e.value.message)
        assert m, e.value.message
        floor = int(m.group(1))
        with wan22vae.Decoder(w, device=z_bf16.device, memory_budget=floor - 1) as d:
            with pytest.raises(wan22vae.Error, match=f"\\({floor - 1} bytes\\)"):
                d(z_bf16)
            small = z_bf16[:, :, :1, :2, :2].contiguous()  # a smaller size fits the same budget
            assert torch.equal(d(small), wan22vae.Decoder(w, device=z_bf16.device)(small))
        with wan22vae.Decoder(w, device=z_bf16.device, memory_budget=floor) as d:
            assert torch.equal(d(z_bf16), default), "the floor's budget: not the default plan's bits"
            assert torch.equal(d(z_bf16), default), "the floor's budget, second call: not the default plan's bits"
    finally:
        w.free()


def test_portable_kernels(z_bf16, ref, vae16, monkeypatch):
    """kernels="portable" (issue 45): the portable kernels on this GPU (a Hopper's own path otherwise), said by
    Decoder.path; its video within the allowance of diffusers' fp32 decode, like the default path's, every call the
    same; exact=True with it too; enable(vae, kernels="portable") decodes on it. Under W22_KERNELS=portable (the suite
    run on the portable path) "auto" is the portable path too."""
    cap = torch.cuda.get_device_capability(z_bf16.device)
    forced = os.environ.get("W22_KERNELS") == "portable"
    w = wan22vae.synthetic_weights(None, SEED_W)
    try:
        with wan22vae.Decoder(w, device=z_bf16.device) as d:
            assert d.path == ("hopper" if cap[0] == 9 and not forced else "portable"), (d.path, cap, forced)
            default = d(z_bf16)
        with wan22vae.Decoder(w, device=z_bf16.device, kernels="portable") as d:
            assert d.path == "portable" and d.kernels == "portable"
            got = d(z_bf16)
            assert torch.equal(d(z_bf16), got), "the portable path's second call differs from its first"
        with wan22vae.Decoder(w, device=z_bf16.device, kernels="portable", exact=True) as d:
            exact = d(z_bf16)
    finally:
        w.free()
    mx, rms = within(got, ref)
    print(f"portable: max|d| {mx:.4g}, rms {rms:.4g} (allowed {ref[1]:.4g}, {ref[2]:.4g}); the default path: "
          f"{within(default, ref)}")
    within(exact, ref)
    monkeypatch.delenv("W22_KERNELS", raising=False)
    with torch.no_grad():
        assert wan22vae.diffusers.enable(vae16, kernels="portable") is True
        ours = vae16.decode(z_bf16).sample
        assert wan22vae.diffusers.status(vae16)["path"] == "kernel"
        assert getattr(vae16, wan22vae.diffusers._ATTR).decoder.path == "portable"
    within(ours, ref)


def test_weights_on_gpu(tmp_path, weights_bf16, z_bf16):
    """Weights in GPU memory (w22_weights_from_device, what prepare and enable() pass): laid out on the GPU, never
    through the host, into the same bytes as host weights (the same video, bitwise), from bf16 and from float32
    tensors; copied down for saving; a NaN refused naming its tensor; pointers the library did not get on a GPU refused."""
    host = wan22vae.weights_from_tensors([t.cpu() for t in weights_bf16])
    with wan22vae.Decoder(host, device=z_bf16.device) as d:
        want = d(z_bf16)
    for dt in (torch.bfloat16, torch.float32):
        on = [t.to(dt) for t in weights_bf16]
        w = wan22vae.weights_from_tensors(on)
        with wan22vae.Decoder(w, device=z_bf16.device) as d:
            got = d(z_bf16)
        assert torch.equal(got, want), f"weights on the GPU in {dt}: another video than host weights'"
        if dt == torch.bfloat16:
            w.save(tmp_path / "w.safetensors")
            back = wan22vae.load_weights(tmp_path / "w.safetensors").state_dict("bf16")
            for (name, a), b in zip(back.items(), weights_bf16):
                assert torch.equal(a, b.cpu()), f"{name} saved from GPU memory differs"
        w.free()
    bad = list(weights_bf16)
    bad[5] = weights_bf16[5].clone()
    bad[5].view(-1)[7] = float("nan")
    name = wan22vae.weight_table(None)[5][0]
    with pytest.raises(wan22vae.Error, match=re.escape(name)):
        wan22vae.weights_from_tensors(bad)


def test_decoder_from_pretrained_and_out(tmp_path, weights_bf16, z_bf16, ref):
    w = wan22vae.synthetic_weights(None, SEED_W)
    w.save(tmp_path / "w.safetensors", "bf16")
    w.free()
    dec = wan22vae.Decoder.from_pretrained(tmp_path / "w.safetensors", device=z_bf16.device)
    video = dec(z_bf16)
    assert video.dtype == torch.bfloat16 and video.device == z_bf16.device
    within(video, ref)
    out = torch.full_like(video, float("nan"))
    assert dec(z_bf16, out=out) is out and torch.equal(out, video)
    host = dec(z_bf16.float().cpu().numpy())  # host latents: the host path
    assert isinstance(host, np.ndarray) and host.dtype == np.float32
    assert torch.equal(torch.from_numpy(host).to(torch.bfloat16), video.cpu())
    with pytest.raises(wan22vae.Error) as e:
        dec(z_bf16[:, :47])
    assert e.value.status == "W22_ERR_BAD_SHAPE"
    dec.close()


def test_decoder_auto_subfolder_batch_dtype_progress(tmp_path, z_bf16, ref, caplog):
    """Issue 31's Decoder on the GPU: device="auto" takes the GPU (and says so), subfolder=, a batch of two decoded
    one by one, torch_dtype= and out= of float32/float16, a progress callable, and a decode stopped by the callable
    (its exception propagates; the next decode is whole)."""
    import logging
    w = wan22vae.synthetic_weights(None, SEED_W)
    (tmp_path / "pipe" / "vae").mkdir(parents=True)
    w.save(tmp_path / "pipe" / "vae" / "diffusion_pytorch_model.safetensors", "bf16")
    w.free()
    with caplog.at_level(logging.INFO, logger="wan22vae"):
        dec = wan22vae.Decoder.from_pretrained(tmp_path / "pipe", subfolder="vae")
    assert dec.is_cuda and any("device='auto': decoding on cuda:" in r.getMessage() for r in caplog.records)
    one = dec(z_bf16)
    within(one, ref)
    z2 = torch.cat([z_bf16, z_bf16.flip(2)])
    seen = []
    two = dec(z2, progress=lambda done, total: seen.append((done, total)))
    assert two.shape == (2,) + tuple(one.shape[1:]) and two.dtype == torch.bfloat16
    assert torch.equal(two[:1], one) and torch.equal(two[1:], dec(z_bf16.flip(2).contiguous()))
    assert seen and seen[-1] == (2 * T, 2 * T), seen
    f32 = wan22vae.Decoder.from_pretrained(tmp_path / "pipe", subfolder="vae", device="cuda", torch_dtype=torch.float32)
    v = f32(z2)
    assert v.dtype == torch.float32 and torch.equal(v, two.float())
    out = torch.full(two.shape, float("nan"), dtype=torch.float16, device=z2.device)
    assert dec(z2, out=out) is out and torch.equal(out, two.half())
    # stopped by the progress callable after its first pass
    z6 = torch.from_numpy(wan22vae.synthetic_latents(None, 5, 6, H, W)).to(z_bf16.device, torch.bfloat16)
    whole = dec(z6)
    calls = []

    def stop(done, total):
        calls.append(done)
        raise ValueError("stop here")
    with pytest.raises(ValueError, match="stop here"):
        dec(z6, progress=stop)
    assert calls == [2], calls
    torch.cuda.synchronize()
    assert torch.equal(dec(z6), whole)
    dec.close()
    f32.close()


CTRL_C_GPU = r"""
import os, signal, threading, time
import numpy as np
import wan22vae
dec = wan22vae.Decoder.synthetic(None, 0, device="cuda")
z = wan22vae.synthetic_latents(None, 1, 31, 44, 78)   # f121: about 2.4 s on an H200
small = wan22vae.synthetic_latents(None, 2, 2, 4, 6)
ref = dec(small)
sent = []
def interrupt():
    sent.append(time.monotonic())
    os.kill(os.getpid(), signal.SIGINT)
threading.Timer(0.5, interrupt).start()
t0 = time.monotonic()
try:
    dec(z)
    raise SystemExit("the decode ran to its end: Ctrl-C did not stop it")
except KeyboardInterrupt:
    t1 = time.monotonic()
print(f"raised {t1 - sent[0]:.3f} s after SIGINT, {t1 - t0:.3f} s after the start")
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
assert np.array_equal(dec(small), ref), "the decode after the stopped one differs"
print("ok")
"""


def test_ctrl_c_on_gpu():
    """SIGINT 0.5 s into a GPU decode of 121 frames (host latents): KeyboardInterrupt within 1 s, and the decoder
    decodes right afterwards. In a subprocess: the signal goes to that process only."""
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    got = subprocess.run([sys.executable, "-c", CTRL_C_GPU], capture_output=True, text=True, env=env, timeout=600)
    print(got.stdout)
    assert got.returncode == 0 and got.stdout.strip().endswith("ok"), (got.returncode, got.stdout, got.stderr[-4000:])
    took = float(got.stdout.split(" s after SIGINT")[0].split()[-1])
    assert took < 1.0, got.stdout  # issue 47: within a second (the decoder's stop flag, read between ops)


# ---- diffusers ----
def test_diffusers_enable_matches(vae16, z_bf16, ref):
    diffusers = pytest.importorskip("diffusers")
    with torch.no_grad():
        theirs = vae16.decode(z_bf16).sample
        assert wan22vae.diffusers.enable(vae16) is True
        got = vae16.decode(z_bf16)
        assert wan22vae.diffusers.status(vae16)["path"] == "kernel"
        assert isinstance(got, diffusers.models.autoencoders.vae.DecoderOutput)
        ours = got.sample
        assert ours.dtype == theirs.dtype == torch.bfloat16 and ours.shape == theirs.shape
        mx, rms = within(ours, ref)
        print(f"enable(): max|d| {mx:.4g}, rms {rms:.4g}; diffusers bf16: "
              f"{float((theirs.float() - ref[0]).abs().max()):.4g}")
        tup = vae16.decode(z_bf16, return_dict=False)
        assert isinstance(tup, tuple) and len(tup) == 1 and torch.equal(tup[0], ours)
        # a batch of two, one latent at a time; a non-contiguous batch
        z2 = torch.cat([z_bf16, z_bf16.flip(2)])
        batch = vae16.decode(z2).sample
        assert batch.shape[0] == 2 and torch.equal(batch[0], ours[0])
        assert torch.equal(batch[1], vae16.decode(z_bf16.flip(2).contiguous()).sample[0])
        nc = z2.transpose(3, 4).contiguous().transpose(3, 4)
        assert not nc.is_contiguous() and torch.equal(vae16.decode(nc).sample, batch)
        assert wan22vae.diffusers.status(vae16)["path"] == "kernel"
    wan22vae.diffusers.disable(vae16)
    assert "decode" not in vae16.__dict__


def _fallback(vae, z, expect, enable_ok, **enable_kwargs):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert wan22vae.diffusers.enable(vae, **enable_kwargs) is enable_ok
        with torch.no_grad():
            a = vae.decode(z).sample
            b = vae.decode(z).sample
    st = wan22vae.diffusers.status(vae)
    assert st["path"] == "diffusers" and expect in st["reason"], st
    said = [w for w in seen if "wan22vae" in str(w.message)]
    assert len(said) == 1 and expect in str(said[0].message), [str(w.message) for w in said]
    assert torch.equal(a, b)
    return a


def test_fallback_fp32_vae_opt_out(vae32, z_bf16, monkeypatch):
    """allow_fp32=False (or W22_ALLOW_FP32=0) keeps diffusers' own decode for a float32 VAE, as before issue 31."""
    with torch.no_grad():
        theirs = vae32.decode(z_bf16.float()).sample
    try:
        got = _fallback(vae32, z_bf16.float(), "torch.float32", False, allow_fp32=False)
        assert torch.equal(got, theirs) and "allow_fp32=False" in wan22vae.diffusers.status(vae32)["reason"]
        wan22vae.diffusers.disable(vae32)
        monkeypatch.setenv("W22_ALLOW_FP32", "0")
        got = _fallback(vae32, z_bf16.float(), "allow_fp32=False", False)
        assert torch.equal(got, theirs)
    finally:
        wan22vae.diffusers.disable(vae32)


@pytest.fixture(scope="module")
def kernel_bf16(vae32, z_bf16, device):
    """The kernel path's video for a bf16 VAE with the synthetic weights (the reference of the other dtypes)."""
    vae = _vae(vae32.state_dict(), torch.bfloat16, device)
    assert wan22vae.diffusers.enable(vae) is True
    with torch.no_grad():
        video = vae.decode(z_bf16).sample
    wan22vae.diffusers.disable(vae)
    del vae
    return video


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16", "float16"])
def test_diffusers_enable_dtypes(vae32, z_bf16, ref, device, kernel_bf16, dtype_name, caplog, monkeypatch):
    """A float32, bfloat16 or float16 AutoencoderKLWan (TI2V-5B, the synthetic weights) takes the kernel path: the
    weights converted once to bf16 (a second enable() converts nothing), the latents of the VAE's dtype, the video in
    the VAE's dtype, within the allowance of diffusers' float32 decode (TF32 off), the log line saying the arithmetic;
    compared with diffusers' own decode in the same dtype."""
    import logging
    dtype = getattr(torch, dtype_name)
    vae = vae32 if dtype == torch.float32 else _vae(vae32.state_dict(), dtype, device)
    z = z_bf16.to(dtype)
    assert torch.equal(z.to(torch.bfloat16), z_bf16)  # the same latents in every dtype
    conversions = []
    real = wan22vae.diffusers._our_weights
    monkeypatch.setattr(wan22vae.diffusers, "_our_weights", lambda v, cfg: conversions.append(1) or real(v, cfg))
    try:
        with torch.no_grad():
            theirs = vae.decode(z).sample
        with caplog.at_level(logging.INFO, logger="wan22vae"):
            assert wan22vae.diffusers.enable(vae) is True
        notes = [r.getMessage() for r in caplog.records if "runs on wan22vae's CUDA kernels" in r.getMessage()]
        assert len(notes) == 1, [r.getMessage() for r in caplog.records]
        for words in ("bf16 storage, fp32 accumulation", "within 3x diffusers' own bf16",
                      f"this torch.{dtype_name} VAE", f"returned in torch.{dtype_name}"):
            assert words in notes[0], (words, notes[0])
        assert "Winograd" in notes[0] or "W22_WINOGRAD=0" in notes[0], notes[0]
        with torch.no_grad():
            ours = vae.decode(z).sample
            assert wan22vae.diffusers.status(vae)["path"] == "kernel"
            assert ours.dtype == theirs.dtype == dtype and ours.shape == theirs.shape
            mx, rms = within(ours, ref)
            d_theirs = float((theirs.float() - ref[0]).abs().max())
            d_both = float((ours.float() - theirs.float()).abs().max())
            print(f"enable() on a {dtype_name} VAE: max|d| {mx:.4g}, rms {rms:.4g} against diffusers fp32 (allowed "
                  f"{ref[1]:.4g}, {ref[2]:.4g}); diffusers' own {dtype_name} decode {d_theirs:.4g}; ours - theirs "
                  f"{d_both:.4g}")
            if dtype == torch.float32:   # the bf16 kernels' video, converted: bit for bit
                assert torch.equal(ours.to(torch.bfloat16), kernel_bf16)
                within(ours, (theirs.float(), ref[1], ref[2]))  # diffusers' own float32 decode (TF32 as it is)
            elif dtype == torch.bfloat16:
                assert torch.equal(ours, kernel_bf16)
            # a batch of two in the VAE's dtype
            batch = vae.decode(torch.cat([z, z.flip(2)])).sample
            assert batch.dtype == dtype and torch.equal(batch[:1], ours)
            assert wan22vae.diffusers.enable(vae) is True and conversions == [1]  # unchanged weights: kept
            assert torch.equal(vae.decode(z).sample, ours)
    finally:
        wan22vae.diffusers.disable(vae)


def test_fallback_tiling(vae16, z_bf16):
    vae16.enable_tiling()
    with torch.no_grad():
        theirs = vae16.decode(z_bf16).sample
    got = _fallback(vae16, z_bf16, "tiling", True)
    assert torch.equal(got, theirs)
    vae16.disable_tiling()
    with torch.no_grad():
        vae16.decode(z_bf16)
    assert wan22vae.diffusers.status(vae16)["path"] == "kernel"


def test_fallback_weights_moved(vae16, z_bf16):
    with torch.no_grad():
        theirs = vae16.decode(z_bf16).sample
    wan22vae.diffusers.enable(vae16)
    keep = vae16.post_quant_conv.weight  # replaced after enable: the library's copy may no longer be the VAE's
    vae16.post_quant_conv.weight = torch.nn.Parameter(keep.detach().clone())
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with torch.no_grad():
            got = vae16.decode(z_bf16).sample
    st = wan22vae.diffusers.status(vae16)
    assert st["path"] == "diffusers" and "enable() again" in st["reason"], st
    assert torch.equal(got, theirs)


def test_fallback_latents_dtype(vae16, z_bf16):
    with torch.no_grad():
        with pytest.raises(RuntimeError) as theirs:
            vae16.decode(z_bf16.float())
        wan22vae.diffusers.enable(vae16)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            with pytest.raises(RuntimeError) as ours:
                vae16.decode(z_bf16.float())
    assert type(ours.value) is type(theirs.value) and not isinstance(ours.value, wan22vae.Error)
    st = wan22vae.diffusers.status(vae16)
    assert st["path"] == "diffusers" and "torch.float32" in st["reason"], st


def test_fallback_wrong_config(device):
    diffusers = pytest.importorskip("diffusers")
    small = dict(TI2V, base_dim=16, decoder_base_dim=16, z_dim=4)
    with torch.device(device):
        vae = diffusers.AutoencoderKLWan(**small).to(torch.bfloat16).eval()
    z = torch.randn(1, 4, 2, 4, 6, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        theirs = vae.decode(z).sample
    got = _fallback(vae, z, "config", False)
    st = wan22vae.diffusers.status(vae)
    assert "decoder_base_dim 16" in st["reason"] and "z_dim 4" in st["reason"]
    assert torch.equal(got, theirs)
    wan22vae.diffusers.disable(vae)


# ---- frames ----
def test_to_uint8_frames_matches_diffusers(weights_bf16, z_bf16, ref):
    video_processor = pytest.importorskip("diffusers.video_processor")
    wan22vae.prepare(weights_bf16, 0, 1, None)
    video = torch.empty(ref[0].shape, dtype=torch.bfloat16, device=z_bf16.device)
    wan22vae.run(z_bf16, weights_bf16, 0, 1, None, video)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        frames = wan22vae.to_uint8_frames(video)
    d2h = [e for e in prof.events() if e.device_type.name == "CUDA" and "DtoH" in e.name]
    assert len(d2h) == 1, [e.name for e in d2h]
    assert frames.shape == (5, 64, 96, 3) and frames.dtype == np.uint8
    pil = video_processor.VideoProcessor(vae_scale_factor=16).postprocess_video(video, output_type="pil")[0]
    theirs = np.stack([np.asarray(im) for im in pil])
    assert np.array_equal(frames, theirs), f"{int((frames != theirs).sum())} of {frames.size} values differ"


# ---- Decoder.frames on the GPU (issue 30, point 3) ----
@pytest.fixture(scope="module")
def frames_dec(device):
    dec = wan22vae.Decoder.synthetic(None, SEED_W, device=device)
    yield dec
    dec.close()


def _frames_threads():
    return [t for t in threading.enumerate() if t.name == "wan22vae-frames"]


def test_frames_on_gpu_put_together_are_the_video(frames_dec, z_bf16):
    video = frames_dec(z_bf16)  # [1, 3, 5, 64, 96] bf16
    got = list(frames_dec.frames(z_bf16))
    assert [f0 for f0, _ in got] == [int(v) for v in np.cumsum([0] + [x.shape[1] for _, x in got[:-1]])]
    for _, x in got:
        assert x.is_cuda and x.device == z_bf16.device and x.dtype == torch.bfloat16 and x.is_contiguous()
        assert x.shape[0] == 3 and tuple(x.shape[2:]) == (64, 96)
    assert torch.equal(torch.cat([x for _, x in got], dim=1), video[0])
    # uint8 [n, H, W, 3] on the GPU, in batches of 2: to_uint8_frames of the whole video
    u8 = list(frames_dec.frames(z_bf16[0], dtype="uint8", batch=2))  # 4-dim latents too
    assert [(f0, tuple(x.shape)) for f0, x in u8] == [(0, (2, 64, 96, 3)), (2, (2, 64, 96, 3)), (4, (1, 64, 96, 3))]
    assert all(x.is_cuda and x.dtype == torch.uint8 and x.is_contiguous() for _, x in u8)
    assert np.array_equal(torch.cat([x for _, x in u8]).cpu().numpy(), wan22vae.to_uint8_frames(video))
    f32 = torch.cat([x for _, x in frames_dec.frames(z_bf16, dtype=torch.float32)], dim=1)
    assert f32.dtype == torch.float32 and torch.equal(f32, video[0].float())
    # host latents on the CUDA decoder: host frames through w22_decode_frames, as dec(host latents)
    zh = z_bf16.float().cpu().numpy()
    host = list(frames_dec.frames(zh))
    assert all(isinstance(x, np.ndarray) and x.dtype == np.float32 for _, x in host)
    assert np.array_equal(np.concatenate([x for _, x in host], axis=1), frames_dec(zh)[0])
    assert not _frames_threads() and not frames_dec.lock().locked()


def test_frames_on_gpu_callers_stream(frames_dec, z_bf16):
    """Latents made on a stream of the caller's, frames() on that stream (the decode queues after the latents and
    the conversions run there): the same bits as the default stream's decode."""
    video = frames_dec(z_bf16)
    s = torch.cuda.Stream(z_bf16.device)
    with torch.cuda.stream(s):
        z = z_bf16 * 1  # queued on s: the decode must wait for it
        u8 = torch.cat([x for _, x in frames_dec.frames(z, dtype="uint8")])
        bf = torch.cat([x for _, x in frames_dec.frames(z)], dim=1)
    s.synchronize()
    assert torch.equal(bf, video[0])
    assert np.array_equal(u8.cpu().numpy(), wan22vae.to_uint8_frames(video))


def test_frames_on_gpu_stop_and_errors(frames_dec, device, monkeypatch):
    z = torch.from_numpy(wan22vae.synthetic_latents(None, 5, 8, H, W)).to(device, torch.bfloat16)  # 29 frames
    whole = frames_dec(z)
    it = frames_dec.frames(z, depth=1)
    f0, x = next(it)
    assert f0 == 0 and _frames_threads(), "the decode ended before the first batch was read"
    it.close()
    assert not _frames_threads() and not frames_dec.lock().locked()
    for f0, x in frames_dec.frames(z):
        break
    assert not _frames_threads() and not frames_dec.lock().locked()
    torch.cuda.synchronize()
    assert torch.equal(frames_dec(z), whole)  # usable afterwards, the same bits

    # an exception of the GPU conversion is raised in the reader, and the decode stops
    def boom(*args):
        raise RuntimeError("conversion failed")
    monkeypatch.setattr(wan22vae.decoder, "torch_convert", boom)
    with pytest.raises(RuntimeError, match="conversion failed"):
        list(frames_dec.frames(z, dtype="uint8"))
    monkeypatch.undo()
    assert not _frames_threads() and not frames_dec.lock().locked()
    assert torch.equal(torch.cat([x for _, x in frames_dec.frames(z)], dim=1), whole[0])
    # CUDA latents on a CPU decoder: refused at the call
    cpu = wan22vae.Decoder.synthetic({"z_dim": 48, "base_dim": 8}, 0, device="cpu")
    with pytest.raises(wan22vae.Error) as e:
        cpu.frames(z)
    assert e.value.status == "W22_ERR_UNSUPPORTED"
    cpu.close()


def test_decode_device_frames_c_contract(frames_dec, z_bf16):
    """w22_decode_device_frames itself: frames [3, n, H, W] bf16 of frames [frame0, frame0 + n), in order, readable
    in the callback on any stream (the decode's stream is synchronized up to them); nonzero stops the decode; a NULL
    callback is refused."""
    from wan22vae import _lib
    L = _lib.lib()
    video = frames_dec(z_bf16)
    seen = []
    other = torch.cuda.Stream(z_bf16.device)

    def on(user, ptr, frame0, n, height, width):
        with torch.cuda.stream(other):  # another stream: only the synchronization makes the frames readable here
            x = torch.as_tensor(wan22vae._stream.CudaArray(ptr, (3, n, height, width)), device=z_bf16.device)
            seen.append((frame0, n, height, width, x.view(torch.bfloat16).clone()))
        other.synchronize()
        return 0
    fn = _lib.DEVICE_FRAMES_FN(on)
    stream = torch.cuda.current_stream(z_bf16.device)
    with frames_dec.lock():
        status = L.w22_decode_device_frames(frames_dec.handle, z_bf16.data_ptr(), T, H, W, fn, None,
                                            stream.cuda_stream)
        message = L.w22_last_error().decode()
    assert status == 0, message
    assert [s[0] for s in seen] == [int(v) for v in np.cumsum([0] + [s[1] for s in seen[:-1]])]
    assert all(s[2:4] == (64, 96) for s in seen) and sum(s[1] for s in seen) == 5
    assert torch.equal(torch.cat([s[4] for s in seen], dim=1), video[0])
    calls = []
    stop = _lib.DEVICE_FRAMES_FN(lambda *a: calls.append(a[2]) or 1)
    with frames_dec.lock():
        status = L.w22_decode_device_frames(frames_dec.handle, z_bf16.data_ptr(), T, H, W, stop, None,
                                            stream.cuda_stream)
        message = L.w22_last_error().decode()
        assert _lib.status_name(status) == "W22_ERR_INVALID_ARG" and "stopped by the caller" in message, message
        assert calls == [0], calls
        status = L.w22_decode_device_frames(frames_dec.handle, z_bf16.data_ptr(), T, H, W, _lib.DEVICE_FRAMES_FN(),
                                            None, stream.cuda_stream)
        message = L.w22_last_error().decode()
        assert _lib.status_name(status) == "W22_ERR_INVALID_ARG" and "frames callback" in message, message
    torch.cuda.synchronize()
    assert torch.equal(frames_dec(z_bf16), video)


# ---- the Wan2.1 VAE (issue 44): Wan2.1, Wan2.2 A14B, Qwen-Image ----
# diffusers' AutoencoderKLWan defaults (is_residual False, no patchify, 8x); latents [1, 16, 2, 6, 10] -> video
# [1, 3, 5, 48, 80]
WAN21 = dict(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, temperal_downsample=[False, True, True],
             is_residual=False)
T21, H21, W21 = 2, 6, 10


@pytest.fixture(scope="module")
def wan21_state():
    """The library's synthetic Wan2.1 weights as float32 torch CPU tensors, in diffusers' order."""
    w = wan22vae.synthetic_weights(wan22vae.wan21_config(), SEED_W)
    try:
        return w.state_dict("f32")
    finally:
        w.free()


def _vae21(state, dtype, device):
    diffusers = pytest.importorskip("diffusers")
    with torch.device(device):
        vae = diffusers.AutoencoderKLWan(**WAN21)
    missing, unexpected = vae.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith(("encoder.", "quant_conv.")) for k in missing)
    return vae.to(device, dtype).eval()


@pytest.fixture(scope="module")
def wan21_z(device):
    z = wan22vae.synthetic_latents(wan22vae.wan21_config(), SEED_Z, T21, H21, W21)
    return torch.from_numpy(z).to(device, torch.bfloat16)


@pytest.fixture(scope="module")
def wan21_ref(wan21_state, wan21_z, device):
    """diffusers' fp32 decode (TF32 off) of the Wan2.1 latents and its own bf16 decode's error: (ref, max, rms)."""
    vae = _vae21(wan21_state, torch.float32, device)
    tf = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.no_grad():
            r = vae.decode(wan21_z.float()).sample
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf
    vae = vae.to(torch.bfloat16)
    with torch.no_grad():
        b = vae.decode(wan21_z).sample
    del vae
    d = b.float() - r
    assert r.shape == (1, 3, 4 * T21 - 3, 8 * H21, 8 * W21)
    return r, min(2.0, 3 * float(d.abs().max())), 3 * float(d.square().mean().sqrt())


def test_wan21_decoder_matches_diffusers(wan21_z, wan21_ref, device):
    """The library's CUDA decode of the Wan2.1 VAE (synthetic weights) within 3x diffusers' bf16 error of its fp32
    decode; frames per pass do not change it beyond bf16 noise; exact=True (every conv direct, where the default runs
    the 384-channel convs as Winograd) within it too."""
    w = wan22vae.synthetic_weights(wan22vae.wan21_config(), SEED_W)
    try:
        with wan22vae.Decoder(w, device=device) as d:
            video = d(wan21_z)
        with wan22vae.Decoder(w, device=device, frames_per_pass=1, exact=True) as d:
            one = d(wan21_z)
    finally:
        w.free()
    assert video.dtype == torch.bfloat16 and video.shape == wan21_ref[0].shape
    mx, rms = within(video, wan21_ref)
    print(f"wan2.1 Decoder: max|d| {mx:.4g}, rms {rms:.4g} (allowed {wan21_ref[1]:.4g}, {wan21_ref[2]:.4g})")
    within(one, wan21_ref)


def test_wan21_from_pretrained_folder(tmp_path, wan21_state, wan21_z, wan21_ref, device):
    """Decoder.from_pretrained on a Wan2.1 diffusers VAE folder (save_pretrained: config.json with is_residual
    False, patch_size None) recognises the model and decodes it."""
    vae = _vae21(wan21_state, torch.bfloat16, "cpu")
    vae.save_pretrained(tmp_path / "vae")
    del vae
    dec = wan22vae.Decoder.from_pretrained(tmp_path, subfolder="vae", device=device)
    assert dec.config["is_residual"] == 0 and dec.config["z_dim"] == 16, dec.config
    within(dec(wan21_z), wan21_ref)
    dec.close()


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16", "float16"])
def test_wan21_diffusers_enable(wan21_state, wan21_z, wan21_ref, device, dtype_name):
    """enable() takes a Wan2.1 AutoencoderKLWan in float32, bfloat16 and float16 (no fallback), the video in its
    dtype within the allowance."""
    dtype = getattr(torch, dtype_name)
    vae = _vae21(wan21_state, dtype, device)
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert wan22vae.diffusers.enable(vae) is True, wan22vae.diffusers.status(vae)
            with torch.no_grad():
                out = vae.decode(wan21_z.to(dtype)).sample
        assert not [w for w in seen if "wan22vae" in str(w.message)], [str(w.message) for w in seen]
        assert wan22vae.diffusers.status(vae)["path"] == "kernel"
        assert out.dtype == dtype
        mx, rms = within(out, wan21_ref)
        print(f"wan2.1 enable() {dtype_name}: max|d| {mx:.4g}, rms {rms:.4g}")
    finally:
        wan22vae.diffusers.disable(vae)
