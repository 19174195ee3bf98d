"""Tensors on a GPU with the CPU generators every sampler takes: the draw is made on the generator's device, so a
seed gives the same noise wherever the data lives. These need a CUDA GPU and are skipped, saying so, without one
(the CPU suite runs the same code paths with CPU tensors)."""

import pytest
import torch

from textfree.lm.generate import next_tokens
from textfree.mechanisms import Gaussian, L2Laplace
from textfree.mechanisms.slots import SlotPrivatization
from textfree.ppft.evaluate import random_unit_slots

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")


@pytest.mark.parametrize("mech", [L2Laplace(5.0), Gaussian(sigma=0.3)])
def test_noise_on_gpu_data_with_a_cpu_generator_equals_the_cpu_draw(mech):
    x = torch.randn(7, 16, generator=torch.Generator().manual_seed(1))
    cpu = mech.sample(x, generator=torch.Generator().manual_seed(0))
    gpu = mech.sample(x.cuda(), generator=torch.Generator().manual_seed(0))
    assert gpu.device.type == "cuda" and torch.allclose(gpu.cpu(), cpu, atol=1e-6)


def test_slot_privatization_of_gpu_states():
    priv = SlotPrivatization(noise=L2Laplace(10.0), k=2)
    hidden = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(2))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    cpu, cpu_mask = priv.apply(hidden, mask, generator=torch.Generator().manual_seed(3))
    gpu, gpu_mask = priv.apply(hidden.cuda(), mask.cuda(), generator=torch.Generator().manual_seed(3))
    assert torch.equal(gpu_mask.cpu(), cpu_mask) and torch.allclose(gpu.cpu(), cpu, atol=1e-5)


def test_sampled_next_tokens_of_gpu_logits_with_cpu_generators():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(4))
    gens = lambda: [torch.Generator().manual_seed(i) for i in range(3)]  # noqa: E731
    cpu = next_tokens(logits, temperature=0.8, top_p=0.9, generators=gens())
    gpu = next_tokens(logits.cuda(), temperature=0.8, top_p=0.9, generators=gens())
    assert gpu.device.type == "cuda" and torch.equal(gpu.cpu(), cpu)


def test_random_unit_slots_follow_the_mask_device():
    mask = torch.tensor([[True, True, False]], device="cuda")
    x = random_unit_slots(mask, 4, torch.Generator().manual_seed(5))
    assert x.device.type == "cuda" and torch.allclose(x[0, :2].norm(dim=-1), torch.ones(2, device="cuda"))
    assert torch.equal(x[0, 2], torch.zeros(4, device="cuda"))


def test_privatizer_with_an_encoder_on_the_gpu_writes_a_host_payload(tiny_encoder_dir):
    from textfree.encoders import ContextualEncoder
    from textfree.privatizer import Privatizer

    cpu_enc = ContextualEncoder.from_pretrained(tiny_encoder_dir)
    gpu_enc = ContextualEncoder.from_pretrained(tiny_encoder_dir, device="cuda")
    texts = ["a short prompt", "a somewhat longer prompt with more words in it"]
    cpu = Privatizer(cpu_enc, L2Laplace(50.0), 2).privatize(texts, seed=0)
    gpu = Privatizer(gpu_enc, L2Laplace(50.0), 2).privatize(texts, seed=0)
    assert gpu.vectors.device.type == "cpu" and gpu.lengths == cpu.lengths
    assert torch.allclose(gpu.vectors, cpu.vectors, atol=1e-4)
