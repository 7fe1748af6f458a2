# SPDX-License-Identifier: Apache-2.0
"""Tolerances the norm-family tests share: an output against its float64 reference."""
import torch


def ulp(t, dtype):
    return torch.finfo(dtype).eps * t.abs().clamp_min(torch.finfo(dtype).tiny)


def math_eps(dtype):
    return 1e-12 if dtype == torch.float64 else 1e-5


def assert_close(out, ref, dtype, scale, what):
    """out against the float64 ref: 4 ulp of dtype at |ref| plus math_eps(dtype) * scale."""
    assert out is not None, f"{what}: missing"
    assert out.dtype == dtype, f"{what}: dtype {out.dtype}, expected {dtype}"
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    o = out.double()
    nan_differs = o.isnan() != ref.isnan()
    assert not bool(nan_differs.any()), f"{what}: NaN pattern differs at {nan_differs.nonzero()[:4].tolist()}: got " \
                                        f"{o[nan_differs][:4].tolist()}, want {ref[nan_differs][:4].tolist()}"
    err = (o - ref).abs()
    allowed = 4 * ulp(ref, dtype) + math_eps(dtype) * scale
    bad = ref.isfinite() & (err > allowed)
    if bool(bad.any()):
        i = tuple(int(v) for v in bad.nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} off; first at {i}: got {o[i].item()!r}, "
                             f"want {ref[i].item()!r}, allowed {allowed[i].item()!r}")
