"""CPU tests of the wan22vae package (CI: numpy + pytest, no torch, no GPU). A narrow config (z_dim 4,
base_dim 8) keeps every decode at milliseconds; the library is $W22_LIB or the package's own lookup."""
import ctypes
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest

import wan22vae
from wan22vae import _lib

NARROW = {"z_dim": 4, "base_dim": 8}
PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def weights():
    w = wan22vae.synthetic_weights(NARROW, seed=7)
    yield w
    w.free()


@pytest.fixture(scope="module")
def cpu_decoder(weights):
    d = wan22vae.Decoder(weights, device="cpu", threads=2)
    yield d
    d.close()


@pytest.fixture(scope="module")
def latents():
    return wan22vae.synthetic_latents(NARROW, seed=3, T=2, h=3, w=4)


def write_safetensors(path, tensors):
    """A minimal safetensors writer: {name: numpy array (float32/float16) or (uint16 raw bf16 array)}."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        dt = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.uint16): "BF16"}[arr.dtype]
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# ---- import and availability ----
def test_import_needs_no_torch():
    code = ("import sys; sys.modules['torch'] = None\n"  # any import of torch would now fail
            "import wan22vae, wan22vae.diffusers, wan22vae.protocol, wan22vae.frames\n"
            "assert wan22vae.Error.__mro__[1] is RuntimeError\n"
            "print('ok')")
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert got.returncode == 0 and got.stdout.strip() == "ok", got.stderr


def test_library_found():
    assert os.path.isfile(wan22vae.library_path())
    if os.environ.get("W22_LIB"):
        assert os.path.samefile(wan22vae.library_path(), os.environ["W22_LIB"])


@pytest.mark.skipif(wan22vae.cuda_available(), reason="a usable GPU is here")
def test_cuda_unavailable_says_why(weights):
    assert wan22vae.cuda_available() is False
    reason = wan22vae.cuda_unavailable_reason()
    assert reason and reason.startswith("W22_ERR_UNSUPPORTED"), reason
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.Decoder(weights, device="cuda")
    assert e.value.status == "W22_ERR_UNSUPPORTED"
    assert "no usable CUDA GPU" in e.value.message or "sm_" in e.value.message, e.value.message
    assert isinstance(e.value, RuntimeError)


# ---- configs and the weight table ----
def test_default_config_and_table():
    cfg = wan22vae.default_config()
    assert cfg == {"z_dim": 48, "base_dim": 256, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
                   "temporal_up": [1, 1, 0], "out_channels": 12, "patch_size": 2, "is_residual": 1}
    table = wan22vae.weight_table()
    assert len(table) == 110
    assert table[0] == ("post_quant_conv.weight", (48, 48, 1, 1, 1))
    assert table[4] == ("decoder.mid_block.attentions.0.norm.gamma", (1024, 1, 1))
    assert table[-3] == ("decoder.norm_out.gamma", (256, 1, 1, 1))
    assert table[-1] == ("decoder.conv_out.bias", (12,))
    assert wan22vae.video_shape(None, 31, 44, 78) == (121, 704, 1248)


def test_config_from_diffusers():
    ti2v = {"base_dim": 160, "decoder_base_dim": 256, "z_dim": 48, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
            "attn_scales": [], "temperal_downsample": [False, True, True], "is_residual": True, "in_channels": 12,
            "out_channels": 12, "patch_size": 2}
    assert wan22vae.config_from_diffusers(ti2v) == wan22vae.default_config()
    # the Wan2.1 VAE: diffusers' defaults (is_residual False, patch_size None), as its folders' config.json says
    wan21 = {"base_dim": 96, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_scales": [],
             "temperal_downsample": [False, True, True], "is_residual": False, "patch_size": None}
    assert wan22vae.config_from_diffusers(wan21) == wan22vae.wan21_config()
    assert wan22vae.config_from_diffusers({"temperal_downsample": [False, True, True]}) == wan22vae.wan21_config()
    assert wan22vae.model_name(wan22vae.wan21_config()) == "Wan2.1"
    assert wan22vae.video_shape(wan22vae.wan21_config(), 21, 60, 104) == (81, 480, 832)
    with pytest.raises(wan22vae.Error, match="attn_scales"):
        wan22vae.config_from_diffusers(dict(wan21, attn_scales=[0.5]))


def test_wan21_weight_table_and_synthetic_decode():
    """The Wan2.1 VAE's table: diffusers' names (upsamplers.0, the convs that halve the channels, one shortcut), and a
    narrow config of its structure (is_residual 0 from a partial dict) decodes to [1, 3, 4T-3, 8h, 8w]."""
    table = wan22vae.weight_table(wan22vae.wan21_config())
    names = dict(table)
    assert table[0] == ("post_quant_conv.weight", (16, 16, 1, 1, 1))
    assert names["decoder.up_blocks.0.upsamplers.0.resample.1.weight"] == (192, 384, 3, 3)
    assert names["decoder.up_blocks.0.upsamplers.0.time_conv.weight"] == (768, 384, 3, 1, 1)
    assert names["decoder.up_blocks.1.resnets.0.conv_shortcut.weight"] == (384, 192, 1, 1, 1)
    assert names["decoder.up_blocks.2.upsamplers.0.resample.1.weight"] == (96, 192, 3, 3)
    assert table[-1] == ("decoder.conv_out.bias", (3,))
    assert not any("avg_shortcut" in n or ".upsampler." in n for n in names)
    cfg = {"z_dim": 4, "base_dim": 8, "is_residual": 0}
    w = wan22vae.synthetic_weights(cfg, seed=1)
    z = wan22vae.synthetic_latents(cfg, seed=2, T=2, h=3, w=4)
    dec = wan22vae.Decoder(w, device="cpu")
    v = dec(z)
    assert v.shape == (1, 3, 5, 24, 32) and np.isfinite(v).all() and np.abs(v).max() <= 1


def test_bad_config_message_from_c():
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.synthetic_weights({"z_dim": 4, "base_dim": 8, "patch_size": 3})
    assert e.value.status == "W22_ERR_INVALID_ARG" and "patch_size 3" in e.value.message


# ---- decoding on the CPU ----
def test_decode_matches_direct_c_call(cpu_decoder, latents):
    """The package's decode against the C API called here through ctypes without the package."""
    video = cpu_decoder(latents)
    assert video.shape == (1, 3, 5, 48, 64) and video.dtype == np.float32
    L = ctypes.CDLL(wan22vae.library_path())
    cfg = _lib.Config()
    L.w22_config_default(ctypes.byref(cfg))
    cfg.z_dim, cfg.base_dim = 4, 8
    w, d = ctypes.c_void_p(), ctypes.c_void_p()
    assert L.w22_weights_synthetic(ctypes.byref(cfg), ctypes.c_uint64(7), ctypes.byref(w)) == 0
    assert L.w22_decoder_open(w, None, ctypes.byref(d)) == 0
    ref = np.full(video.shape, np.nan, np.float32)
    z = np.ascontiguousarray(latents)
    assert L.w22_decode(d, ctypes.c_void_p(z.ctypes.data), 0, 2, 3, 4, ctypes.c_void_p(ref.ctypes.data), 0) == 0
    L.w22_decoder_free(d)
    L.w22_weights_free(w)
    assert np.isfinite(video).all() and np.abs(video).max() <= 1
    np.testing.assert_allclose(video, ref, rtol=0, atol=1e-6)


def test_exact_parameter(weights, latents):
    """exact= reaches the library (w22_decoder_params.exact): the CPU backend is exact either way, so the same video;
    a value other than 0 or 1 through the C struct is refused with the library's message."""
    a = wan22vae.Decoder(weights, device="cpu")(latents)
    with wan22vae.Decoder(weights, device="cpu", exact=True) as d:
        assert d.exact is True
        np.testing.assert_array_equal(d(latents), a)
    L = ctypes.CDLL(wan22vae.library_path())
    p = _lib.DecoderParams()
    L.w22_decoder_params_init(ctypes.byref(p))
    assert p.exact == 0
    p.exact = 2
    h = ctypes.c_void_p()
    L.w22_last_error.restype = ctypes.c_char_p
    assert L.w22_decoder_open(weights.handle, ctypes.byref(p), ctypes.byref(h)) != 0
    assert b"exact 2" in L.w22_last_error()


def test_memory_budget(weights, latents):
    """memory_budget= reaches the library (w22_decoder_params.work_budget_bytes): a budget the default plan fits and
    the smallest plan's own need (every causal cache in host memory), read from the failure of a budget below it,
    give the default's video bit for bit; under 64 MiB the open fails; bad spellings raise before the library."""
    ref = wan22vae.Decoder(weights, device="cpu", threads=2)(latents)
    with wan22vae.Decoder(weights, device="cpu", threads=2, memory_budget="2.5G") as d:
        assert d.memory_budget == 5 << 29
        np.testing.assert_array_equal(d(latents), ref)
    with wan22vae.Decoder(weights, device="cpu", threads=2, memory_budget="64M") as d:
        with pytest.raises(wan22vae.Error) as e:
            d(latents)
    assert e.value.status == "W22_ERR_INVALID_ARG" and "(67108864 bytes)" in e.value.message
    m = re.search(r"needs for latents \d+x\d+: [0-9.]+ GiB \((\d+) bytes;", e.value.message)
    assert m, e.value.message
    need = int(m.group(1))
    assert need > 64 << 20
    with wan22vae.Decoder(weights, device="cpu", threads=2, memory_budget=need) as d:
        np.testing.assert_array_equal(d(latents), ref)
        np.testing.assert_array_equal(d(latents), ref)  # twice: the hosted caches start from zero each time
    with pytest.raises(wan22vae.Error, match="work_budget_bytes"):
        wan22vae.Decoder(weights, device="cpu", memory_budget="63M")
    for bad in ("abc", "-1", -1, "2.5X", "2P", True, 2.5):
        with pytest.raises(wan22vae.Error, match="memory_budget"):
            wan22vae.Decoder(weights, device="cpu", memory_budget=bad)


