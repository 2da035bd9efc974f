"""Small convolutions as matrix products: the same function and the same gradients as the convolution."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from rayfleet.train.models.resnet import resnet18_grayscale
from rayfleet.train.models.small_convs import gemm_small_convs, small_conv


class Broadcasts(TorchDispatchMode):
    """Records each operator that was given an operand broadcast along a dimension (stride 0, size > 1)."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if any(st == 0 and n > 1 for a in tensors for st, n in zip(a.stride(), a.shape, strict=True)):
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("grad", [False, True], ids=["evaluation", "training"])
@pytest.mark.parametrize(("stride", "size"), [(1, 2), (2, 4), (1, 4)])  # layer4's and layer3's maps
def test_the_weight_is_never_broadcast_over_the_batch(grad, stride, size):
    """The unfold path is one [N*L, C*k*k] x [C*k*k, O] product. `weight @ cols` left the batch to matmul,
    which under no_grad (evaluation) does not fold it and runs bmm on the weight broadcast N times: oneDNN
    copies it per sample (2.4 GB per layer4 call at evaluation's batch of 1024), and a bf16 forward cost more
    per image than a whole training step."""
    conv = torch.nn.Conv2d(32, 48, 3, stride=stride, padding=1, bias=False)
    x = torch.randn(16, 32, size, size, requires_grad=grad)
    with torch.set_grad_enabled(grad), torch.autocast("cpu", dtype=torch.bfloat16), Broadcasts() as seen:
        out = small_conv(conv, x)
        if grad:
            out.backward(torch.randn_like(out))
    assert seen.ops == []


@pytest.mark.parametrize(
    ("in_ch", "out_ch", "kernel", "stride", "padding", "size", "bias"),
    [
        (8, 6, 3, 1, 1, 1, False),  # one pixel in, one out: the centre tap only
        (8, 6, 3, 2, 1, 2, False),  # 2x2 -> 1x1, stride 2: four taps
        (8, 6, 3, 1, 1, 2, True),
        (8, 6, 3, 2, 1, 4, False),  # 4x4 -> 2x2 through unfold
        (8, 6, 1, 2, 0, 4, True),  # a 1x1 downsample
        (3, 5, (3, 2), 1, (0, 1), 3, True),
    ],
)
def test_small_conv_matches_the_convolution_and_its_gradients(in_ch, out_ch, kernel, stride, padding, size, bias):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(in_ch, out_ch, kernel, stride=stride, padding=padding, bias=bias).double()
    x = torch.randn(4, in_ch, size, size, dtype=torch.float64, requires_grad=True)
    expected = conv(x)
    got = small_conv(conv, x)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected)
    grad = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(expected, [x, conv.weight], grad)
    got_grads = torch.autograd.grad(got, [x, conv.weight], grad)
    for g, e in zip(got_grads, expected_grads, strict=True):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("channels_last", [False, True])
def test_routed_resnet_trains_like_the_plain_one(channels_last):
    torch.manual_seed(0)
    plain = resnet18_grayscale()
    routed = copy.deepcopy(plain)
    assert gemm_small_convs(routed) == 20  # every ResNet-18 convolution; only small inputs take the GEMM path
    if channels_last:
        plain, routed = (m.to(memory_format=torch.channels_last) for m in (plain, routed))
    assert routed.state_dict().keys() == plain.state_dict().keys()
    x, y = torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,))
    losses = []
    for model in (plain, routed):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(plain.named_parameters(), routed.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_a_copy_of_a_routed_model_computes_with_its_own_weights():
    conv = torch.nn.Conv2d(2, 3, 3, padding=1)
    gemm_small_convs(conv)
    twin = copy.deepcopy(conv)
    with torch.no_grad():
        twin.weight.zero_()
        twin.bias.fill_(1.0)
    x = torch.randn(1, 2, 2, 2)
    torch.testing.assert_close(twin(x), torch.ones(1, 3, 2, 2))
    torch.testing.assert_close(conv(x), F.conv2d(x, conv.weight, conv.bias, padding=1))


def test_large_inputs_keep_the_convolution(monkeypatch):
    conv = torch.nn.Conv2d(2, 2, 3, padding=1)
    gemm_small_convs(conv, max_pixels=16)
    calls = []
    monkeypatch.setattr("rayfleet.train.models.small_convs.small_conv", lambda *a: calls.append(a))
    conv(torch.randn(1, 2, 5, 5))
    assert calls == []
    conv(torch.randn(1, 2, 4, 4))
    assert len(calls) == 1
