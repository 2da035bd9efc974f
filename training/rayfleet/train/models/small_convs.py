"""Convolutions over feature maps of a few pixels, computed as matrix products.

On 28x28 FashionMNIST, ResNet-18's last stages see 4x4, 2x2 and 1x1 feature maps. oneDNN (PyTorch's CPU
convolution) is built for large maps: its backward pass on a 1x1 map with a 3x3 kernel took 15x its forward
on this project's CI machine, and the whole layer4 backward about 45% of a training step. The same
convolution written as unfold + matmul is the same arithmetic (same parameters, same state_dict, the same
loss to float rounding) at GEMM speed. Where the output is a single pixel, only the kernel taps that land on
real input pixels count (the rest see zero padding), so the product uses just that slice of the weight.

`bench/vs_blueprint.py` measures the gain; DDPConfig.small_convs_as_gemm switches it.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

MAX_PIXELS = 16  # maps up to 4x4: measured fastest (2x2 only gains less, 7x7 maps are faster in oneDNN)
# On GPU (with torch.compile only): inputs up to 2x2, so every convolution with a 1x1 input or output, whose
# NCHW and channels_last layouts coincide, is a matrix product (see rayfleet.train.ddp.config.Runtime).
GPU_MAX_PIXELS = 4


def gemm_small_convs(model: torch.nn.Module, max_pixels: int = MAX_PIXELS) -> int:
    """Route every plain Conv2d of `model` through `small_conv` for inputs of at most `max_pixels` pixels.

    In place (parameter names and checkpoints do not change); returns how many convolutions were routed."""
    routed = 0
    for module in model.modules():
        if _eligible(module):
            module.small_conv_max_pixels = max_pixels
            # A bound method, not a closure: copy.deepcopy rebinds it to the copy (and so to its weights).
            module.forward = types.MethodType(_routed_forward, module)
            routed += 1
    return routed


def _routed_forward(conv: torch.nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    if x.shape[-2] * x.shape[-1] > conv.small_conv_max_pixels:
        return torch.nn.Conv2d.forward(conv, x)
    return small_conv(conv, x)


def _eligible(module: torch.nn.Module) -> bool:
    return (
        isinstance(module, torch.nn.Conv2d)
        and module.groups == 1
        and module.dilation == (1, 1)
        and module.padding_mode == "zeros"
        and isinstance(module.padding, tuple)
    )


def small_conv(conv: torch.nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """conv(x) as a matrix product; `x` is [N, C, H, W] with a small H x W."""
    n, _, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = conv.kernel_size, conv.stride, conv.padding
    out_h, out_w = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    if out_h == out_w == 1 and ph + h <= kh and pw + w <= kw:
        # One output pixel: it sees the input through the taps [ph, ph + h) x [pw, pw + w); the others see zeros.
        weight = conv.weight[:, :, ph : ph + h, pw : pw + w].reshape(conv.out_channels, -1)
        out = x.reshape(n, -1) @ weight.t()
    else:
        cols = F.unfold(x, (kh, kw), padding=(ph, pw), stride=(sh, sw))  # [N, C*kh*kw, L]
        # One [N*L, C*kh*kw] x [C*kh*kw, O] product, written out: under no_grad (evaluation) `weight @ cols`
        # is not folded by matmul but run as bmm on the weight broadcast N times, which oneDNN copies per
        # sample (2.4 GB per layer4 call at evaluation's batch of 1024): a bf16 forward then cost more per
        # image than a whole training step.
        rows = cols.transpose(1, 2).reshape(n * cols.shape[-1], -1)
        out = (rows @ conv.weight.reshape(conv.out_channels, -1).t()).reshape(n, -1, conv.out_channels)
        out = out.transpose(1, 2)  # [N, O, L]
    if conv.bias is not None:
        out = out + conv.bias.view(1, -1, 1) if out.dim() == 3 else out + conv.bias
    return out.reshape(n, conv.out_channels, out_h, out_w)