def test_bands(tmp_path):
    """bands= reaches the library (w22_decoder_params.bands): the Wan2.1 VAE's latents of 16 rows, so that two bands
    of 8 kept rows each compute 14 (W22_BAND_HALO 6), not the whole frame; the video within float32 rounding of the
    whole frame's (the CPU backend), its shape and values a video's; from_pretrained passes it on; a count outside
    0..64 is the library's W22_ERR_INVALID_ARG naming bands, one that is no integer raises before the library."""
    cfg = {"z_dim": 4, "base_dim": 8, "is_residual": 0}
    w = wan22vae.synthetic_weights(cfg, seed=1)
    try:
        z = wan22vae.synthetic_latents(cfg, seed=2, T=2, h=16, w=4)
        with wan22vae.Decoder(w, device="cpu", threads=2) as d:
            assert d.bands == 0
            ref = d(z)
        with wan22vae.Decoder(w, device="cpu", threads=2, bands=2) as d:
            assert d.bands == 2
            v = d(z)
            np.testing.assert_array_equal(d(z), v)  # every band's caches start from zero each decode
            # a band decode ran: frames would come out a band's rows at a time, so streaming is refused, and the
            # decoder decodes again after
            with pytest.raises(wan22vae.Error, match="band decode") as e:
                for _ in d.frames(z):
                    pass
            assert e.value.status == "W22_ERR_UNSUPPORTED"
            np.testing.assert_array_equal(d(z), v)
        assert v.shape == ref.shape == (1, 3, 5, 128, 32) and v.dtype == np.float32
        assert np.isfinite(v).all() and np.abs(v).max() <= 1 and np.abs(v).max() > 0
        np.testing.assert_allclose(v, ref, rtol=0, atol=1e-4)
        f32 = tmp_path / "w21.safetensors"
        w.save(f32, "f32")
        with wan22vae.Decoder.from_pretrained(f32, device="cpu", threads=2, bands=2) as d:
            assert d.bands == 2
            np.testing.assert_allclose(d(z), ref, rtol=0, atol=1e-4)
        for bad in (-1, 65, -2**31):
            with pytest.raises(wan22vae.Error, match=rf"bands {bad}, expected 0 or 1 \(the whole frame\) or 2..64") as e:
                wan22vae.Decoder(w, device="cpu", bands=bad)
            assert e.value.status == "W22_ERR_INVALID_ARG"
        for bad in (True, "2", 2.5, 2**31, None):
            with pytest.raises(wan22vae.Error, match="bands"):
                wan22vae.Decoder(w, device="cpu", bands=bad)
    finally:
        w.free()


def test_decode_matches_cli(tmp_path, latents):
    cli = os.path.join(os.path.dirname(wan22vae.library_path()), "wan22vae")
    if not os.access(cli, os.X_OK):
        pytest.skip(f"no CLI next to the library ({cli})")
    wpath, zpath, vpath = tmp_path / "w.safetensors", tmp_path / "z.npy", tmp_path / "v.npy"
    subprocess.run([cli, "synth", "weights", "--out", str(wpath), "--seed", "7", "--dtype", "f32", "--z-dim", "4",
                    "--base-dim", "8"], check=True, capture_output=True)
    np.save(zpath, latents)
    subprocess.run([cli, "decode", "--weights", str(wpath), "--latents", str(zpath), "--out", str(vpath),
                    "--threads", "2"], check=True, capture_output=True)
    ref = np.load(vpath)
    dec = wan22vae.Decoder.from_pretrained(wpath, device="cpu", threads=2)
    np.testing.assert_allclose(dec(latents), ref.reshape(1, 3, 5, 48, 64), rtol=0, atol=1e-6)


def test_decode_4d_and_float16_and_out(cpu_decoder, latents):
    full = cpu_decoder(latents)
    four = cpu_decoder(latents[0])
    assert four.shape == full.shape[1:]
    np.testing.assert_array_equal(four, full[0])
    out = np.full(full.shape, np.nan, np.float16)
    got = cpu_decoder(latents.astype(np.float16), out=out)
    assert got is out and np.isfinite(out).all()
    # float16 latents differ from float32 ones by their rounding only
    assert np.abs(out.astype(np.float32) - full).max() < 0.05


def test_nan_poisoned_out_is_fully_written(cpu_decoder, latents):
    out = np.full((1, 3, 5, 48, 64), np.nan, np.float32)
    cpu_decoder(latents, out=out)
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out, cpu_decoder(latents))


def test_deterministic_across_calls(cpu_decoder, latents):
    a = cpu_decoder(latents)
    cpu_decoder(wan22vae.synthetic_latents(NARROW, seed=9, T=3, h=2, w=5))  # another shape between
    np.testing.assert_array_equal(a, cpu_decoder(latents))


# ---- errors surface with the C library's message ----
def test_error_nan_latents(cpu_decoder, latents):
    z = latents.copy()
    z[0, 1, 1, 2, 3] = np.nan
    with pytest.raises(wan22vae.Error) as e:
        cpu_decoder(z)
    assert e.value.status == "W22_ERR_NONFINITE"
    assert "NaN" in e.value.message and "47" in e.value.message  # the element's flat index


def test_error_bad_shape_from_c(cpu_decoder):
    with pytest.raises(wan22vae.Error) as e:
        cpu_decoder(np.zeros((1, 4, 1, 0, 3), np.float32))
    assert e.value.status == "W22_ERR_BAD_SHAPE" and "must be positive" in e.value.message


def test_error_bad_shape_z_dim(cpu_decoder):
    with pytest.raises(wan22vae.Error) as e:
        cpu_decoder(np.zeros((1, 5, 1, 2, 3), np.float32))
    assert e.value.status == "W22_ERR_BAD_SHAPE" and "[B, 4, T, h, w]" in e.value.message


class _Spy:
    """Stands in for the loaded library: records the name of every C function the package looks up."""

    def __init__(self, real):
        self.real, self.calls = real, []

    def __getattr__(self, name):
        self.calls.append(name)
        return getattr(self.real, name)


@pytest.fixture
def spy(monkeypatch):
    s = _Spy(_lib.lib())
    monkeypatch.setattr(_lib, "_lib", s)
    return s


def test_error_T0_is_wan22vae_error(cpu_decoder, spy):
    """T = 0 (a video of 4T-3 < 0 frames) is wan22vae.Error (and a ValueError), found before the library is called."""
    for z in (np.zeros((1, 4, 0, 2, 3), np.float32), np.zeros((4, 0, 2, 3), np.float16)):
        with pytest.raises(wan22vae.Error) as e:
            cpu_decoder(z)
        assert e.value.status == "W22_ERR_BAD_SHAPE" and isinstance(e.value, ValueError)
        assert "[1, 4, 0, 2, 3]" in e.value.message and "must be positive" in e.value.message
    for call in (lambda: cpu_decoder.video_shape(0, 2, 3), lambda: wan22vae.video_shape(NARROW, 0, 2, 3),
                 lambda: wan22vae.synthetic_latents(NARROW, T=-1), lambda: wan22vae.video_shape(NARROW, 1.5, 2, 3)):
        with pytest.raises(wan22vae.Error, match="W22_ERR_BAD_SHAPE"):
            call()
    assert not [c for c in spy.calls if c in ("w22_decode", "w22_video_shape", "w22_latents_synthetic")], spy.calls


def test_error_huge_h_fails_before_allocation(cpu_decoder, spy):
    """h = 2**27 (a video 2**31 rows high): wan22vae.Error naming the size and the limit, before the latents are
    copied, the video allocated or any C function sees the size."""
    import tracemalloc
    z = np.broadcast_to(np.zeros((), np.float32), (1, 4, 1, 2**27, 1))  # no memory behind it: 2 GiB if copied
    tracemalloc.start()
    try:
        with pytest.raises(wan22vae.Error) as e:
            cpu_decoder(z)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.status == "W22_ERR_BAD_SHAPE" and isinstance(e.value, ValueError)
    assert str(2**27) in e.value.message and "h, w <= 4096" in e.value.message, e.value.message
    assert peak < 16 << 20, f"{peak} bytes allocated before the error"
    with pytest.raises(wan22vae.Error, match="4096"):
        cpu_decoder.video_shape(1, 2**27, 1)  # the C function would wrap 16 * 2**27 to a negative int
    with pytest.raises(wan22vae.Error, match="100000"):
        wan22vae.synthetic_latents(NARROW, T=2**40)
    assert not [c for c in spy.calls if c.startswith(("w22_decode", "w22_video", "w22_latents"))], spy.calls


def test_error_bad_latent_dtype_and_args(cpu_decoder, weights):
    for z in (np.full((1, 4, 1, 2, 3), "x"), [[1, 2], [3]], np.zeros((1, 4, 1, 2, 3), np.complex64)):
        with pytest.raises(wan22vae.Error) as e:
            cpu_decoder(z)
        assert e.value.status in ("W22_ERR_BAD_DTYPE", "W22_ERR_BAD_SHAPE"), e.value
    for kw in ({"device": "cuda:x"}, {"device": "cpu", "threads": "two"}, {"device": "gpu"}):
        with pytest.raises(wan22vae.Error, match="W22_ERR_INVALID_ARG"):
            wan22vae.Decoder(weights, **kw)
    for cfg in ({"z_dim": "four"}, {"dim_mult": 4}, [1, 2]):
        with pytest.raises(wan22vae.Error, match="config"):
            wan22vae.synthetic_weights(cfg)


def test_error_bad_out(cpu_decoder, latents):
    """Each way an out array can fail is refused before the decode, and the message names that way."""
    shape = (1, 3, 5, 48, 64)
    with pytest.raises(wan22vae.Error, match=r"W22_ERR_BAD_SHAPE.*\[1, 3, 4, 48, 64\] float32;"):
        cpu_decoder(latents, out=np.empty((1, 3, 4, 48, 64), np.float32))
    ro = np.full(shape, np.nan, np.float32)
    ro.setflags(write=False)
    cases = [(np.empty(shape, np.float64), "W22_ERR_BAD_DTYPE", " float64;"),
             (np.empty(shape, ">f4"), "W22_ERR_BAD_DTYPE", " >f4;"),
             (ro, "W22_ERR_INVALID_ARG", " read-only;"),
             (np.empty(shape[:-1] + (128,), np.float32)[..., ::2], "W22_ERR_INVALID_ARG", " not C-contiguous;"),
             (np.empty(shape, np.float32, order="F"), "W22_ERR_INVALID_ARG", " not C-contiguous;"),
             ([0.0] * 4, "W22_ERR_BAD_SHAPE", "out is list ")]
    for out, code, words in cases:
        with pytest.raises(wan22vae.Error, match=code) as e:
            cpu_decoder(latents, out=out)
        assert words in str(e.value), str(e.value)
    assert np.isnan(ro).all()  # nothing was written through the refusal
    good = np.full(shape, np.nan, np.float32)  # and the decoder is still right after them
    assert cpu_decoder(latents, out=good) is good and np.isfinite(good).all()


# ---- weights from files, folders, shards, memory ----
def test_from_pretrained_file_and_folders(tmp_path, weights, latents):
    ref = wan22vae.Decoder(weights, device="cpu", threads=2)(latents)
    f32 = tmp_path / "w32.safetensors"
    weights.save(f32, "f32")
    np.testing.assert_array_equal(wan22vae.Decoder.from_pretrained(f32, device="cpu", threads=2)(latents), ref)
    # a diffusers pipeline folder: <root>/vae/{config.json, diffusion_pytorch_model.safetensors}, bf16
    vae = tmp_path / "pipe" / "vae"
    vae.mkdir(parents=True)
    weights.save(vae / "diffusion_pytorch_model.safetensors", "bf16")
    (vae / "config.json").write_text(json.dumps({
        "_class_name": "AutoencoderKLWan", "base_dim": 160, "decoder_base_dim": 8, "z_dim": 4,
        "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_scales": [], "temperal_downsample": [False, True, True],
        "is_residual": True, "in_channels": 12, "out_channels": 12, "patch_size": 2}))
    bf = wan22vae.Decoder.from_pretrained(tmp_path / "pipe", device="cpu", threads=2)(latents)
    assert np.abs(bf - ref).max() < 0.1  # bf16 weights
    np.testing.assert_array_equal(wan22vae.Decoder.from_pretrained(vae, device="cpu", threads=2)(latents), bf)
    # the same bf16 weights in two shards with an index
    from wan22vae import _safetensors
    arrays = _safetensors.open_arrays(str(vae / "diffusion_pytorch_model.safetensors"))
    names = [n for n, _ in wan22vae.weight_table(NARROW)]
    shard = tmp_path / "sharded" / "vae"
    shard.mkdir(parents=True)
    halves = {"diffusion_pytorch_model-00001-of-00002.safetensors": names[:50],
              "diffusion_pytorch_model-00002-of-00002.safetensors": names[50:]}
    wmap = {}
    for fname, part in halves.items():
        write_safetensors(shard / fname, {n: np.array(arrays[n][0]) for n in part})
        wmap.update({n: fname for n in part})
    (shard / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    np.testing.assert_array_equal(wan22vae.Decoder.from_pretrained(shard, device="cpu", threads=2)(latents), bf)
    # a shard missing: the tensor is named
    os.remove(shard / "diffusion_pytorch_model-00002-of-00002.safetensors")
    write_safetensors(shard / "diffusion_pytorch_model-00002-of-00002.safetensors",
                      {n: np.array(arrays[n][0]) for n in names[51:]})
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.load_weights(shard)
    assert e.value.status == "W22_ERR_MISSING_TENSOR" and names[50] in e.value.message


def test_decoder_takes_a_path_and_checks_threads(tmp_path, weights, latents):
    """Decoder(path) loads the weights (a str was taken for a sequence of 12 one-letter "tensors"); threads outside
    0..4096 (the CLI's --threads range) is the library's W22_ERR_INVALID_ARG (10**9 was passed on to the products)."""
    ref = wan22vae.Decoder(weights, device="cpu", threads=2)(latents)
    weights.save(tmp_path / "w.safetensors", "f32")
    for p in (str(tmp_path / "w.safetensors"), tmp_path / "w.safetensors", os.fsencode(tmp_path / "w.safetensors")):
        np.testing.assert_array_equal(wan22vae.Decoder(p, device="cpu", threads=2)(latents), ref)
    with pytest.raises(wan22vae.Error, match="W22_ERR_IO.*no such file"):
        wan22vae.Decoder(str(tmp_path / "nothere"), device="cpu")
    for t in (-1, 4097, 10**9):
        with pytest.raises(wan22vae.Error,
                           match=r"W22_ERR_INVALID_ARG: threads -?\d+, expected 0 \(all cores\) or 1..4096"):
            wan22vae.Decoder(weights, device="cpu", threads=t)


def test_decoder_kernels_and_path(weights):
    """kernels= is CUDA's kernel path (issue 45): "auto" or "portable", anything else refused before the library is
    called; a CPU decoder takes either and says it runs on the CPU (Decoder.path)."""
    for k in ("auto", "portable"):
        d = wan22vae.Decoder(weights, device="cpu", threads=1, kernels=k)
        assert d.path == "cpu" and d.kernels == k
        d.close()
    for k in ("hopper", "", None, 1):
        with pytest.raises(wan22vae.Error, match=r"W22_ERR_INVALID_ARG: kernels=.*expected 'auto' or 'portable'"):
            wan22vae.Decoder(weights, device="cpu", kernels=k)


def test_from_pretrained_errors_from_c(tmp_path, weights):
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.load_weights(tmp_path / "nothing-here")
    assert e.value.status == "W22_ERR_IO"
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.load_weights(bad)
    assert e.value.status == "W22_ERR_FORMAT" and str(bad) in e.value.message
    # a file of the wrong config: the C loader names the tensor and the shapes
    w = tmp_path / "w.safetensors"
    weights.save(w, "f32")
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.load_weights(w, config={"z_dim": 4, "base_dim": 16})
    assert e.value.status in ("W22_ERR_BAD_SHAPE", "W22_ERR_MISSING_TENSOR") and "expected" in e.value.message


def test_weights_from_numpy_dict(weights, latents):
    ref = wan22vae.Decoder(weights, device="cpu", threads=2)(latents)
    sd = weights.numpy_dict()
    assert list(sd) == [n for n, _ in wan22vae.weight_table(NARROW)]
    got = wan22vae.Decoder(wan22vae.weights_from_tensors(sd, NARROW), device="cpu", threads=2)(latents)
    np.testing.assert_array_equal(got, ref)
    sd.pop("decoder.conv_out.bias")
    with pytest.raises(wan22vae.Error, match="decoder.conv_out.bias"):
        wan22vae.weights_from_tensors(sd, NARROW)


# ---- frames ----
def test_to_uint8_frames_numpy(cpu_decoder, latents):
    video = cpu_decoder(latents)
    frames = wan22vae.to_uint8_frames(video)
    assert frames.shape == (5, 48, 64, 3) and frames.dtype == np.uint8 and frames.flags.c_contiguous
    # diffusers' postprocess for float32: denormalize, *255, round (numpy_to_pil)
    ref = (np.clip(video[0] * 0.5 + 0.5, 0, 1) * 255).round().astype(np.uint8).transpose(1, 2, 3, 0)
    np.testing.assert_array_equal(frames, ref)
    floor = wan22vae.to_uint8_frames(video, rounding="floor")
    np.testing.assert_array_equal(
        floor, (np.clip(video[0] * 0.5 + 0.5, 0, 1) * 255).astype(np.uint8).transpose(1, 2, 3, 0))
    edge = wan22vae.to_uint8_frames(np.array([-1.0, 1.0, 0.0, 2.0], np.float32).reshape(1, 1, 1, 4).repeat(3, 0))
    assert edge[0, 0, :, 0].tolist() == [0, 255, 128, 255]


# ---- Decoder.frames: frames while the decode runs (issue 30, point 3) ----
def _frames_threads():
    return [t for t in threading.enumerate() if t.name == "wan22vae-frames"]


def test_frames_equal_the_one_shot_video(cpu_decoder):
    z = wan22vae.synthetic_latents(NARROW, seed=3, T=4, h=3, w=4)
    video = cpu_decoder(z)
    got = list(cpu_decoder.frames(z))
    assert len(got) > 1 and [f0 for f0, _ in got] == list(np.cumsum([0] + [x.shape[1] for _, x in got[:-1]]))
    assert all(x.dtype == np.float32 and x.shape[0] == 3 and x.flags.c_contiguous for _, x in got)
    np.testing.assert_array_equal(np.concatenate([x for _, x in got], axis=1), video[0])  # bit for bit
    # uint8 [n, H, W, 3]: to_uint8_frames of the whole video, in batches of 4 (the last one shorter)
    u8 = list(cpu_decoder.frames(z, dtype="uint8", batch=4))
    assert [(f0, x.shape) for f0, x in u8] == [(0, (4, 48, 64, 3)), (4, (4, 48, 64, 3)), (8, (4, 48, 64, 3)),
                                               (12, (1, 48, 64, 3))]
    assert all(x.dtype == np.uint8 and x.flags.c_contiguous for _, x in u8)
    np.testing.assert_array_equal(np.concatenate([x for _, x in u8]), wan22vae.to_uint8_frames(video))
    floor = np.concatenate([x for _, x in cpu_decoder.frames(z, dtype=np.uint8, rounding="floor")])
    np.testing.assert_array_equal(floor, wan22vae.to_uint8_frames(video, rounding="floor"))
    # 4-dim latents, float16 latents, batches of 5 in float16 (what dec(z, out=float16) writes)
    z16 = z[0].astype(np.float16)
    b5 = list(cpu_decoder.frames(z16, dtype="float16", batch=5))
    assert [(f0, x.shape[1]) for f0, x in b5] == [(0, 5), (5, 5), (10, 3)] and b5[0][1].flags.c_contiguous
    out = np.empty(video.shape[1:], np.float16)
    cpu_decoder(z16, out=out)
    np.testing.assert_array_equal(np.concatenate([x for _, x in b5], axis=1), out)
    assert not _frames_threads() and not cpu_decoder.lock().locked()


def test_frames_break_stops_the_decode(cpu_decoder, monkeypatch):
    z = wan22vae.synthetic_latents(NARROW, seed=4, T=8, h=3, w=4)  # 29 frames, one batch each
    whole = cpu_decoder(z)
    calls = []
    real = wan22vae._stream.Stream._on_frames

    def counted(self, *args):
        calls.append(args[2])
        return real(self, *args)
    monkeypatch.setattr(wan22vae._stream.Stream, "_on_frames", counted)
    for f0, x in cpu_decoder.frames(z, depth=1):
        # the first batch is read while the decode runs (it waits: one batch may wait for the reader, depth=1)
        assert f0 == 0 and _frames_threads() and cpu_decoder.lock().locked()
        break
    # the loop dropped the iterator: its close() stopped the decode and waited for its thread
    assert not _frames_threads() and not cpu_decoder.lock().locked()
    assert len(calls) <= 4, f"the decode ran on after the break: {len(calls)} batches of 29"
    # close() of a kept iterator, after two batches
    calls.clear()
    it = cpu_decoder.frames(z, depth=1)
    assert next(it)[0] == 0 and next(it)[0] == 1
    it.close()
    assert not _frames_threads() and not cpu_decoder.lock().locked() and len(calls) <= 5, calls
    # an exception in the loop: it propagates, the decode stops
    with pytest.raises(KeyError):
        for f0, x in cpu_decoder.frames(z):
            raise KeyError(f0)
    assert not _frames_threads() and not cpu_decoder.lock().locked()
    monkeypatch.undo()
    np.testing.assert_array_equal(cpu_decoder(z), whole)  # the decoder decodes whole afterwards
    np.testing.assert_array_equal(np.concatenate([x for _, x in cpu_decoder.frames(z)], axis=1), whole[0])


def test_frames_error_raised_in_the_reader(cpu_decoder, latents):
    z = latents.copy()
    z[0, 1, 1, 2, 3] = np.nan
    it = cpu_decoder.frames(z)
    with pytest.raises(wan22vae.Error) as e:
        next(it)
    assert e.value.status == "W22_ERR_NONFINITE" and "NaN" in e.value.message
    assert not _frames_threads() and not cpu_decoder.lock().locked()
    np.testing.assert_array_equal(np.concatenate([x for _, x in cpu_decoder.frames(latents)], axis=1),
                                  cpu_decoder(latents)[0])


def test_frames_arguments_checked_at_the_call(cpu_decoder, latents):
    for kwargs, status in (({"dtype": "int8"}, "W22_ERR_BAD_DTYPE"), ({"dtype": "bfloat16"}, "W22_ERR_BAD_DTYPE"),
                           ({"batch": 0}, "W22_ERR_INVALID_ARG"), ({"batch": 1.5}, "W22_ERR_INVALID_ARG"),
                           ({"depth": 0}, "W22_ERR_INVALID_ARG"), ({"rounding": "up"}, "W22_ERR_INVALID_ARG")):
        with pytest.raises(wan22vae.Error) as e:
            cpu_decoder.frames(latents, **kwargs)  # no iteration needed: raised by the call itself
        assert e.value.status == status, (kwargs, e.value)
    with pytest.raises(wan22vae.Error) as e:
        cpu_decoder.frames(np.concatenate([latents, latents]))
    assert e.value.status == "W22_ERR_BAD_SHAPE" and "one video" in e.value.message
    with pytest.raises(wan22vae.Error, match="W22_ERR_BAD_SHAPE"):
        cpu_decoder.frames(np.zeros((1, 5, 1, 2, 3), np.float32))
    assert not _frames_threads()


def test_frames_lock_from_the_reading_thread(weights, latents):
    """Inside the loop the decode holds the decoder: its other calls from the reading thread raise instead of
    waiting forever; another thread's decode waits for the loop; close() stops the iterator."""
    dec = wan22vae.Decoder(weights, device="cpu", threads=1)
    ref = dec(latents)
    box = {}
    other = threading.Thread(target=lambda: box.setdefault("video", dec(latents)))
    n = 0
    for f0, x in dec.frames(latents):
        if n == 0:
            for call in (lambda: dec(latents), dec.release_workspace, dec.device_bytes,
                         lambda: next(dec.frames(latents))):
                with pytest.raises(wan22vae.Error, match="inside a frames\\(\\) loop|reads another one"):
                    call()
            other.start()
        n += x.shape[1]
    other.join()
    assert n == 5 and np.array_equal(box["video"], ref)
    it = dec.frames(latents)
    next(it)
    dec.close()  # stops the iterator's decode, then frees
    assert not _frames_threads()
    with pytest.raises(wan22vae.Error, match="closed"):
        next(it)
    with pytest.raises(wan22vae.Error, match="closed"):
        dec.frames(latents)


def test_decode_device_frames_needs_cuda(cpu_decoder, latents):
    """The C call behind frames() on CUDA latents: W22_ERR_UNSUPPORTED on a CPU decoder, as w22_decode_device."""
    L = _lib.lib()
    fn = _lib.DEVICE_FRAMES_FN(lambda *a: 0)
    with cpu_decoder.lock():
        status = L.w22_decode_device_frames(cpu_decoder.handle, latents.ctypes.data, 2, 3, 4, fn, None, None)
        message = L.w22_last_error().decode()
    assert _lib.status_name(status) == "W22_ERR_UNSUPPORTED"
    assert "w22_decode_device_frames" in message and "CUDA decoder" in message


# ---- the diffusers hook's pure-Python parts ----
def test_diffusers_config_reason():
    import wan22vae.diffusers as wd
    ti2v = {"base_dim": 160, "decoder_base_dim": 256, "z_dim": 48, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
            "attn_scales": [], "temperal_downsample": [False, True, True], "is_residual": True, "in_channels": 12,
            "out_channels": 12, "patch_size": 2}
    assert wd._config_reason(ti2v) is None
    r = wd._config_reason(dict(ti2v, z_dim=32))
    assert "z_dim 32 (expected 48)" in r and "TI2V-5B" in r, r
    wan21 = {"base_dim": 96, "decoder_base_dim": None, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
             "attn_scales": [], "temperal_downsample": [False, True, True], "is_residual": False, "in_channels": 3,
             "out_channels": 3, "patch_size": None}
    assert wd._config_reason(wan21) is None
    r = wd._config_reason(dict(wan21, base_dim=64))
    assert "the Wan2.1 VAE's" in r and "decoder_base_dim 64 (expected 96)" in r and "z_dim" not in r, r
    # a field that differs is named once, against the structure its is_residual says
    r = wd._config_reason(dict(ti2v, is_residual=False))
    assert "Wan2.1" in r and "z_dim 48 (expected 16)" in r, r
    assert wd.status(object())["enabled"] is False


# ---- sharded safetensors: the index and its shards ----
INDEX = "diffusion_pytorch_model.safetensors.index.json"


@pytest.fixture(scope="module")
def bf16_arrays(weights, tmp_path_factory):
    """{name: raw bf16 (uint16) array} of the narrow synthetic weights."""
    from wan22vae import _safetensors
    f = tmp_path_factory.mktemp("bf16") / "w.safetensors"
    weights.save(f, "bf16")
    return {n: np.array(a) for n, (a, _, _) in _safetensors.open_arrays(f).items()}


def make_shards(folder, arrays, parts, wmap=None):
    """Shards of the weights in arrays: parts is {file name: slice or list of tensor names}; the index maps each
    tensor to the first file of parts that holds it (or is wmap when given). Returns the weight names in order."""
    folder.mkdir(parents=True, exist_ok=True)
    names = [n for n, _ in wan22vae.weight_table(NARROW)]
    parts = {k: (names[v] if isinstance(v, slice) else v) for k, v in parts.items()}
    if wmap is None:
        wmap = {}
        for fname, part in parts.items():
            wmap.update({n: fname for n in part if n not in wmap})
    for fname, part in parts.items():
        os.makedirs(os.path.dirname(os.path.join(folder, fname)), exist_ok=True)
        write_safetensors(os.path.join(folder, fname), {n: arrays[n] for n in part})
    (folder / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": wmap}))
    return names


def test_sharded_loads_and_allows_cache_symlinks(tmp_path, bf16_arrays, latents):
    """The accepted forms: shards next to the index, in a subfolder, a path with '..' that stays inside, and shard
    files that are symlinks out of the folder (the Hugging Face cache links snapshots/<rev>/vae/*.safetensors to
    ../../../blobs/<hash>)."""
    ref = None
    names = [n for n, _ in wan22vae.weight_table(NARROW)]
    inside = {n: ("a.safetensors" if i < 50 else "sub/../sub/b.safetensors") for i, n in enumerate(names)}
    flat = {"a.safetensors": slice(0, 50), "b.safetensors": slice(50, None)}
    sub = {"a.safetensors": slice(0, 50), "sub/b.safetensors": slice(50, None)}
    for i, (parts, wmap) in enumerate(((flat, None), (sub, None), (sub, inside))):
        folder = tmp_path / f"v{i}"
        make_shards(folder, bf16_arrays, parts, wmap)
        got = wan22vae.Decoder.from_pretrained(folder, device="cpu", threads=2)(latents)
        if ref is None:
            ref = got
        np.testing.assert_array_equal(got, ref)
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "rev" / "vae"
    make_shards(blobs, bf16_arrays, {"a.safetensors": slice(0, 50), "b.safetensors": slice(50, None)})
    snap.mkdir(parents=True)
    for f in ("a.safetensors", "b.safetensors"):
        os.symlink(os.path.relpath(blobs / f, snap), snap / f)
    shutil.copy(blobs / INDEX, snap / INDEX)
    np.testing.assert_array_equal(wan22vae.Decoder.from_pretrained(snap, device="cpu", threads=2)(latents), ref)
    # the index itself may be given as the path
    via_index = wan22vae.Decoder.from_pretrained(snap / INDEX, device="cpu", threads=2)(latents)
    np.testing.assert_array_equal(via_index, ref)
    # diffusers' spelling of a variant's index (diffusion_pytorch_model.safetensors.index.fp16.json), by folder and
    # by name: the library reads any .json it is given as an index
    var = tmp_path / "variant"
    make_shards(var, bf16_arrays, flat)
    os.rename(var / INDEX, var / "diffusion_pytorch_model.safetensors.index.fp16.json")
    for path, variant in ((var, "fp16"), (var / "diffusion_pytorch_model.safetensors.index.fp16.json", None)):
        got = wan22vae.Decoder.from_pretrained(path, variant=variant, device="cpu", threads=2)(latents)
        np.testing.assert_array_equal(got, ref)


def test_shard_changed_in_place_is_refused_not_a_crash(tmp_path, bf16_arrays, latents):
    """Weights from shards stay mapped until the decoder's open reads them: a shard shrunk in place in between would
    kill the process with SIGBUS (the test run with it); the open refuses it, naming the shard, and a fresh load of
    the restored files decodes as before."""
    folder = tmp_path / "vae"
    make_shards(folder, bf16_arrays, {"a.safetensors": slice(0, 50), "b.safetensors": slice(50, None)})
    ref = wan22vae.Decoder.from_pretrained(folder, device="cpu", threads=2)(latents)
    w = wan22vae.load_weights(folder)
    keep = (folder / "b.safetensors").read_bytes()
    os.truncate(folder / "b.safetensors", 100)
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.Decoder(w, device="cpu", threads=2)
    assert e.value.status == "W22_ERR_IO" and "changed in place" in e.value.message
    assert str(folder / "b.safetensors") in e.value.message
    w.free()
    (folder / "b.safetensors").write_bytes(keep)
    np.testing.assert_array_equal(wan22vae.Decoder.from_pretrained(folder, device="cpu", threads=2)(latents), ref)


def test_sharded_refuses_paths_outside_folder(tmp_path, bf16_arrays):
    """A weight_map shard path that is absolute, has '..', or sits in a folder resolving outside the index's folder
    is refused (each of these points at a valid shard, which would otherwise be read)."""
    outside = tmp_path / "outside"
    names = make_shards(outside, bf16_arrays, {"b.safetensors": slice(50, None)})
    (outside / "inner").mkdir()
    shutil.copy(outside / "b.safetensors", outside / "inner" / "b.safetensors")
    folder = tmp_path / "models" / "vae"
    make_shards(folder, bf16_arrays, {"a.safetensors": slice(0, 50)})
    os.symlink(outside, folder / "linked")  # a folder inside that resolves outside
    for bad in ("../../outside/b.safetensors", str(outside / "b.safetensors"), "sub/../../../outside/b.safetensors",
                "linked/b.safetensors", "linked/inner/../b.safetensors"):
        wmap = {n: ("a.safetensors" if i < 50 else bad) for i, n in enumerate(names)}
        (folder / INDEX).write_text(json.dumps({"weight_map": wmap}))
        with pytest.raises(wan22vae.Error) as e:
            wan22vae.load_weights(folder)
        assert e.value.status == "W22_ERR_FORMAT" and bad in e.value.message and "refused" in e.value.message, \
            (bad, e.value)
        assert str(folder / INDEX) in e.value.message


def test_sharded_refuses_tensor_in_two_shards(tmp_path, bf16_arrays):
    names = [n for n, _ in wan22vae.weight_table(NARROW)]
    a, b = "diffusion_pytorch_model-00001-of-00002.safetensors", "diffusion_pytorch_model-00002-of-00002.safetensors"
    # names[50:60] in both shards, the index says shard a for them
    folder = tmp_path / "dup"
    make_shards(folder, bf16_arrays, {a: slice(0, 60), b: slice(50, None)})
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.load_weights(folder)
    assert e.value.status == "W22_ERR_FORMAT" and "two shards" in e.value.message
    # one of the tensors in both (the library names the first by name, not by position)
    assert any(f"'{n}'" in e.value.message for n in names[50:60]), e.value.message
    assert str(folder / a) in e.value.message and str(folder / b) in e.value.message
    # a weight_map entry whose tensor is not in its shard (it is in the other one)
    folder = tmp_path / "misplaced"
    wmap = {n: (a if i < 50 else b) for i, n in enumerate(names)}
    wmap[names[3]] = b
    make_shards(folder, bf16_arrays, {a: slice(0, 50), b: slice(50, None)}, wmap=wmap)
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.load_weights(folder)
    assert e.value.status == "W22_ERR_MISSING_TENSOR" and names[3] in e.value.message
    assert str(folder / a) in e.value.message and str(folder / b) in e.value.message


def test_sharded_malformed_index_and_shards(tmp_path, bf16_arrays):
    """A malformed index, a missing shard and malformed shards: wan22vae.Error (a ValueError too) naming the file."""
    folder = tmp_path / "vae"
    names = make_shards(folder, bf16_arrays, {"a.safetensors": slice(0, 50), "b.safetensors": slice(50, None)})
    index = folder / INDEX
    good = index.read_text()
    wmap = json.loads(good)["weight_map"]
    # the library's words (the CLI's too: one reader, src/weights/source.c)
    for text, expect in (("{not json", "JSON at byte 1"), ("\xff\xfe", "JSON at byte 0"), ("[1, 2]", "an array"),
                         ('{"metadata": {}}', "without weight_map"),
                         ('{"weight_map": ["a.safetensors"]}', "weight_map is an array"),
                         ('{"weight_map": {}}', "empty"),
                         (json.dumps({"weight_map": dict(wmap, **{names[0]: 7})}), "is 7"),
                         (json.dumps({"weight_map": dict(wmap, **{names[0]: None})}), "is null")):
        index.write_bytes(text.encode("latin-1"))
        with pytest.raises(wan22vae.Error) as e:
            wan22vae.load_weights(folder)
        assert isinstance(e.value, ValueError) and e.value.status == "W22_ERR_FORMAT", (text, e.value)
        assert str(index) in e.value.message and expect in e.value.message, (text, e.value.message)
    index.write_text(good)
    # a missing shard: named, with the index
    os.rename(folder / "b.safetensors", folder / "b.moved")
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.load_weights(folder)
    assert e.value.status == "W22_ERR_IO" and str(folder / "b.safetensors") in e.value.message
    assert str(index) in e.value.message
    # malformed shards: each named
    shard = folder / "b.safetensors"
    def st(header, data=b"\0" * 8):
        text = header.encode() if isinstance(header, str) else json.dumps(header).encode()
        return struct.pack("<Q", len(text)) + text + data

    x = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    for blob, expect in ((b"\x01\x00", "expected at least 8"), (struct.pack("<Q", 1 << 40) + b"{}", "is absurd"),
                         (st("{oops}"), "header JSON at byte 1"), (st(b"\xff".decode("latin-1") + "{}"), "expected '{'"),
                         (st([]), "expected '{'"), (st({"x": [1, 2]}), "'x' is an array"),
                         (st({"__metadata__": [1]}), "__metadata__"), (st({"x": dict(x, shape="2")}), "shape"),
                         (st({"x": {"dtype": "F32", "shape": [2]}}), "data_offsets"),
                         (st({"x": dict(x, data_offsets=[0])}), "data_offsets"),
                         (st({"x": dict(x, data_offsets=[0, 99])}), "out of range"),
                         (st({"x": dict(x, data_offsets=[4, 8])}), "is 8 bytes"),
                         (st({"x": dict(x, dtype=3)}), "dtype"), (st({"x": dict(x, dtype="I32")}), "dtype I32")):
        shard.write_bytes(blob)
        index.write_text(json.dumps({"weight_map": dict({n: "a.safetensors" for n in names[:50]}, x="b.safetensors")}))
        with pytest.raises(wan22vae.Error) as e:
            wan22vae.load_weights(folder)
        assert isinstance(e.value, ValueError) and e.value.status in ("W22_ERR_FORMAT", "W22_ERR_BAD_DTYPE"), \
            (blob, e.value)
        assert str(shard) in e.value.message and expect in e.value.message, (blob, e.value.message)
    index.write_text(good)
    # a malformed config.json next to the weights
    os.rename(folder / "b.moved", shard)
    (folder / "config.json").write_text("{")
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.load_weights(folder)
    assert e.value.status == "W22_ERR_FORMAT" and str(folder / "config.json") in e.value.message


# ---- one decoder, several threads ----
THREADS_SCRIPT = r"""
import sys, threading, time
import numpy as np
import wan22vae
N = {"z_dim": 4, "base_dim": 8}
w = wan22vae.synthetic_weights(N, 7)
shapes = [(2, 3, 4), (4, 8, 8), (3, 5, 6)]
zs = [wan22vae.synthetic_latents(N, 10 + i, *s) for i, s in enumerate(shapes)]
ref_dec = wan22vae.Decoder(w, device="cpu", threads=1)
refs = [ref_dec(z) for z in zs]
ref_dec.close()

# 1. two threads decode with one decoder at once: every result is the serial one
dec = wan22vae.Decoder(w, device="cpu", threads=1)
bad = []
def worker(k):
    for r in range(4):
        i = (k + r) % len(zs)
        v = dec(zs[i])
        if not np.array_equal(v, refs[i]):
            bad.append((k, r, i))
ts = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
[t.start() for t in ts]
[t.join() for t in ts]
assert not bad, bad

# 2. close() while another thread decodes: close waits, the decode completes intact, a later decode raises
z = wan22vae.synthetic_latents(N, 5, 3, 16, 16)
t0 = time.monotonic()
ref = dec(z)
took = time.monotonic() - t0  # what one decode of z takes here (a few tenths of a second)
box = {}
def long_decode():
    try:
        box["video"] = dec(z)
    except Exception as e:
        box["error"] = e
t = threading.Thread(target=long_decode)
t.start()
deadline = time.monotonic() + 10
while not dec.lock().locked() and time.monotonic() < deadline:  # the decode is running
    time.sleep(0.001)
assert dec.lock().locked(), "the decode did not start"
t0 = time.monotonic()
dec.close()
waited = time.monotonic() - t0
t.join()
assert "error" not in box, box
assert waited > 0.3 * took, f"close() took {waited:.3f} s: it did not wait for the running decode ({took:.3f} s)"
assert np.array_equal(box["video"], ref), "the decode that close() raced with was corrupted"
try:
    dec(z)
    raise SystemExit("a decode after close() did not raise")
except wan22vae.Error as e:
    assert "closed" in e.message, e
dec.close()  # twice is fine
w.free()
print("ok")
"""


def test_threads_share_decoder_and_close_waits():
    """One CPU decoder used by two threads at once gives the serial results; close() racing with a decode in another
    thread waits for it (the decode's video is intact) and a later decode raises wan22vae.Error. In a subprocess, so
    that a use after free fails this test instead of killing pytest."""
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    got = subprocess.run([sys.executable, "-c", THREADS_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert got.returncode == 0 and got.stdout.strip() == "ok", (got.returncode, got.stdout[-2000:], got.stderr[-4000:])


# ---- batches, output dtype, progress, Ctrl-C (issue 31) ----
def test_weights_free_waits_for_a_decoders_open(weights, monkeypatch):
    """Weights.free() from another thread while a decoder opens from them: before, it unmapped the weights under the
    open (a segfault with real TI2V-5B weights); now it waits for the open, which succeeds, and later uses of the
    freed weights raise. The open is held inside the library call (a wrapper that waits) so that free() surely
    comes during it."""
    from wan22vae import decoder as dm
    w = wan22vae.synthetic_weights(NARROW, seed=11)
    real, inside, go = dm.lib(), threading.Event(), threading.Event()

    class Slow:
        def __getattr__(self, name):
            return getattr(real, name)

        def w22_decoder_open(self, *args):
            inside.set()
            go.wait(10)
            return real.w22_decoder_open(*args)
    monkeypatch.setattr(dm, "lib", lambda: Slow())
    got, order = {}, []
    opener = threading.Thread(target=lambda: got.setdefault("d", wan22vae.Decoder(w, device="cpu", threads=1)))
    opener.start()
    assert inside.wait(10)
    freer = threading.Thread(target=lambda: (w.free(), order.append("freed")))
    freer.start()
    freer.join(0.3)
    assert freer.is_alive() and not order  # free() waits while the open runs
    order.append("open released")
    go.set()
    opener.join(10)
    freer.join(10)
    monkeypatch.undo()
    assert order == ["open released", "freed"] and "d" in got
    assert got["d"](wan22vae.synthetic_latents(NARROW, 3, 2, 3, 4)).shape == (1, 3, 5, 48, 64)
    got["d"].close()
    with pytest.raises(wan22vae.Error, match="freed"):
        wan22vae.Decoder(w, device="cpu")
    with pytest.raises(wan22vae.Error, match="freed"):
        w.save("never.safetensors")


def test_batch_decodes_each_latent(cpu_decoder):
    zs = [wan22vae.synthetic_latents(NARROW, seed=20 + i, T=2, h=3, w=4) for i in range(3)]
    z = np.concatenate(zs)
    video = cpu_decoder(z)
    assert video.shape == (3, 3, 5, 48, 64) and video.dtype == np.float32
    for i, zi in enumerate(zs):
        np.testing.assert_array_equal(video[i:i + 1], cpu_decoder(zi))
    out = np.full(video.shape, np.nan, np.float16)
    assert cpu_decoder(z.astype(np.float16), out=out) is out and np.isfinite(out).all()
    with pytest.raises(wan22vae.Error, match="W22_ERR_BAD_SHAPE"):
        cpu_decoder(z, out=np.empty((2, 3, 5, 48, 64), np.float32))
    with pytest.raises(wan22vae.Error, match=r"\[B, 4, T, h, w\] with B >= 1"):
        cpu_decoder(np.zeros((0, 4, 2, 3, 4), np.float32))


def test_batch_torch_cpu_and_torch_dtype(weights):
    torch = pytest.importorskip("torch")
    z = np.concatenate([wan22vae.synthetic_latents(NARROW, seed=30 + i, T=2, h=2, w=3) for i in range(2)])
    ref = wan22vae.Decoder(weights, device="cpu", threads=2)(z)
    for dtype in (torch.float32, torch.bfloat16, torch.float16, "bfloat16"):
        dec = wan22vae.Decoder(weights, device="cpu", threads=2, torch_dtype=dtype)
        got = dec(torch.from_numpy(z))
        want = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        assert isinstance(got, torch.Tensor) and got.dtype == want and got.shape == ref.shape
        assert float((got.float() - torch.from_numpy(ref)).abs().max()) <= 2 ** -7  # the rounding to dtype only
        dec.close()


def test_torch_dtype_for_numpy_latents(weights, latents):
    ref = wan22vae.Decoder(weights, device="cpu", threads=2)(latents)
    got = wan22vae.Decoder(weights, device="cpu", threads=2, torch_dtype="float16")(latents)
    assert isinstance(got, np.ndarray) and got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), ref, atol=2 ** -10, rtol=0)
    with pytest.raises(wan22vae.Error, match="numpy has no bfloat16"):
        wan22vae.Decoder(weights, device="cpu", torch_dtype="bfloat16")(latents)
    with pytest.raises(wan22vae.Error, match="W22_ERR_BAD_DTYPE"):
        wan22vae.Decoder(weights, device="cpu", torch_dtype="int8")


def test_progress_callable_over_a_batch(weights):
    z = np.concatenate([wan22vae.synthetic_latents(NARROW, seed=40 + i, T=3, h=2, w=2) for i in range(2)])
    seen = []
    dec = wan22vae.Decoder(weights, device="cpu", threads=2)  # two latent frames per pass
    video = dec(z, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(2, 6), (3, 6), (5, 6), (6, 6)]
    np.testing.assert_array_equal(video, dec(z))  # no progress: the same video
    one = wan22vae.Decoder(weights, device="cpu", threads=2, frames_per_pass=1)
    seen.clear()
    one(z[:1], progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)]
    with pytest.raises(wan22vae.Error, match="progress"):
        dec(z, progress="yes")


def test_progress_exception_stops_the_decode(weights):
    z = wan22vae.synthetic_latents(NARROW, seed=5, T=8, h=4, w=4)
    dec = wan22vae.Decoder(weights, device="cpu", threads=2, frames_per_pass=1)
    ref = dec(z)
    calls = []

    def stop(done, total):
        calls.append(done)
        if done == 2:
            raise ValueError("enough")
    with pytest.raises(ValueError, match="enough"):
        dec(z, progress=stop)
    assert calls == [1, 2], calls  # stopped at the end of the pass that raised
    np.testing.assert_array_equal(dec(z), ref)  # the decoder is whole after a stopped decode


def test_progress_true_tqdm_or_stderr(weights, monkeypatch, capsys):
    import types
    z = wan22vae.synthetic_latents(NARROW, seed=5, T=4, h=2, w=2)
    dec = wan22vae.Decoder(weights, device="cpu", threads=2)
    bars = []

    class FakeTqdm:
        def __init__(self, total, **kw):
            self.total, self.n, self.closed = total, 0, False
            bars.append(self)

        def update(self, k):
            self.n += k

        def close(self):
            self.closed = True
    fake = types.ModuleType("tqdm.auto")
    fake.tqdm = FakeTqdm
    monkeypatch.setitem(sys.modules, "tqdm", types.ModuleType("tqdm"))
    monkeypatch.setitem(sys.modules, "tqdm.auto", fake)
    dec(z, progress=True)
    assert len(bars) == 1 and bars[0].total == 4 and bars[0].n == 4 and bars[0].closed
    monkeypatch.setitem(sys.modules, "tqdm", None)  # tqdm not installed: lines on stderr
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    capsys.readouterr()
    dec(z, progress=True)
    err = capsys.readouterr().err
    assert "wan22vae: 4/4 latent frames decoded (100%" in err, err


def test_progress_hook_off(weights, latents):
    dec = wan22vae.Decoder(weights, device="cpu", threads=2, progress_hook=False)
    np.testing.assert_array_equal(dec(latents), wan22vae.Decoder(weights, device="cpu", threads=2)(latents))
    with pytest.raises(wan22vae.Error, match="progress_hook=False"):
        dec(latents, progress=print)


CTRL_C_SCRIPT = r"""
import os, signal, threading, time
import numpy as np
import wan22vae
N = {"z_dim": 4, "base_dim": 8}
w = wan22vae.synthetic_weights(N, 7)
dec = wan22vae.Decoder(w, device="cpu", threads=2)
z = wan22vae.synthetic_latents(N, 3, 24, 16, 16)   # 12 passes of about 0.3 s here: about 4 s in all
report = os.environ.get("W22_TEST_PROGRESS") == "1"
passes = []
def note(done, total):
    passes.append((done, time.monotonic()))
sent = []
def interrupt():
    sent.append(time.monotonic())
    os.kill(os.getpid(), signal.SIGINT)
threading.Timer(0.5, interrupt).start()
t0 = time.monotonic()
try:
    dec(z, progress=note if report else None)
    raise SystemExit("the decode ran to its end: Ctrl-C did not stop it")
except KeyboardInterrupt:
    t1 = time.monotonic()
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "the SIGINT handler was not restored"
after = [d for d, t in passes if t > sent[0]]
print(f"raised {t1 - sent[0]:.3f} s after SIGINT, {t1 - t0:.3f} s after the start; passes {len(passes)}, "
      f"after the signal {len(after)}")
if report:
    # the pass running at the signal ends with a callback that stops the decode: no pass starts after it (Python may
    # run the handler at the callback's first line, before the report, or at the report's, after it)
    assert len(after) <= 1, (after, sent, passes)
# the decoder is whole after the stopped decode
small = wan22vae.synthetic_latents(N, 4, 2, 3, 4)
ref = wan22vae.Decoder(w, device="cpu", threads=2)(small)
assert np.array_equal(dec(small), ref)
print("ok")
"""


@pytest.mark.parametrize("report", [False, True], ids=["no-progress", "progress"])
def test_ctrl_c_stops_within_a_pass(report):
    """SIGINT (Ctrl-C) 0.5 s into a CPU decode of about 4 s: the call raises KeyboardInterrupt at the end of the pass
    that was running (no pass starts after the signal), restores the SIGINT handler, and the decoder decodes again.
    In a subprocess: the signal goes to that process only."""
    env = dict(os.environ, PYTHONPATH=PKG_ROOT, W22_TEST_PROGRESS="1" if report else "0")
    got = subprocess.run([sys.executable, "-c", CTRL_C_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert got.returncode == 0 and got.stdout.strip().endswith("ok"), (got.returncode, got.stdout, got.stderr[-4000:])
    took = float(got.stdout.split(" s after SIGINT")[0].split()[-1])
    assert took < 2.5, got.stdout  # about one pass (0.3 s, more on a busy machine); the whole decode: 3.5 s more


CTRL_C_LONG_PASS_SCRIPT = r"""
import os, signal, threading, time
import numpy as np
import wan22vae
N = {"z_dim": 4, "base_dim": 32}
w = wan22vae.synthetic_weights(N, 7)
dec = wan22vae.Decoder(w, device="cpu", threads=1)
z = wan22vae.synthetic_latents(N, 3, 2, 32, 32)   # one pass of several seconds on one thread
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
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "the SIGINT handler was not restored"
assert signal.set_wakeup_fd(-1) == -1, "the wakeup fd was not restored"
print(f"raised {t1 - sent[0]:.3f} s after SIGINT, {t1 - t0:.3f} s after the start")
small = wan22vae.synthetic_latents(N, 4, 2, 3, 4)
assert np.array_equal(dec(small), wan22vae.Decoder(w, device="cpu", threads=1)(small))
print("ok")
"""


def test_ctrl_c_within_a_second_of_a_long_pass():
    """Issue 47: SIGINT 0.5 s into a CPU decode whose one pass takes seconds raises KeyboardInterrupt within 1 s (the
    library's stop flag, set by a watcher of Python's wakeup fd; before, at the pass's end: 6.9 s seen); the handler
    and the wakeup fd are restored, and the decoder decodes again to a fresh one's bits."""
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    got = subprocess.run([sys.executable, "-c", CTRL_C_LONG_PASS_SCRIPT], capture_output=True, text=True, env=env,
                         timeout=300)
    assert got.returncode == 0 and got.stdout.strip().endswith("ok"), (got.returncode, got.stdout, got.stderr[-4000:])
    took = float(got.stdout.split(" s after SIGINT")[0].split()[-1])
    assert took < 1.0, got.stdout


def test_w22_lib_missing_is_refused_not_replaced(tmp_path):
    """Issue 47: W22_LIB naming a missing file fails, saying so, instead of loading the package's or the build's
    library in its place; the loaded library's version is the package's."""
    env = dict(os.environ, PYTHONPATH=PKG_ROOT, W22_LIB=str(tmp_path / "nope.so"))
    got = subprocess.run([sys.executable, "-c", "import wan22vae; print(wan22vae.library_path())"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert got.returncode != 0 and "nope.so (absent)" in got.stderr and "build" not in got.stdout, got
    assert wan22vae.library_version() == wan22vae.__version__


# ---- devices (issue 31) ----
@pytest.mark.skipif(wan22vae.cuda_available(), reason="a usable GPU is here")
def test_device_auto_is_cpu_here_and_says_so(weights, latents, tmp_path, caplog):
    import logging
    with caplog.at_level(logging.INFO, logger="wan22vae"):
        dec = wan22vae.Decoder(weights, threads=2)
    assert not dec.is_cuda and dec.device == "cpu"
    assert any("device='auto': decoding on the CPU" in r.getMessage() and "no usable CUDA GPU" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    weights.save(tmp_path / "w.safetensors", "f32")
    np.testing.assert_array_equal(wan22vae.Decoder.from_pretrained(tmp_path / "w.safetensors", threads=2)(latents),
                                  dec(latents))


@pytest.mark.skipif(wan22vae.cuda_available(), reason="a usable GPU is here")
def test_device_cuda_without_gpu_says_so_plainly(weights, tmp_path):
    for device in ("cuda", "cuda:0"):
        with pytest.raises(wan22vae.Error) as e:
            wan22vae.Decoder(weights, device=device)
        assert e.value.status == "W22_ERR_UNSUPPORTED" and "no usable CUDA GPU" in e.value.message, e.value
        assert "insufficient" not in e.value.message
    weights.save(tmp_path / "w.safetensors", "f32")
    with pytest.raises(wan22vae.Error, match="no usable CUDA GPU"):
        wan22vae.Decoder.from_pretrained(tmp_path / "w.safetensors", device="cuda")


def test_no_gpu_error_words():
    from wan22vae.decoder import _no_gpu_error
    e = _no_gpu_error("cuda", "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version")
    assert "no usable CUDA GPU" in e.message and "no NVIDIA driver" in e.message and "insufficient" not in e.message
    e = _no_gpu_error("cuda:1", "this build of wan22vae has no CUDA backend (built without nvcc)")
    assert "no usable CUDA GPU" in e.message and "no CUDA backend" in e.message and "'cuda:1'" in e.message


def _pipeline_folder(root, weights, with_stats=True):
    vae = root / "vae"
    vae.mkdir(parents=True)
    weights.save(vae / "diffusion_pytorch_model.safetensors", "f32")
    cfg = {"_class_name": "AutoencoderKLWan", "base_dim": 160, "decoder_base_dim": 8, "z_dim": 4,
           "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_scales": [], "temperal_downsample": [False, True, True],
           "is_residual": True, "in_channels": 12, "out_channels": 12, "patch_size": 2}
    if with_stats:
        cfg.update(latents_mean=[0.5, -0.25, 0.125, 1.0], latents_std=[2.0, 0.5, 1.5, 0.75])
    (vae / "config.json").write_text(json.dumps(cfg))
    (root / "model_index.json").write_text(json.dumps({"_class_name": "WanPipeline"}))
    return vae


def test_from_pretrained_subfolder(tmp_path, weights, latents):
    ref = wan22vae.Decoder(weights, device="cpu", threads=2)(latents)
    _pipeline_folder(tmp_path / "pipe", weights)
    got = wan22vae.Decoder.from_pretrained(tmp_path / "pipe", subfolder="vae", device="cpu", threads=2)(latents)
    np.testing.assert_array_equal(got, ref)
    half = wan22vae.Decoder.from_pretrained(str(tmp_path / "pipe"), subfolder="vae", device="cpu", threads=2,
                                            torch_dtype="float16")(latents)
    assert half.dtype == np.float16
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.Decoder.from_pretrained(tmp_path / "pipe", subfolder="transformer", device="cpu")
    assert e.value.status == "W22_ERR_IO" and "transformer" in e.value.message
    with pytest.raises(wan22vae.Error, match="subfolder"):
        wan22vae.Decoder.from_pretrained(tmp_path / "pipe" / "vae" / "diffusion_pytorch_model.safetensors",
                                         subfolder="vae", device="cpu")


def test_from_pretrained_hub_repo_id(tmp_path, weights, latents, monkeypatch):
    """A Hugging Face repo id goes through huggingface_hub.snapshot_download (a stand-in here: no network)."""
    import types
    _pipeline_folder(tmp_path / "snap", weights)
    calls = []

    def snapshot_download(**kw):
        calls.append(kw)
        return str(tmp_path / "snap")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    got = wan22vae.Decoder.from_pretrained("Wan-AI/Wan2.2-TI2V-5B-Diffusers", subfolder="vae", device="cpu",
                                           threads=2)(latents)
    np.testing.assert_array_equal(got, wan22vae.Decoder(weights, device="cpu", threads=2)(latents))
    assert calls[0]["repo_id"] == "Wan-AI/Wan2.2-TI2V-5B-Diffusers" and calls[0]["allow_patterns"] == ["vae/*"]
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.Decoder.from_pretrained("Wan-AI/Wan2.2-TI2V-5B-Diffusers", subfolder="vae", device="cpu")
    assert e.value.status == "W22_ERR_IO" and "huggingface_hub is not installed" in e.value.message


# ---- de-normalizing pipeline latents (issue 31) ----
STATS = {"latents_mean": [0.5, -0.25, 0.125, 1.0], "latents_std": [2.0, 0.5, 1.5, 0.75]}


def test_denormalize_numpy(tmp_path, weights):
    rng = np.random.default_rng(0)
    z = rng.standard_normal((2, 4, 3, 2, 5)).astype(np.float32)
    mean = np.array(STATS["latents_mean"], np.float32).reshape(1, 4, 1, 1, 1)
    std = np.array(STATS["latents_std"], np.float32).reshape(1, 4, 1, 1, 1)
    got = wan22vae.denormalize_latents(z, STATS)
    assert got.dtype == np.float32 and got.shape == z.shape and got is not z
    np.testing.assert_allclose(got, z * std + mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got, z / (np.float32(1) / std) + mean)  # the pipeline's own order of operations
    np.testing.assert_array_equal(wan22vae.denormalize_latents(z[0], STATS), got[0])  # [C, T, h, w]
    # from a VAE folder, its config.json, a pipeline folder, a weight file with config.json next to it
    vae = _pipeline_folder(tmp_path / "pipe", weights)
    for source in (vae, vae / "config.json", tmp_path / "pipe", str(vae / "diffusion_pytorch_model.safetensors")):
        np.testing.assert_array_equal(wan22vae.denormalize_latents(z, source), got)
    # float64 and float16 stay, integers become float32
    assert wan22vae.denormalize_latents(z.astype(np.float64), STATS).dtype == np.float64
    assert wan22vae.denormalize_latents(z.astype(np.float16), STATS).dtype == np.float16
    assert wan22vae.denormalize_latents(np.ones((4, 1, 1, 1), np.int32), STATS).dtype == np.float32
    # None: Wan2.2 TI2V-5B's statistics
    z48 = rng.standard_normal((1, 48, 2, 2, 2)).astype(np.float32)
    m48 = np.array(wan22vae.TI2V_5B_LATENTS_MEAN, np.float32).reshape(1, 48, 1, 1, 1)
    s48 = np.array(wan22vae.TI2V_5B_LATENTS_STD, np.float32).reshape(1, 48, 1, 1, 1)
    np.testing.assert_allclose(wan22vae.denormalize_latents(z48), z48 * s48 + m48, rtol=1e-6, atol=1e-6)
    assert len(wan22vae.TI2V_5B_LATENTS_MEAN) == len(wan22vae.TI2V_5B_LATENTS_STD) == 48


def test_denormalize_errors(tmp_path, weights):
    z = np.zeros((1, 4, 1, 1, 1), np.float32)
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.denormalize_latents(np.zeros((1, 5, 1, 1, 1), np.float32), STATS)
    assert e.value.status == "W22_ERR_BAD_SHAPE" and "[B, 4, T, h, w]" in e.value.message
    with pytest.raises(wan22vae.Error, match="TI2V-5B"):
        wan22vae.denormalize_latents(z)  # 4 channels, the default statistics have 48
    with pytest.raises(wan22vae.Error, match="latents_std"):
        wan22vae.denormalize_latents(z, {"latents_mean": [0, 0, 0, 0]})
    with pytest.raises(wan22vae.Error, match="zero"):
        wan22vae.denormalize_latents(z, {"latents_mean": [0] * 4, "latents_std": [1, 0, 1, 1]})
    vae = _pipeline_folder(tmp_path / "nostats", weights, with_stats=False)
    with pytest.raises(wan22vae.Error) as e:
        wan22vae.denormalize_latents(z, vae)
    assert e.value.status == "W22_ERR_MISSING_TENSOR" and str(vae / "config.json") in e.value.message
    with pytest.raises(wan22vae.Error, match="W22_ERR_IO"):
        wan22vae.denormalize_latents(z, tmp_path / "absent")
    with pytest.raises(wan22vae.Error, match="W22_ERR_INVALID_ARG"):
        wan22vae.denormalize_latents(z, 3.5)


def test_denormalize_torch_is_the_pipelines_code():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        z = torch.randn(2, 4, 3, 2, 5, generator=g).to(dtype)
        # WanPipeline.__call__ (diffusers 0.42), with vae.config = STATS, z_dim 4
        mean = torch.tensor(STATS["latents_mean"]).view(1, 4, 1, 1, 1).to(z.device, z.dtype)
        std = 1.0 / torch.tensor(STATS["latents_std"]).view(1, 4, 1, 1, 1).to(z.device, z.dtype)
        want = z / std + mean
        got = wan22vae.denormalize_latents(z, STATS)
        assert got.dtype == dtype and torch.equal(got, want), dtype
    # numpy and torch agree for float32
    assert np.array_equal(wan22vae.denormalize_latents(z.float().numpy(), STATS),
                          wan22vae.denormalize_latents(z.float(), STATS).numpy())


# ---- wan22vae.diffusers and a Wan pipeline, on a small real AutoencoderKLWan (needs torch + diffusers) ----
SMALL_WAN = dict(base_dim=8, decoder_base_dim=8, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
                 temperal_downsample=[False, True, True], is_residual=True, in_channels=12, out_channels=12,
                 patch_size=2, scale_factor_temporal=4, scale_factor_spatial=16, **STATS)


@pytest.fixture(scope="module")
def small_wan():
    """A small AutoencoderKLWan (TI2V-5B's structure, z_dim 4, decoder_base_dim 8; diffusers' random init), float32
    on the CPU; tests take copies (enable() changes a VAE)."""
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    return diffusers.AutoencoderKLWan(**SMALL_WAN).eval()


@pytest.fixture
def small_vae(small_wan, monkeypatch):
    """A copy of small_wan that wan22vae.diffusers takes for TI2V-5B's config (the kernel path checks the config
    first; the full config would be 2.8 GB of float32 weights here)."""
    import copy
    import wan22vae.diffusers as wd
    monkeypatch.setattr(wd, "_config_reason", lambda cfg: None)
    vae = copy.deepcopy(small_wan)
    yield vae
    wd.disable(vae)


def _small_latents(dtype, B=2):
    import torch
    g = torch.Generator().manual_seed(1)
    return torch.randn(B, 4, 2, 3, 4, generator=g).to(dtype)


def test_diffusers_fp32_vae_on_cpu_falls_back_for_the_device(small_vae, monkeypatch):
    """A float32 VAE is not refused for its dtype any more: on the CPU it falls back because of the device; with
    allow_fp32=False (or W22_ALLOW_FP32=0) for its dtype, as before."""
    import torch
    import warnings
    import wan22vae.diffusers as wd
    z = _small_latents(torch.float32)
    # the device's words: no GPU at all is said as such (issue 47 item 5), a GPU machine's CPU VAE as its device
    device_words = "needs them on one GPU" if torch.cuda.is_available() else "no CUDA GPU is available"
    with torch.no_grad():
        theirs = small_vae.decode(z).sample
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert wd.enable(small_vae) is False
        st = wd.status(small_vae)
        assert device_words in st["reason"] and "float32" not in st["reason"], st
        with torch.no_grad():
            assert torch.equal(small_vae.decode(z).sample, theirs)
        assert wd.enable(small_vae, allow_fp32=False) is False
        assert "allow_fp32=False" in wd.status(small_vae)["reason"]
        monkeypatch.setenv("W22_ALLOW_FP32", "0")
        assert wd.enable(small_vae) is False
        reason = wd.status(small_vae)["reason"]
        assert "allow_fp32=False" in reason and "torch.float32" in reason, reason
        assert wd.enable(small_vae, allow_fp32=True) is False  # the argument wins over the environment
        assert device_words in wd.status(small_vae)["reason"]


SMALL_WAN21 = dict(base_dim=8, decoder_base_dim=8, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
                   temperal_downsample=[False, True, True], is_residual=False, in_channels=3, out_channels=3,
                   patch_size=None, scale_factor_temporal=4, scale_factor_spatial=8)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16", "float16"])
def test_diffusers_kernel_path_wan21_on_the_cpu_backend(monkeypatch, dtype_name):
    """enable() on a VAE of the Wan2.1 structure (is_residual False: small, diffusers' random init) takes it (the
    GPU check and the exact-config check stood in for: the real config's weights are 0.5 GB here) and decodes
    [B, 4, T, h, w] to diffusers' video within 3x its own bf16 decode's error, in the VAE's dtype."""
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    import copy
    import wan22vae.diffusers as wd
    monkeypatch.setattr(wd, "_gpu_reason", lambda vae: None)
    monkeypatch.setattr(wd, "_config_reason", lambda cfg: None)
    torch.manual_seed(0)
    vae = diffusers.AutoencoderKLWan(**SMALL_WAN21).eval()
    z32 = _small_latents(torch.float32)
    with torch.no_grad():
        ref = vae.decode(z32).sample
        theirs_bf16 = copy.deepcopy(vae).to(torch.bfloat16).decode(z32.to(torch.bfloat16)).sample.float()
    allow = 3 * float((theirs_bf16 - ref).abs().max())
    dtype = getattr(torch, dtype_name)
    vae = vae.to(dtype)
    try:
        assert wd.enable(vae) is True, wd.status(vae)
        with torch.no_grad():
            ours = vae.decode(z32.to(dtype)).sample
        assert wd.status(vae)["path"] == "kernel"
        assert ours.dtype == dtype and ours.shape == ref.shape == (2, 3, 5, 24, 32)
        err = float((ours.float() - ref).abs().max())
        assert err <= allow, f"max|d| {err:.4g} against diffusers' float32 decode; allowed {allow:.4g}"
    finally:
        wd.disable(vae)


def test_wan21_decode_flops_is_torchs_count():
    """w22_decode_flops of the Wan2.1 structure equals torch's FlopCounterMode over diffusers' own decode (its convs
    and attention products), at one and three latent frames."""
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    from torch.utils.flop_counter import FlopCounterMode
    torch.manual_seed(0)
    vae = diffusers.AutoencoderKLWan(**SMALL_WAN21).eval()
    cfg = wan22vae.config_from_diffusers(vae.config)
    for T, h, w in ((1, 4, 6), (3, 5, 3)):
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            vae.decode(torch.randn(1, 4, T, h, w))
        assert wan22vae.decode_flops(cfg, T, h, w) == fc.get_total_flops(), (T, h, w)


def test_wan21_from_pretrained_folder_on_the_cpu(tmp_path):
    """A small AutoencoderKLWan of the Wan2.1 structure saved by diffusers (save_pretrained: config.json with
    is_residual False, patch_size None; the whole VAE's weights): Decoder.from_pretrained recognises it and decodes
    to diffusers' float32 video within float32 rounding (tests/test_fixtures.c's bound)."""
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    vae = diffusers.AutoencoderKLWan(**SMALL_WAN21).eval()
    vae.save_pretrained(tmp_path / "vae")
    z = _small_latents(torch.float32, B=1)
    with torch.no_grad():
        ref = vae.decode(z).sample.numpy()
    dec = wan22vae.Decoder.from_pretrained(tmp_path, subfolder="vae", device="cpu")
    assert dec.config["is_residual"] == 0 and dec.config["patch_size"] == 1 and dec.config["out_channels"] == 3
    got = dec(z.numpy())
    assert got.shape == ref.shape == (1, 3, 5, 24, 32)
    assert float(np.abs(got - ref).max()) <= 1e-4
    dec.close()


def test_diffusers_kernel_path_qwen_image_on_the_cpu_backend(monkeypatch):
    """Qwen-Image's AutoencoderKLQwenImage is the Wan2.1 VAE under other names (the same parameters, the same decode:
    checked here bit for bit against AutoencoderKLWan): enable() takes it (small, the GPU check stood in for)."""
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    if not hasattr(diffusers, "AutoencoderKLQwenImage"):
        pytest.skip("this diffusers has no AutoencoderKLQwenImage")
    import wan22vae.diffusers as wd
    monkeypatch.setattr(wd, "_gpu_reason", lambda vae: None)
    torch.manual_seed(0)
    wan = diffusers.AutoencoderKLWan(base_dim=8, z_dim=4).eval()
    qwen = diffusers.AutoencoderKLQwenImage(base_dim=8, z_dim=4).eval()
    qwen.load_state_dict(wan.state_dict())
    assert wd._config_reason(diffusers.AutoencoderKLQwenImage().config) is None  # its real config: the Wan2.1 VAE's
    monkeypatch.setattr(wd, "_config_reason", lambda cfg: None)
    z = _small_latents(torch.float32, B=1)
    import copy
    with torch.no_grad():
        ref = wan.decode(z).sample
        assert torch.equal(qwen.decode(z).sample, ref)
        allow = 3 * float((copy.deepcopy(wan).to(torch.bfloat16).decode(z.bfloat16()).sample.float() - ref).abs().max())
        try:
            assert wd.enable(qwen) is True, wd.status(qwen)
            ours = qwen.decode(z).sample
            assert wd.status(qwen)["path"] == "kernel"
        finally:
            wd.disable(qwen)
    assert ours.shape == ref.shape and float((ours - ref).abs().max()) <= allow  # its weights went to bf16


def test_diffusers_fallback_said_once(small_vae, capfd):
    """Issue 47 item 5: a fallback's reason is one message (a RuntimeWarning; the logger's record is DEBUG, which
    logging's last-resort handler does not print), once per reason, not once per decode."""
    import torch
    import warnings
    import wan22vae.diffusers as wd
    z = _small_latents(torch.float32)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        wd.enable(small_vae)
        with torch.no_grad():
            small_vae.decode(z)
            small_vae.decode(z)
    mine = [w for w in got if "wan22vae" in str(w.message)]
    assert len(mine) == 1 and issubclass(mine[0].category, RuntimeWarning), [str(w.message) for w in mine]
    err = capfd.readouterr().err
    assert "falls back" not in err, err  # nothing printed besides the warning (recorded above, not shown)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16", "float16"])
def test_diffusers_kernel_path_logic_on_the_cpu_backend(small_vae, monkeypatch, caplog, dtype_name):
    """The kernel path's Python side (weights converted once to bf16, latents of the VAE's dtype, a batch, the video in
    the VAE's dtype, the log line, re-enable keeping the decoder, weights changed in place) through the library's
    CPU backend: the GPU check is stood in for (the GPU suite runs it for real on the CUDA kernels)."""
    import copy
    import logging
    import torch
    import warnings
    import wan22vae.diffusers as wd
    dtype = getattr(torch, dtype_name)
    monkeypatch.setattr(wd, "_gpu_reason", lambda vae: None)
    conversions = []
    real = wd._our_weights
    monkeypatch.setattr(wd, "_our_weights", lambda vae, cfg: conversions.append(1) or real(vae, cfg))
    z32 = _small_latents(torch.float32)
    with torch.no_grad():
        ref = small_vae.decode(z32).sample                        # diffusers' float32 decode
        vae_bf16 = copy.deepcopy(small_vae).to(torch.bfloat16)
        theirs_bf16 = vae_bf16.decode(z32.to(torch.bfloat16)).sample.float()
    allow = 3 * float((theirs_bf16 - ref).abs().max())
    vae = small_vae.to(dtype)
    z = z32.to(dtype)
    with caplog.at_level(logging.INFO, logger="wan22vae"):
        assert wd.enable(vae) is True
    notes = [r.getMessage() for r in caplog.records if "runs on wan22vae" in r.getMessage()]
    assert len(notes) == 1 and f"this torch.{dtype_name} VAE" in notes[0] and f"returned in torch.{dtype_name}" in \
        notes[0], notes
    assert ("allow_fp32=False" in notes[0]) == (dtype_name != "bfloat16")
    assert conversions == [1]
    with torch.no_grad():
        ours = vae.decode(z).sample
    assert wd.status(vae)["path"] == "kernel" and wd.status(vae)["dtype"] == dtype
    assert ours.dtype == dtype and ours.shape == ref.shape
    err = float((ours.float() - ref).abs().max())
    print(f"{dtype_name} VAE: max|d| {err:.4g} against diffusers' float32 decode (allowed {allow:.4g})")
    assert err <= allow, f"max|d| {err:.4g} against diffusers' float32 decode; allowed {allow:.4g} (3x its bf16)"
    with torch.no_grad():
        one = vae.decode(z[1:]).sample
    assert torch.equal(one[0], ours[1])  # a batch is its latents decoded one by one
    # enable() again with the weights unchanged: no second conversion
    assert wd.enable(vae) is True and conversions == [1]
    # weights changed in place: the next decode falls back and says why; enable() converts again
    with torch.no_grad():
        vae.decoder.conv_out.bias.mul_(1)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            fell = vae.decode(z).sample
    st = wd.status(vae)
    assert st["path"] == "diffusers" and "changed in place" in st["reason"], st
    assert fell.dtype == dtype
    assert wd.enable(vae) is True and conversions == [1, 1]
    with torch.no_grad():
        assert torch.equal(vae.decode(z).sample, ours)


def test_diffusers_kernel_path_latents_of_another_dtype_fall_back(small_vae, monkeypatch):
    import torch
    import warnings
    import wan22vae.diffusers as wd
    monkeypatch.setattr(wd, "_gpu_reason", lambda vae: None)
    assert wd.enable(small_vae) is True
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with torch.no_grad(), pytest.raises(RuntimeError):
            small_vae.decode(_small_latents(torch.bfloat16))  # diffusers' own error for it, as without enable()
    st = wd.status(small_vae)
    assert st["path"] == "diffusers" and "torch.bfloat16" in st["reason"] and "torch.float32" in st["reason"], st


def test_pipeline_latents_decode_to_the_pipelines_video(small_wan):
    """A (tiny) WanPipeline's output_type="latent" latents, de-normalized with wan22vae.denormalize_latents(z,
    pipe.vae), decode to the pipeline's own video: through diffusers' decode bit for bit, through the library's CPU
    decoder within float32 rounding; without the de-normalizing they do not."""
    import copy
    import torch
    pytest.importorskip("transformers")  # WanPipeline needs it importable (no text encoder is used)
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel
    torch.manual_seed(0)
    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8,
                                        in_channels=4, out_channels=4, text_dim=16, freq_dim=32, ffn_dim=16,
                                        num_layers=1, cross_attn_norm=True, rope_max_seq_len=32).eval()
    vae = copy.deepcopy(small_wan)
    pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=vae, transformer=transformer,
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0), expand_timesteps=True)
    pipe.set_progress_bar_config(disable=True)
    args = dict(prompt_embeds=torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(2)), height=32, width=64,
                num_frames=5, num_inference_steps=2, guidance_scale=1.0)
    latents = pipe(**args, generator=torch.Generator().manual_seed(1), output_type="latent").frames
    video = pipe(**args, generator=torch.Generator().manual_seed(1), output_type="pt").frames
    assert latents.shape == (1, 4, 2, 2, 4) and video.shape == (1, 5, 3, 32, 64)
    z = wan22vae.denormalize_latents(latents, pipe.vae)
    post = pipe.video_processor.postprocess_video
    with torch.no_grad():
        assert torch.equal(post(vae.decode(z).sample, output_type="pt"), video)
        raw = post(vae.decode(latents).sample, output_type="pt")
    assert float((raw - video).abs().max()) > 0.01  # the statistics matter here
    sd = {f"post_quant_conv.{k}": v for k, v in vae.post_quant_conv.state_dict().items()}
    sd.update({f"decoder.{k}": v for k, v in vae.decoder.state_dict().items()})
    dec = wan22vae.Decoder(wan22vae.weights_from_tensors(sd, wan22vae.config_from_diffusers(vae.config)),
                           device="cpu", threads=2)
    ours = post(dec(z), output_type="pt")
    assert float((ours - video).abs().max()) < 1e-5
    # the config as a dict gives the same
    assert torch.equal(wan22vae.denormalize_latents(latents, dict(vae.config)), z)
